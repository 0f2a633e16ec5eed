// Property: causality in practice, without a KV cache (paper §3.2.3). Greedy decoding that
// re-feeds the whole prefix at every step gets, at each step, the last-position logits the full
// teacher-forced forward gives there: encoder-decoder (padded sources, memory computed once or
// per step, post- and pre-norm) and decoder-only. Within 1e-5 (f32) / 1e-12 (f64): prefixes of
// different lengths go through differently shaped kernels. The KV-cache check belongs to decode/.
#include <gtest/gtest.h>

#include "attn/models/decoder_only.h"
#include "attn/models/encoder_decoder.h"
#include "property_util.h"
#include "support/expect_close.h"

namespace attn {
namespace {

class PrefixDecoding : public ::testing::TestWithParam<DType> {};

constexpr int64_t kSteps = 7;

// logits [B, T, V] -> for each row, the argmax over non-PAD tokens at position t.
std::vector<int64_t> greedy_pick(const Tensor& logits, int64_t t) {
  const int64_t B = logits.size(0), T = logits.size(1), V = logits.size(2);
  const auto v = logits.to_vector<double>();
  std::vector<int64_t> out(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    int64_t best = -1;
    for (int64_t j = 0; j < V; ++j) {
      if (j == props::kPad) continue;
      if (best < 0 || v[static_cast<size_t>((b * T + t) * V + j)] > v[static_cast<size_t>((b * T + t) * V + best)]) best = j;
    }
    out[static_cast<size_t>(b)] = best;
  }
  return out;
}

// Appends one column to ids [B, T] -> [B, T + 1].
Tensor append(const Tensor& ids, const std::vector<int64_t>& column) {
  const int64_t B = ids.size(0), T = ids.size(1);
  const auto v = ids.to_vector<int64_t>();
  std::vector<int64_t> out;
  for (int64_t b = 0; b < B; ++b) {
    out.insert(out.end(), v.begin() + b * T, v.begin() + (b + 1) * T);
    out.push_back(column[static_cast<size_t>(b)]);
  }
  return props::ids(out, B, T + 1);
}

// Runs greedy decoding by re-feeding prefixes through `step` (prefix [B, k] -> logits [B, k, V]),
// then checks each step's last-position logits against `full` on the final sequence.
template <class Step, class Full>
void check_prefix_decoding(Step step, Full full, Tensor prefix, DType dtype, const std::string& what) {
  std::vector<Tensor> step_logits;  // [B, 1, V] per step
  for (int64_t k = 0; k < kSteps; ++k) {
    Tensor logits = step(prefix);  // [B, k + 1, V]
    const int64_t last = logits.size(1) - 1;
    step_logits.push_back(logits.slice(1, last, last + 1));
    prefix = append(prefix, greedy_pick(logits, last));
  }
  // Teacher forcing on the decoded sequence without its last token: position k predicts token k+1.
  Tensor forced = full(prefix.slice(1, 0, prefix.size(1) - 1).contiguous());  // [B, kSteps, V]
  ASSERT_EQ(forced.size(1), kSteps);
  for (int64_t k = 0; k < kSteps; ++k) {
    Tensor at_k = forced.slice(1, k, k + 1);
    EXPECT_TRUE(test::all_close(step_logits[static_cast<size_t>(k)], at_k, props::reshape_tolerance(dtype), 0,
                                what + ", step " + std::to_string(k)));
    // The token greedy decoding chose at step k is the one teacher forcing ranks first there.
    const auto chosen = prefix.slice(1, k + 1, k + 2).contiguous().to_vector<int64_t>();
    EXPECT_EQ(greedy_pick(forced, k), chosen) << what << ", step " << k;
  }
}

TEST_P(PrefixDecoding, EncoderDecoderStepByStepLogitsEqualTheTeacherForcedForward) {
  const DType dtype = GetParam();
  for (bool norm_first : {false, true}) {
    models::EncoderDecoderModel model(props::small_config(models::Arch::EncoderDecoder, dtype, norm_first));
    model.eval();
    // Two sources of different lengths, the shorter one padded.
    std::vector<int64_t> src = props::random_tokens(12, 41);
    src[10] = src[11] = props::kPad;
    Tensor src_ids = props::ids(src, 2, 6);
    Tensor bos = props::ids({props::kBos, props::kBos}, 2, 1);
    NoGradGuard no_grad;
    const std::string what = norm_first ? "encoder-decoder, pre-norm" : "encoder-decoder, post-norm";
    Tensor memory = model.encode(src_ids);  // [2, 6, D], computed once as a decoder would
    Tensor memory_padding = model.padding_mask(src_ids);
    check_prefix_decoding([&](const Tensor& p) { return model.decode(p, memory, memory_padding); },
                          [&](const Tensor& p) { return model.forward(src_ids, p); }, bos, dtype, what + ", memory once");
    check_prefix_decoding([&](const Tensor& p) { return model.forward(src_ids, p); },
                          [&](const Tensor& p) { return model.forward(src_ids, p); }, bos, dtype,
                          what + ", memory recomputed");
  }
}

TEST_P(PrefixDecoding, DecoderOnlyStepByStepLogitsEqualTheTeacherForcedForward) {
  const DType dtype = GetParam();
  models::DecoderOnlyModel model(props::small_config(models::Arch::DecoderOnly, dtype, true));
  model.eval();
  Tensor prompt = props::ids({props::kBos, 5, 9, props::kBos, 11, 4}, 2, 3);
  NoGradGuard no_grad;
  auto run = [&](const Tensor& p) { return model.forward(p); };
  // Here the "full" forward includes the prompt, so compare on positions prompt_len - 1 onwards.
  std::vector<Tensor> step_logits;
  Tensor prefix = prompt;
  for (int64_t k = 0; k < kSteps; ++k) {
    Tensor logits = run(prefix);
    const int64_t last = logits.size(1) - 1;
    step_logits.push_back(logits.slice(1, last, last + 1));
    prefix = append(prefix, greedy_pick(logits, last));
  }
  Tensor forced = run(prefix.slice(1, 0, prefix.size(1) - 1).contiguous());  // [2, 3 + kSteps - 1, V]
  for (int64_t k = 0; k < kSteps; ++k) {
    const int64_t pos = 2 + k;
    EXPECT_TRUE(test::all_close(step_logits[static_cast<size_t>(k)], forced.slice(1, pos, pos + 1),
                                props::reshape_tolerance(dtype), 0, "decoder-only, step " + std::to_string(k)));
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, PrefixDecoding, ::testing::Values(DType::F32, DType::F64),
                         [](const ::testing::TestParamInfo<DType>& info) { return props::dtype_label(info.param); });

}  // namespace
}  // namespace attn
