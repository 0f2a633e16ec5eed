// Training the single-stack models (trainer.h with objective.h): language-model batches, the
// text-run settings of TrainConfig, a tiny decoder-only and a tiny encoder-only model that learn
// a text file in about a second, validation against brute-force per-line sums, fixed validation
// masks, and --resume repeating the uninterrupted run bit for bit for both families.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attn/core/autograd.h"
#include "attn/core/error.h"
#include "attn/io/atomic_file.h"
#include "attn/models/checkpoint.h"
#include "attn/ops/ops.h"
#include "attn/train/checkpointing.h"
#include "attn/train/text_data.h"
#include "attn/train/trainer.h"
#include "unit/models/broken_checkpoints.h"
#include "unit/train/tiny_runs.h"

namespace attn::train {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using models::Arch;
using models::test_util::TempDir;
using Ids = std::vector<int64_t>;

// Lines of 8 letters that follow the alphabet a..p cyclically from each start ("abcdefgh",
// "bcdefghi", ..., "pabcdefg"), each `copies` times: the next letter is always the successor.
std::string alphabet_text(int copies) {
  const std::string letters = "abcdefghijklmnop";
  std::string text;
  for (int c = 0; c < copies; ++c)
    for (size_t start = 0; start < letters.size(); ++start) {
      for (size_t k = 0; k < 8; ++k) text += letters[(start + k) % letters.size()];
      text += "\n";
    }
  return text;
}

// Lines of one letter of a..p repeated 4 to 8 times, each letter `copies` times: a masked
// letter is any other letter of its line (a position-free rule that one small layer learns in a
// few dozen steps; the successor rule of alphabet_text needs relative positions, which is slow).
std::string letter_text(int copies) {
  const std::string letters = "abcdefghijklmnop";
  std::string text;
  for (int c = 0; c < copies; ++c)
    for (size_t k = 0; k < letters.size(); ++k) text += std::string(4 + (k + static_cast<size_t>(c)) % 5, letters[k]) + "\n";
  return text;
}

// D=16, 2 heads, 1 layer, dropout on, batches of 16 lines (4 steps per epoch of 64 lines).
TrainConfig lm_config(const TempDir& tmp, Arch arch) {
  const auto text = arch == Arch::EncoderOnly ? letter_text : alphabet_text;
  io::write_file_atomic(tmp.file("train.txt"), text(4));
  io::write_file_atomic(tmp.file("valid.txt"), text(1));
  TrainConfig c;
  c.task = "";
  c.text_path = tmp.file("train.txt");
  c.valid_text_path = tmp.file("valid.txt");
  c.model.arch = arch;
  test_util::make_tiny(c.model);
  c.model.attention_dropout = 0.1;
  c.epochs = 2;
  c.batch_size = 16;
  c.schedule = ScheduleKind::Constant;
  c.lr = 0.01;
  c.warmup = 10;
  c.label_smoothing = 0.0;
  c.threads = 1;
  c.seed = 3;
  return c;
}

using test_util::weights_of;

// ---- batches and config ----------------------------------------------------------------------

TEST(LmBatch, FeedsBosAndLinePredictsLineAndEos) {
  const std::vector<io::Example> data = {{{}, {5, 6, 7}}, {{}, {8}}};
  const Batch b = make_lm_batch(data, {1, 0});
  EXPECT_FALSE(b.src.defined());
  EXPECT_EQ(b.tgt_in.shape(), (Shape{2, 4}));
  EXPECT_EQ(b.tgt_in.to_vector<int64_t>(), (Ids{1, 8, 0, 0, 1, 5, 6, 7}));
  EXPECT_EQ(b.tgt_out.to_vector<int64_t>(), (Ids{8, 2, 0, 0, 5, 6, 7, 2}));
  EXPECT_EQ(b.n_tgt_tokens, 2 + 4);
  EXPECT_EQ(b.tgt_lengths, (Ids{1, 3}));
  EXPECT_THROW(make_lm_batch(data, {}), Error);
  EXPECT_THROW(make_lm_batch(data, {2}), Error);
  EXPECT_THROW(make_lm_batch(std::vector<io::Example>{{{5}, {}}}, {0}), Error);  // a masked-LM example
  // The iterator plans text examples of either layout, costed by their row length.
  EXPECT_EQ(example_tokens(data[0]), 4);
  EXPECT_EQ(example_tokens(io::Example{{5, 6, 7}, {}}), 3);
  BatchingOptions o;
  o.batch_size = 1;
  BatchIterator it(data, o);
  EXPECT_EQ(it.num_batches(), 2);
  EXPECT_THROW(BatchIterator(std::vector<io::Example>{{{}, {}}}, o), Error);
}

TEST(TrainConfig, TextRunsNeedASingleStackArchAndViceVersa) {
  auto message = [](const TrainConfig& c) {
    try {
      c.validate();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  TrainConfig c;
  c.task = "";
  c.text_path = "t.txt";
  EXPECT_NE(message(c).find("decoder_only or encoder_only"), std::string::npos) << message(c);
  c.model.arch = Arch::DecoderOnly;
  EXPECT_EQ(message(c), "(no error)");
  c.model.n_encoder_layers = 0;  // the stack a decoder-only model does not have
  EXPECT_EQ(message(c), "(no error)");
  c.model.n_decoder_layers = 0;
  EXPECT_NE(message(c).find("decoder layer"), std::string::npos);
  c.model.n_decoder_layers = 1;
  c.valid_path = "v.tsv";
  EXPECT_NE(message(c).find("valid_text"), std::string::npos);
  c.valid_path = "";
  c.valid_text_path = "t.txt";
  EXPECT_NE(message(c).find("validation text is the training text"), std::string::npos);
  c.valid_text_path = "";
  c.model.arch = Arch::EncoderOnly;
  c.model.n_encoder_layers = 1;
  c.mask_prob = 1.0;
  EXPECT_NE(message(c).find("mask_prob"), std::string::npos);
  TrainConfig task_lm;  // the reverse task with a decoder-only model
  task_lm.model.arch = Arch::DecoderOnly;
  EXPECT_NE(message(task_lm).find("trains on a text file"), std::string::npos);
  TrainConfig both;
  both.text_path = "t.txt";  // and the default task
  both.model.arch = Arch::DecoderOnly;
  EXPECT_NE(message(both).find("not both"), std::string::npos);
  TrainConfig no_text;
  no_text.task = "";
  no_text.valid_text_path = "v.txt";
  no_text.model.arch = Arch::DecoderOnly;
  EXPECT_NE(message(no_text).find("no data"), std::string::npos);
  // The text keys travel through JSON.
  TrainConfig j = c;
  j.mask_prob = 0.2;
  j.valid_text_path = "v.txt";
  const TrainConfig back = TrainConfig::from_json(json::parse(j.to_json().dump()));
  EXPECT_TRUE(back == j);
  EXPECT_EQ(back.text_path, "t.txt");
  EXPECT_EQ(back.mask_prob, 0.2);
  EXPECT_EQ(back.model.arch, Arch::EncoderOnly);
}

// ---- decoder-only ------------------------------------------------------------------------------

TEST(LmTrainer, DecoderOnlyModelLearnsATextFile) {
  TempDir tmp("attn_lm_trainer");
  TrainConfig c = lm_config(tmp, Arch::DecoderOnly);
  c.epochs = 5;
  Trainer t(c, tmp.file("run"));
  const auto& m = t.run();
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(t.step(), 5 * 4);
  EXPECT_LT(m.back().loss, 0.6 * m.front().loss);
  EXPECT_LT(m.back().val_loss, m.front().val_loss);
  EXPECT_NEAR(m.back().val_ppl, std::exp(m.back().val_nll), 1e-9 * m.back().val_ppl);
  EXPECT_LT(m.back().val_ppl, 8.0);  // uniform over the 16 letters + EOS would be 17
  EXPECT_GT(m.back().val_token_acc, m.front().val_token_acc);
  EXPECT_TRUE(std::isnan(m.back().val_exact_acc));
  // The folder holds a decoder-only model without the encoder stack, and its vocabulary.
  const models::ModelConfig saved = models::load_model_config(tmp.file("run"));
  EXPECT_EQ(saved.arch, Arch::DecoderOnly);
  EXPECT_EQ(saved.n_encoder_layers, 0);
  EXPECT_EQ(saved.vocab_size(), 4 + 16);
  EXPECT_FALSE(io::Vocab::load(tmp.file("run/vocab.json")).has_mask());
  const std::string metrics = io::read_file(tmp.file("run/metrics.jsonl"));
  const json line = json::parse(metrics.substr(0, metrics.find('\n')));
  EXPECT_TRUE(line.contains("val_ppl"));
  EXPECT_TRUE(line["val_exact_acc"].is_null());
}

TEST(LmTrainer, LanguageModelValidationEqualsPerLineSums) {
  TempDir tmp("attn_lm_trainer");
  Trainer t(lm_config(tmp, Arch::DecoderOnly), tmp.file("run"));
  t.run(3);
  auto& model = dynamic_cast<models::DecoderOnlyModel&>(t.model());
  // Lines of different lengths, so that the batch pads.
  const std::vector<io::Example> lines = {{{}, {4, 5, 6}}, {{}, {7}}, {{}, {8, 9, 10, 11, 12}}};
  const ValidationResult v = validate_language_model(model, lines, 2, 0.0);
  EXPECT_TRUE(model.is_training());  // restored
  model.eval();
  NoGradGuard no_grad;
  double nll = 0;
  int64_t tokens = 0, hits = 0;
  for (const io::Example& e : lines) {
    Ids in{io::Vocab::kBos};
    in.insert(in.end(), e.tgt.begin(), e.tgt.end());
    Ids out = e.tgt;
    out.push_back(io::Vocab::kEos);
    const Tensor lp = log_softmax(model.forward(Tensor::from_vector<int64_t>(in, {1, static_cast<int64_t>(in.size())})));
    const std::vector<double> v2 = lp.to_vector<double>();
    const int64_t V = lp.size(2);
    for (size_t i = 0; i < out.size(); ++i) {
      const double* row = v2.data() + static_cast<int64_t>(i) * V;
      nll -= row[out[i]];
      hits += (std::max_element(row, row + V) - row) == out[i] ? 1 : 0;
      ++tokens;
    }
  }
  EXPECT_EQ(v.tokens, tokens);
  EXPECT_EQ(v.sequences, 3);
  EXPECT_NEAR(v.nll, nll / static_cast<double>(tokens), 1e-5);
  EXPECT_NEAR(v.loss, v.nll, 1e-12);  // no label smoothing
  EXPECT_NEAR(v.token_acc, static_cast<double>(hits) / static_cast<double>(tokens), 1e-12);
}

void expect_exact_resume(Arch arch) {
  TempDir tmp("attn_lm_trainer");
  TrainConfig c = lm_config(tmp, arch);
  c.epochs = 3;
  c.checkpoint_every = 3;
  Trainer whole(c, tmp.file("whole"));
  whole.run();
  const std::vector<double> all = whole.step_losses();
  ASSERT_EQ(all.size(), 12u);
  {
    Trainer first(c, tmp.file("stopped"));
    first.run(7);  // a crash after step 7: the last checkpoint is at step 6, inside epoch 2
  }
  auto resumed = Trainer::resume(tmp.file("stopped"));
  EXPECT_EQ(resumed->step(), 6);
  resumed->run();
  EXPECT_EQ(resumed->step_losses(), std::vector<double>(all.begin() + 6, all.end()));
  EXPECT_EQ(weights_of(resumed->model()), weights_of(whole.model()));
  ASSERT_EQ(resumed->metrics().size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(resumed->metrics()[i].loss, whole.metrics()[i].loss) << "epoch " << i + 1;
    EXPECT_EQ(resumed->metrics()[i].val_loss, whole.metrics()[i].val_loss) << "epoch " << i + 1;
    EXPECT_EQ(resumed->metrics()[i].val_token_acc, whole.metrics()[i].val_token_acc) << "epoch " << i + 1;
  }
}

TEST(LmTrainer, DecoderOnlyResumeRepeatsTheUninterruptedRunBitForBit) { expect_exact_resume(Arch::DecoderOnly); }

// ---- encoder-only ------------------------------------------------------------------------------

TEST(LmTrainer, EncoderOnlyModelLearnsTheMaskedTokens) {
  TempDir tmp("attn_lm_trainer");
  TrainConfig c = lm_config(tmp, Arch::EncoderOnly);
  c.epochs = 10;
  Trainer t(c, tmp.file("run"));
  EXPECT_TRUE(t.data().vocab.has_mask());
  const auto& m = t.run();
  ASSERT_EQ(m.size(), 10u);
  EXPECT_LT(m.back().loss, 0.7 * m.front().loss);
  EXPECT_LT(m.back().val_loss, m.front().val_loss);
  EXPECT_GT(m.back().val_token_acc, 0.5);  // chance: 1/16
  EXPECT_TRUE(std::isnan(m.back().val_exact_acc));
  const models::ModelConfig saved = models::load_model_config(tmp.file("run"));
  EXPECT_EQ(saved.arch, Arch::EncoderOnly);
  EXPECT_EQ(saved.n_decoder_layers, 0);
  EXPECT_TRUE(io::Vocab::load(tmp.file("run/vocab.json")).has_mask());
}

TEST(LmTrainer, MaskedLmValidationUsesTheSameMasksEveryTime) {
  TempDir tmp("attn_lm_trainer");
  Trainer t(lm_config(tmp, Arch::EncoderOnly), tmp.file("run"));
  t.run(2);
  const ValidationResult a = t.objective().validate(t.data().valid, 16);
  const ValidationResult b = t.objective().validate(t.data().valid, 5);  // other batches, same masks
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_NEAR(a.loss, b.loss, 1e-6);
  EXPECT_EQ(a.token_acc, b.token_acc);
  // 16 lines of 4 to 8 letters, max(1, round(0.15 * n)) = 1 chosen each.
  EXPECT_EQ(a.tokens, 16);
  // Control: another run seed masks other positions, which changes the loss.
  MaskingOptions mo;
  mo.mask_id = io::Vocab::kMask;
  mo.first_symbol = 5;
  mo.vocab_size = t.data().vocab.size();
  auto& model = dynamic_cast<models::EncoderOnlyModel&>(t.model());
  const ValidationResult other = validate_masked_lm(model, t.data().valid, 16, 0.0, mo, 99);
  const ValidationResult same = validate_masked_lm(model, t.data().valid, 16, 0.0, mo, 3);
  EXPECT_NEAR(same.loss, a.loss, 1e-6);
  EXPECT_NE(other.loss, a.loss);
}

TEST(LmTrainer, EncoderOnlyResumeRepeatsTheUninterruptedRunBitForBit) { expect_exact_resume(Arch::EncoderOnly); }

TEST(LmTrainer, BadTextFailsBeforeWritingAnything) {
  TempDir tmp("attn_lm_trainer");
  TrainConfig c = lm_config(tmp, Arch::DecoderOnly);
  io::write_file_atomic(tmp.file("empty.txt"), "\n\n");
  c.text_path = tmp.file("empty.txt");
  EXPECT_THROW(Trainer(c, tmp.file("run")), Error);
  c = lm_config(tmp, Arch::DecoderOnly);
  c.model.positional = nn::PositionalKind::Learned;
  c.model.max_len = 8;  // lines are 8 letters: <bos> + 8 = 9 positions
  try {
    Trainer t(c, tmp.file("run"));
    ADD_FAILURE() << "no error for lines longer than max_len";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("max_len"), std::string::npos) << e.what();
  }
  c.model.max_len = 9;
  EXPECT_NO_THROW(Trainer(c, tmp.file("run")));
  EXPECT_FALSE(fs::exists(tmp.file("run")));
}

}  // namespace
}  // namespace attn::train
