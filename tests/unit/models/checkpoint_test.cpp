// save_model / load_model: round trips of the three families with identical outputs, the
// folder's exact contents (no temporaries, config.json with every key, tied tensors once),
// and every bad-input case of broken_checkpoints.h as an attn::Error naming file, tensor, problem.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "attn/core/autograd.h"
#include "attn/core/error.h"
#include "attn/io/atomic_file.h"
#include "attn/io/safetensors.h"
#include "attn/models/checkpoint.h"
#include "attn/models/factory.h"
#include "broken_checkpoints.h"
#include "model_test_util.h"

namespace attn::models {
namespace {

namespace fs = std::filesystem;
using test_util::TempDir;

std::set<std::string> folder_listing(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

// Overwrites every parameter with fresh normal values, so that a loaded model can only match
// the saved one if the weights really came from the file (not from the shared seed's init).
void randomise(const Model& model, uint64_t seed) {
  Rng rng(seed);
  NoGradGuard no_grad;
  for (const auto& [name, p] : model.named_parameters()) p.copy_from(Tensor::randn(p.shape(), rng, p.dtype(), 0.0, 0.5));
}

// The model's output on fixed ids (evaluation mode), as doubles.
std::vector<double> outputs(Model& model) {
  model.eval();
  NoGradGuard no_grad;
  const Tensor ids = test_util::ids({1, 3, 4, 5, 2, 6, 3, 1, 4, 0}, 2, 5);
  if (auto ed = dynamic_cast<EncoderDecoderModel*>(&model)) {
    return ed->forward(ids, test_util::ids({1, 5, 4, 1, 3, 0}, 2, 3)).to_vector<double>();
  }
  if (auto dec = dynamic_cast<DecoderOnlyModel*>(&model)) return dec->forward(ids).to_vector<double>();
  return dynamic_cast<EncoderOnlyModel&>(model).forward(ids).to_vector<double>();
}

// The attn::Error message of load_model(dir); fails the test when it loads.
std::string load_error(const std::string& dir) {
  try {
    (void)load_model(dir);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected load_model to throw attn::Error for " << dir;
  return "";
}

void expect_round_trip(ModelConfig config) {
  TempDir tmp;
  const std::string dir = tmp.file("model");
  auto model = make_model(config);
  randomise(*model, 1234);
  save_model(dir, *model);
  auto loaded = load_model(dir);
  EXPECT_EQ(loaded->arch(), config.arch);
  EXPECT_EQ(loaded->config().to_json(), config.to_json());
  const std::vector<double> want = outputs(*model);
  EXPECT_EQ(outputs(*loaded), want) << "outputs must be bit-identical after reload";
  // Control: a model freshly built from the same config (same seed) differs.
  auto fresh = make_model(config);
  EXPECT_NE(outputs(*fresh), want);
  // Every parameter, tied ones included, equals its saved value.
  for (const auto& [name, p] : model->named_parameters())
    EXPECT_EQ(loaded->parameter(name).to_vector<double>(), p.to_vector<double>()) << name;
  EXPECT_EQ(loaded->tied_parameters(), model->tied_parameters());
}

TEST(Checkpoint, EncoderDecoderRoundTripGivesIdenticalOutputs) {
  expect_round_trip(test_util::tiny(Arch::EncoderDecoder));
  ModelConfig untied = test_util::tiny(Arch::EncoderDecoder);
  untied.share_embeddings = false;
  untied.tie_output = false;
  untied.tgt_vocab_size = 9;
  untied.positional = nn::PositionalKind::Learned;
  untied.dtype = DType::F32;
  expect_round_trip(untied);
}

TEST(Checkpoint, DecoderOnlyRoundTripGivesIdenticalOutputs) {
  expect_round_trip(test_util::tiny(Arch::DecoderOnly));
  ModelConfig c = test_util::tiny(Arch::DecoderOnly);
  c.tie_output = false;
  c.norm = nn::NormKind::RMS;
  c.norm_first = true;
  c.dtype = DType::F32;
  expect_round_trip(c);
}

TEST(Checkpoint, EncoderOnlyRoundTripGivesIdenticalOutputs) {
  expect_round_trip(test_util::tiny(Arch::EncoderOnly));
  ModelConfig c = test_util::tiny(Arch::EncoderOnly);
  c.tie_output = false;
  c.positional = nn::PositionalKind::Learned;
  c.activation = nn::Activation::GELU;
  expect_round_trip(c);
}

TEST(Checkpoint, FolderHoldsExactlyTheModelFilesAndExtrasWithNoTemporaries) {
  TempDir tmp;
  const std::string dir = tmp.file("a/b/model");  // parents are created
  auto model = make_model(test_util::tiny(Arch::DecoderOnly));
  save_model(dir, *model, {{"vocab.json", "{\"a\": 3}"}});
  EXPECT_EQ(folder_listing(dir), (std::set<std::string>{"config.json", "model.safetensors", "vocab.json"}));
  EXPECT_EQ(io::read_file(dir + "/vocab.json"), "{\"a\": 3}");
  // Saving again over the same folder still leaves no temporary behind.
  save_model(dir, *model, {{"vocab.json", "{}"}});
  EXPECT_EQ(folder_listing(dir), (std::set<std::string>{"config.json", "model.safetensors", "vocab.json"}));
  EXPECT_EQ(io::read_file(dir + "/vocab.json"), "{}");
}

TEST(Checkpoint, ConfigJsonHoldsEveryKeyAndWeightsCarryTheFormatMetadata) {
  TempDir tmp;
  ModelConfig c = test_util::tiny(Arch::EncoderOnly);
  c.seed = 99;
  auto model = make_model(c);
  save_model(tmp.path, *model);
  const nlohmann::json j = nlohmann::json::parse(io::read_file(tmp.file("config.json")));
  EXPECT_EQ(j, c.to_json());
  EXPECT_EQ(j.size(), c.to_json().size());
  EXPECT_EQ(load_model_config(tmp.path).to_json(), c.to_json());
  const auto file = io::SafetensorsFile::open(tmp.file("model.safetensors"));
  EXPECT_EQ(file.metadata().at("format"), "attn");
  EXPECT_FALSE(file.metadata().at("attn_version").empty());
  // The file holds exactly the model's parameters, each once.
  std::vector<std::string> names = file.names(), want = test_util::names_of(*model);
  std::sort(names.begin(), names.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(names, want);
}

TEST(Checkpoint, TiedTensorsAreStoredOnceUnderTheEmbeddingName) {
  TempDir tmp;
  auto model = make_model(test_util::tiny(Arch::EncoderDecoder));  // share_embeddings + tie_output
  save_model(tmp.path, *model);
  const auto names = test_util::file_tensor_names(tmp.path);
  auto has = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  EXPECT_TRUE(has("src_embedding.weight"));
  EXPECT_FALSE(has("tgt_embedding.weight"));
  EXPECT_FALSE(has("generator.weight"));
  EXPECT_TRUE(has("generator.bias"));
  auto loaded = std::dynamic_pointer_cast<EncoderDecoderModel>(load_model(tmp.path));
  ASSERT_NE(loaded, nullptr);
  EXPECT_TRUE(loaded->generator().weight().same(loaded->src_embedding().weight()));
  EXPECT_TRUE(loaded->tgt_embedding().weight().same(loaded->src_embedding().weight()));
}

TEST(Checkpoint, TiedNamesStoredTwiceLoadWhenEqualAndAreAnErrorWhenTheyDiffer) {
  TempDir tmp;
  auto model = make_model(test_util::tiny(Arch::DecoderOnly));  // lm_head.weight is embedding.weight
  randomise(*model, 5);
  save_model(tmp.path, *model);
  const Tensor emb = model->parameter("embedding.weight");
  // PyTorch's state_dict keeps both names of a tied tensor: equal copies load.
  test_util::edit_tensors(tmp.path, [&](io::NamedTensors& ts) { ts.emplace_back("lm_head.weight", emb.clone()); });
  EXPECT_EQ(outputs(*load_model(tmp.path)), outputs(*model));
  // Only the alias present also loads.
  test_util::edit_tensors(tmp.path, [&](io::NamedTensors& ts) {
    std::erase_if(ts, [](const auto& p) { return p.first == "embedding.weight"; });
  });
  EXPECT_EQ(outputs(*load_model(tmp.path)), outputs(*model));
  // Both present with different values contradict config.json's tie_output.
  test_util::edit_tensors(tmp.path, [&](io::NamedTensors& ts) { ts.emplace_back("embedding.weight", emb.clone()); });
  test_util::edit_tensors(tmp.path, [&](io::NamedTensors& ts) {
    for (auto& [n, v] : ts)
      if (n == "lm_head.weight") v.fill(0.25);
  });
  const std::string msg = load_error(tmp.path);
  EXPECT_NE(msg.find("lm_head.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("differs from 'embedding.weight'"), std::string::npos) << msg;
  EXPECT_NE(msg.find(tmp.file("model.safetensors")), std::string::npos) << msg;
}

TEST(Checkpoint, TwoAliasesWithoutTheEmbeddingNameMustAgree) {
  TempDir tmp;
  auto model = make_model(test_util::tiny(Arch::EncoderDecoder));  // three names, one tensor
  save_model(tmp.path, *model);
  const Tensor emb = model->parameter("src_embedding.weight");
  test_util::edit_tensors(tmp.path, [&](io::NamedTensors& ts) {
    std::erase_if(ts, [](const auto& p) { return p.first == "src_embedding.weight"; });
    ts.emplace_back("tgt_embedding.weight", emb.clone());
    ts.emplace_back("generator.weight", emb.clone());
  });
  EXPECT_EQ(outputs(*load_model(tmp.path)), outputs(*model));
  test_util::edit_tensors(tmp.path, [&](io::NamedTensors& ts) {
    for (auto& [n, v] : ts)
      if (n == "generator.weight") v.fill(-1.0);
  });
  const std::string msg = load_error(tmp.path);
  // The later of the two in file order is reported against the earlier.
  EXPECT_NE(msg.find("'tgt_embedding.weight': differs from 'generator.weight'"), std::string::npos) << msg;
}

TEST(Checkpoint, SavingOverAnOlderModelReplacesItWhole) {
  TempDir tmp;
  ModelConfig small = test_util::tiny(Arch::DecoderOnly);
  ModelConfig wider = small;
  wider.d_ff = 24;
  wider.seed = 3;
  save_model(tmp.path, *make_model(small));
  auto model = make_model(wider);
  save_model(tmp.path, *model);
  auto loaded = load_model(tmp.path);
  EXPECT_EQ(loaded->config().d_ff, 24);
  EXPECT_EQ(outputs(*loaded), outputs(*model));
}

TEST(Checkpoint, RejectsBadExtraFileNamesBeforeWritingAnything) {
  TempDir tmp;
  auto model = make_model(test_util::tiny(Arch::DecoderOnly));
  for (const std::string bad : {"", ".", "..", "sub/vocab.json", "config.json", "model.safetensors"}) {
    EXPECT_THROW(save_model(tmp.file("m"), *model, {{bad, "x"}}), Error) << bad;
  }
  EXPECT_FALSE(fs::exists(tmp.file("m")));
  io::write_file_atomic(tmp.file("plain"), "not a folder");
  EXPECT_THROW(save_model(tmp.file("plain"), *model), Error);
}

// tools/torch_export.py writes config.json from attn_config() and reads absent keys as
// ATTN_DEFAULTS: both must use ModelConfig's JSON keys, and the defaults must be config.h's.
TEST(Checkpoint, TorchExportUsesTheConfigKeysAndDefaultsOfModelConfig) {
  const std::string py = io::read_file(std::string(ATTN_SOURCE_DIR) + "/tools/torch_export.py");
  const nlohmann::json defaults = ModelConfig{}.to_json();
  // ATTN_DEFAULTS = {...}: a Python dict literal that is JSON once True/False are lowered.
  const size_t begin = py.find('{', py.find("ATTN_DEFAULTS = {"));
  ASSERT_NE(begin, std::string::npos);
  std::string literal = py.substr(begin, py.find('}', begin) - begin + 1);
  for (auto [from, to] : {std::pair<std::string, std::string>{"True", "true"}, {"False", "false"}})
    for (size_t at = literal.find(from); at != std::string::npos; at = literal.find(from, at))
      literal.replace(at, from.size(), to);
  const size_t last = literal.find_last_not_of(" \n}");
  if (literal[last] == ',') literal.erase(last, 1);  // Python allows a trailing comma
  EXPECT_EQ(nlohmann::json::parse(literal), defaults);
  // Every key attn_config() returns is a ModelConfig key.
  const size_t fn = py.find("def attn_config(self):");
  ASSERT_NE(fn, std::string::npos);
  const std::string body = py.substr(fn, py.find("\n\n", fn) - fn);
  int keys = 0;
  for (size_t at = body.find("\n            \""); at != std::string::npos; at = body.find("\n            \"", at + 1)) {
    const size_t q = at + 14;
    const std::string key = body.substr(q, body.find('"', q) - q);
    EXPECT_TRUE(defaults.contains(key)) << "attn_config() key '" << key << "' is not a ModelConfig key";
    ++keys;
  }
  EXPECT_GE(keys, 20);
}

TEST(Checkpoint, MissingFolderIsAClearError) {
  TempDir tmp;
  const std::string msg = load_error(tmp.file("nope"));
  EXPECT_NE(msg.find(tmp.file("nope")), std::string::npos) << msg;
  EXPECT_NE(msg.find("no such model folder"), std::string::npos) << msg;
  io::write_file_atomic(tmp.file("plain"), "x");
  EXPECT_NE(load_error(tmp.file("plain")).find("not a folder"), std::string::npos);
}

TEST(Checkpoint, EachBrokenCheckpointIsAnErrorNamingFileTensorAndProblem) {
  for (const test_util::BrokenCase& bc : test_util::broken_cases()) {
    SCOPED_TRACE(bc.name);
    TempDir tmp;
    save_model(tmp.path, *make_model(test_util::broken_base_config()));
    ASSERT_NO_THROW(load_model(tmp.path));  // control: the folder loads before the damage
    const std::string tensor = bc.damage(tmp.path);
    EXPECT_THROW(load_model(tmp.path), Error);
    const std::string msg = load_error(tmp.path);
    EXPECT_NE(msg.find(tmp.path + "/" + bc.file), std::string::npos) << msg;
    if (!tensor.empty()) {
      EXPECT_NE(msg.find(tensor), std::string::npos) << msg;
    }
    EXPECT_NE(msg.find(bc.problem), std::string::npos) << msg;
  }
}

TEST(Checkpoint, TruncationInsideTheHeaderIsAnErrorToo) {
  TempDir tmp;
  save_model(tmp.path, *make_model(test_util::broken_base_config()));
  for (uintmax_t size : {uintmax_t{0}, uintmax_t{5}, uintmax_t{8}, uintmax_t{40}}) {
    fs::resize_file(tmp.file("model.safetensors"), size);
    const std::string msg = load_error(tmp.path);
    EXPECT_NE(msg.find(tmp.file("model.safetensors")), std::string::npos) << msg;
  }
}

TEST(Checkpoint, AShapeMismatchListsEveryAffectedTensor) {
  TempDir tmp;
  save_model(tmp.path, *make_model(test_util::broken_base_config()));
  test_util::edit_config(tmp.path, [](nlohmann::json& j) { j["d_ff"] = 32; });
  const std::string msg = load_error(tmp.path);
  for (const std::string t : {"encoder.layers.0.linear1.weight", "encoder.layers.0.linear1.bias",
                              "encoder.layers.0.linear2.weight", "decoder.layers.0.linear1.weight",
                              "decoder.layers.0.linear1.bias", "decoder.layers.0.linear2.weight"}) {
    EXPECT_NE(msg.find("'" + t + "'"), std::string::npos) << t << "\n" << msg;
  }
  EXPECT_NE(msg.find("6 problems"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("linear2.bias"), std::string::npos) << msg;  // [D] does not depend on d_ff
}

}  // namespace
}  // namespace attn::models
