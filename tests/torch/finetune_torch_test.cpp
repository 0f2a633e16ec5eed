// Fine-tuning against live PyTorch (make_fixtures.py, finetune_cases): on the fixtures' small
// GPT-2, the SFT objective's response-only loss and its gradients, the response log-probabilities
// of the policy and of a second (reference) GPT-2 folder, and the DPO objective's loss and
// gradients, all written in PyTorch from the formulas, in float32 and float64. Controls: the
// same rows with the prompt targets left in, and DPO with chosen and rejected swapped, miss the
// reference values by far more than the tolerance.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "attn/core/autograd.h"
#include "attn/models/gpt2.h"
#include "attn/ops/ops.h"
#include "attn/train/finetune.h"
#include "attn/train/objective.h"
#include "torch/fixture.h"

namespace attn::test {
namespace {

using Ids = std::vector<int64_t>;

// The gradients of `model`'s parameters under Hugging Face's names and layouts: a second copy
// of the folder's model holding the gradients as its weights, exported as gpt2_state_dict does.
nn::NamedTensors hf_grads(const models::DecoderOnlyModel& model, const std::string& folder, DType dtype) {
  std::shared_ptr<models::DecoderOnlyModel> holder = models::load_gpt2_model(folder, dtype);
  {
    NoGradGuard no_grad;
    for (const auto& [name, p] : holder->named_parameters()) {
      Tensor target = p;
      target.copy_from(model.parameter(name).grad());
    }
  }
  nn::NamedTensors out;
  for (auto& [name, t] : models::gpt2_state_dict(*holder)) out.emplace_back(name, t);
  return out;
}

::testing::AssertionResult grads_close(const TorchCase& io, const nn::NamedTensors& got, const std::string& prefix) {
  Checks checks;
  for (const auto& [name, g] : got) checks.add(grad_close(g, io.get(prefix + name), io.grad_rel(), io.name() + " " + prefix + name));
  return checks.result();
}

// |actual - expected| within the case's absolute tolerance, scaled by the value's magnitude.
::testing::AssertionResult value_close(double actual, double expected, double atol, const std::string& label) {
  const double allowed = atol * std::max(1.0, std::fabs(expected));
  report_margin(label, std::fabs(actual - expected), allowed);
  if (std::fabs(actual - expected) <= allowed) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << label << ": " << actual << " vs " << expected << ", allowed " << allowed;
}

::testing::AssertionResult values_close(const std::vector<double>& actual, const Tensor& expected, double atol,
                                        const std::string& label) {
  const std::vector<double> e = expected.to_vector<double>();
  if (actual.size() != e.size()) return ::testing::AssertionFailure() << label << ": " << actual.size() << " values";
  Checks checks;
  for (size_t k = 0; k < e.size(); ++k) checks.add(value_close(actual[k], e[k], atol, label + "[" + std::to_string(k) + "]"));
  return checks.result();
}

void check_case(const std::string& name) {
  TorchCase io(name);
  const DType dt = io.dtype();
  const std::string folder = TorchCase::fixture_dir() + "/" + io.text("folder");
  const std::string ref_folder = TorchCase::fixture_dir() + "/" + io.text("ref_folder");
  std::shared_ptr<models::DecoderOnlyModel> policy = models::load_gpt2_model(folder, dt);  // eval mode
  std::shared_ptr<models::DecoderOnlyModel> ref = models::load_gpt2_model(ref_folder, dt);
  const int64_t P = io.integer("pairs");
  const double beta = io.number("beta");
  std::vector<io::Example> data;
  std::vector<Ids> rejected;
  std::vector<int64_t> indices;
  for (int64_t k = 0; k < P; ++k) {
    const std::string s = std::to_string(k);
    data.push_back({io.get("in.prompt" + s).to_vector<int64_t>(), io.get("in.chosen" + s).to_vector<int64_t>()});
    rejected.push_back(io.get("in.rejected" + s).to_vector<int64_t>());
    indices.push_back(k);
  }
  // GPT-2: no <pad>, and rows without <bos> (as the trainer sets them for a GPT-2 start).
  const train::SpecialIds ids{-1, -1, policy->config().eos_id};

  // SFT: the loss over response tokens and <eos> only.
  train::ObjectiveOptions o;
  o.kind = train::ObjectiveKind::Sft;
  o.ids = ids;
  o.label_smoothing = 0.0;
  const train::BatchLoss sft = train::make_objective(*policy, o)->loss(data, indices, 0);
  const double expected_sft = io.get("out.sft_loss").item();
  EXPECT_TRUE(value_close(sft.loss.item(), expected_sft, io.atol(), name + " sft_loss"));
  sft.loss.backward();
  EXPECT_TRUE(grads_close(io, hf_grads(*policy, folder, dt), "grad_sft."));
  policy->zero_grad();
  // Control: the prompt targets left in (no mask) miss PyTorch's response-only loss.
  {
    NoGradGuard no_grad;
    const train::Batch b = train::make_sft_batch(data, indices, ids);
    std::vector<int64_t> unmasked = b.tgt_out.to_vector<int64_t>();
    const std::vector<int64_t> in = b.tgt_in.to_vector<int64_t>();
    const int64_t T = b.tgt_in.size(1);
    for (int64_t r = 0; r < P; ++r)
      for (int64_t i = 0; i + 1 < static_cast<int64_t>(data[static_cast<size_t>(r)].src.size()); ++i)
        unmasked[static_cast<size_t>(r * T + i)] = in[static_cast<size_t>(r * T + i + 1)];
    const Tensor logits = policy->forward(b.tgt_in);
    const double wrong = cross_entropy(logits.reshape({P * T, logits.size(2)}),
                                       Tensor::from_vector<int64_t>(unmasked, {P * T}), train::kIgnoreTarget, 0.0)
                             .item();
    EXPECT_GT(std::fabs(wrong - expected_sft), 100 * io.atol() * std::max(1.0, std::fabs(expected_sft)));
  }

  // Response log-probabilities of the policy and the reference.
  auto pref = std::make_shared<train::PreferenceSet>();
  pref->rejected = rejected;
  pref->ref_chosen = train::response_logprobs(*ref, data, nullptr, 2, ids);
  pref->ref_rejected = train::response_logprobs(*ref, data, &rejected, 2, ids);
  EXPECT_TRUE(values_close(pref->ref_chosen, io.get("out.ref_chosen"), io.atol(), name + " ref_chosen"));
  EXPECT_TRUE(values_close(pref->ref_rejected, io.get("out.ref_rejected"), io.atol(), name + " ref_rejected"));
  EXPECT_TRUE(values_close(train::response_logprobs(*policy, data, nullptr, 3, ids), io.get("out.policy_chosen"),
                           io.atol(), name + " policy_chosen"));
  EXPECT_TRUE(values_close(train::response_logprobs(*policy, data, &rejected, 1, ids), io.get("out.policy_rejected"),
                           io.atol(), name + " policy_rejected"));

  // DPO: loss and gradients.
  o.kind = train::ObjectiveKind::Dpo;
  o.dpo_beta = beta;
  o.train_preferences = pref;
  const train::BatchLoss dpo = train::make_objective(*policy, o)->loss(data, indices, 0);
  EXPECT_EQ(dpo.tokens, P);
  const double expected_dpo = io.get("out.dpo_loss").item();
  EXPECT_TRUE(value_close(dpo.loss.item(), expected_dpo, io.atol(), name + " dpo_loss"));
  dpo.loss.backward();
  EXPECT_TRUE(grads_close(io, hf_grads(*policy, folder, dt), "grad_dpo."));
  policy->zero_grad();
  // Control: chosen and rejected swapped (a sign error) misses PyTorch's loss.
  {
    NoGradGuard no_grad;
    const auto t = [&](const std::vector<double>& v) { return Tensor::from_vector<double>(v, {P}); };
    const std::vector<double> pc = train::response_logprobs(*policy, data, nullptr, 3, ids);
    const std::vector<double> pr = train::response_logprobs(*policy, data, &rejected, 3, ids);
    const double swapped = train::dpo_loss(t(pr), t(pc), t(pref->ref_rejected), t(pref->ref_chosen), beta).item();
    EXPECT_GT(std::fabs(swapped - expected_dpo), 100 * io.atol());
  }
}

TEST(FinetuneTorch, SftAndDpoOnGpt2MatchPyTorchF32) { check_case("finetune_gpt2_f32"); }
TEST(FinetuneTorch, SftAndDpoOnGpt2MatchPyTorchF64) { check_case("finetune_gpt2_f64"); }

}  // namespace
}  // namespace attn::test
