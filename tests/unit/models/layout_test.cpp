// make_model_layout / inspect_checkpoint (attn info): the layout of a model without its memory
// lists exactly the parameters, shapes, dtypes and tied names of the built model, for every
// family and variant; it allocates no parameter memory; inspecting a folder gives the same
// checks and errors as loading it, without loading a weight.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "attn/core/error.h"
#include "attn/core/storage.h"
#include "attn/models/checkpoint.h"
#include "attn/models/factory.h"
#include "broken_checkpoints.h"
#include "model_test_util.h"

namespace attn::models {
namespace {

using test_util::TempDir;

// The variants that change the parameter list: each family, tied or not, learned positions,
// RMSNorm, no final norm, grouped-query attention, swiglu, experts, linear attention, f64,
// quantized int8 and bf16.
std::vector<std::pair<std::string, ModelConfig>> variants() {
  std::vector<std::pair<std::string, ModelConfig>> out;
  const ModelConfig base = test_util::broken_base_config();
  for (const Arch arch : {Arch::EncoderDecoder, Arch::DecoderOnly, Arch::EncoderOnly}) {
    ModelConfig c = base;
    c.arch = arch;
    if (arch != Arch::EncoderDecoder) c.tgt_vocab_size = c.src_vocab_size;
    const std::string a = arch_name(arch);
    out.emplace_back(a, c);
    ModelConfig v = c;
    v.share_embeddings = false;
    v.tie_output = false;
    out.emplace_back(a + " untied", v);
    v = c;
    v.share_embeddings = false;
    out.emplace_back(a + " output tied to an unshared target table", v);
    v = c;
    v.positional = nn::PositionalKind::Learned;
    v.norm = nn::NormKind::RMS;
    v.final_norm = false;
    out.emplace_back(a + " learned rms no-final-norm", v);
    v = c;
    v.n_heads = 4;
    v.n_kv_heads = 2;
    v.positional = nn::PositionalKind::Rope;
    // SwiGLU is gated: the encoder-only masked-LM head cannot take it (the config refuses it).
    if (arch != Arch::EncoderOnly) v.activation = nn::Activation::SwiGLU;
    out.emplace_back(a + (arch != Arch::EncoderOnly ? " gqa rope swiglu" : " gqa rope"), v);
    v = c;
    v.n_experts = 3;
    v.expert_top_k = 2;
    out.emplace_back(a + " experts", v);
    v = c;
    v.attention = nn::AttentionKind::Linear;
    out.emplace_back(a + " linear attention", v);
    v = c;
    v.dtype = DType::F64;
    out.emplace_back(a + " f64", v);
    v = c;
    v.quantization = Quantization::Int8;
    out.emplace_back(a + " int8", v);
    v = c;
    v.quantization = Quantization::BF16;
    v.n_experts = 2;
    out.emplace_back(a + " bf16 experts", v);
  }
  return out;
}

TEST(ModelLayout, ListsExactlyTheParametersShapesDtypesAndTiedNamesOfTheBuiltModel) {
  for (const auto& [what, config] : variants()) {
    SCOPED_TRACE(what);
    const auto built = make_model(config, ModelInit::None);
    const auto layout = make_model_layout(config);
    const nn::NamedTensors a = built->named_parameters(), b = layout->named_parameters();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].first, b[i].first);
      EXPECT_EQ(a[i].second.shape(), b[i].second.shape()) << a[i].first;
      EXPECT_EQ(a[i].second.dtype(), b[i].second.dtype()) << a[i].first;
    }
    EXPECT_EQ(built->tied_parameters(), layout->tied_parameters());
    EXPECT_EQ(built->num_parameters(), layout->num_parameters());
  }
}

// A layout holds no parameter memory (null data), while the built model does (the control).
TEST(ModelLayout, AllocatesNoParameterMemory) {
  ModelConfig c = test_util::broken_base_config();
  c.d_model = 256;
  c.d_ff = 1024;
  c.src_vocab_size = c.tgt_vocab_size = 4096;
  const auto layout = make_model_layout(c);
  for (const auto& [name, t] : layout->named_parameters()) {
    EXPECT_EQ(t.storage()->data(), nullptr) << name;
    EXPECT_EQ(t.storage()->nbytes(), static_cast<size_t>(t.numel()) * dtype_size(t.dtype())) << name;
  }
  const auto built = make_model(c, ModelInit::None);
  for (const auto& [name, t] : built->named_parameters()) EXPECT_NE(t.storage()->data(), nullptr) << name;
  // The guard ends with the layout: the next tensor is a real one.
  EXPECT_FALSE(shapes_only());
  EXPECT_NE(Tensor::zeros({4}).storage()->data(), nullptr);
}

// A model larger than any machine's memory can still be laid out; make_model refuses it.
TEST(ModelLayout, LaysOutAModelLargerThanMemoryThatMakeModelRefuses) {
  ModelConfig c = test_util::broken_base_config();
  c.arch = Arch::DecoderOnly;
  c.d_model = 16384;
  c.n_heads = 16;
  c.d_ff = 65536;
  c.n_decoder_layers = 8;
  c.src_vocab_size = c.tgt_vocab_size = 1000;
  if (physical_memory_bytes() == 0 ||
      static_cast<double>(physical_memory_bytes()) > 4.0 * static_cast<double>(c.min_parameters())) {
    GTEST_SKIP() << "this machine's memory would hold the model";
  }
  const auto layout = make_model_layout(c);
  EXPECT_GE(layout->num_parameters(), c.min_parameters());
  try {
    (void)make_model(c, ModelInit::None);
    ADD_FAILURE() << "make_model built a model larger than memory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("more than this machine's"), std::string::npos) << e.what();
  }
}

TEST(InspectCheckpoint, GivesTheHeaderAndLayoutOfAFolderWithoutLoadingIt) {
  for (const auto& [what, config] : variants()) {
    SCOPED_TRACE(what);
    TempDir tmp("attn_layout");
    const auto model = make_model(config);
    save_model(tmp.path, *model);
    const LoadedCheckpoint info = inspect_checkpoint(tmp.path);
    const LoadedCheckpoint loaded = load_checkpoint(tmp.path);
    ASSERT_EQ(info.tensors.size(), loaded.tensors.size());
    for (size_t i = 0; i < info.tensors.size(); ++i) {
      EXPECT_EQ(info.tensors[i].name, loaded.tensors[i].name);
      EXPECT_EQ(info.tensors[i].shape, loaded.tensors[i].shape);
    }
    EXPECT_EQ(info.sources, loaded.sources);
    EXPECT_EQ(info.model->tied_parameters(), model->tied_parameters());
    for (const auto& [name, t] : info.model->named_parameters()) EXPECT_EQ(t.storage()->data(), nullptr) << name;
  }
}

// Every broken folder is refused by inspect_checkpoint with load_checkpoint's message.
TEST(InspectCheckpoint, RefusesEveryBrokenFolderAsLoadingDoes) {
  for (const auto& bc : test_util::broken_cases()) {
    SCOPED_TRACE(bc.name);
    TempDir tmp("attn_layout");
    save_model(tmp.path, *make_model(test_util::broken_base_config()));
    bc.damage(tmp.path);
    std::string load_error, inspect_error;
    try {
      (void)load_checkpoint(tmp.path);
    } catch (const Error& e) {
      load_error = e.what();
    }
    try {
      (void)inspect_checkpoint(tmp.path);
    } catch (const Error& e) {
      inspect_error = e.what();
    }
    EXPECT_FALSE(load_error.empty());
    EXPECT_EQ(inspect_error, load_error);
  }
}

}  // namespace
}  // namespace attn::models
