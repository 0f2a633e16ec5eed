// Property: a sequence gives the same outputs alone and inside a padded batch with longer
// neighbours (seed 000's failure case), for the encoder-decoder logits at every real target
// position (post- and pre-norm) and for the decoder-only and encoder-only models. Asserted
// within 1e-5 (f32) / 1e-12 (f64), not bit for bit: the batch runs through differently shaped
// GEMMs and longer softmax rows (the difference seen, printed, is 0 with OpenBLAS here).
// Control: a pad_id = -1 twin with the same weights answers differently in the batch.
#include <gtest/gtest.h>

#include <iostream>
#include <memory>

#include "attn/models/decoder_only.h"
#include "attn/models/encoder_decoder.h"
#include "attn/models/encoder_only.h"
#include "property_util.h"

namespace attn {
namespace {

class BatchVsAlone : public ::testing::TestWithParam<DType> {};

// Row `row` of a [B, L] batch: `tokens` followed by PAD up to L.
std::vector<int64_t> padded_batch(const std::vector<std::vector<int64_t>>& rows, int64_t L) {
  std::vector<int64_t> out;
  for (const auto& r : rows) {
    out.insert(out.end(), r.begin(), r.end());
    out.insert(out.end(), static_cast<size_t>(L - static_cast<int64_t>(r.size())), props::kPad);
  }
  return out;
}

// The largest |alone - batch[row]| over the first n positions (alone is [1, n, ...]).
double alone_vs_row(const Tensor& alone, const Tensor& batch, int64_t row, int64_t n) {
  return props::span_diff(alone, batch.slice(0, row, row + 1).slice(1, 0, n), 0, 0, n);
}

void report(const std::string& what, DType dtype, double diff) {
  std::cout << "[ batch    ] " << what << " (" << props::dtype_label(dtype) << "): max |alone - in batch| = " << diff
            << "\n";
}

TEST_P(BatchVsAlone, EncoderDecoderLogitsOfASequenceDoNotDependOnItsBatch) {
  const DType dtype = GetParam();
  const double tol = props::reshape_tolerance(dtype);
  for (bool norm_first : {false, true}) {
    models::ModelConfig c = props::small_config(models::Arch::EncoderDecoder, dtype, norm_first);
    models::EncoderDecoderModel model(c);
    model.eval();
    models::ModelConfig uc = c;
    uc.pad_id = -1;
    models::EncoderDecoderModel unmasked(uc);
    unmasked.load_state_dict(model.state_dict());
    unmasked.eval();

    // The sequence of interest (source 4 tokens, target BOS + 3) sits between two longer ones.
    const std::vector<int64_t> src = {5, 9, 4, 11}, tgt = {props::kBos, 7, 3, 12};
    const std::vector<std::vector<int64_t>> srcs = {props::random_tokens(7, 1), src, props::random_tokens(9, 2)};
    std::vector<std::vector<int64_t>> tgts = {props::random_tokens(6, 3), tgt, props::random_tokens(8, 4)};
    tgts[0][0] = tgts[2][0] = props::kBos;
    Tensor src_batch = props::ids(padded_batch(srcs, 9), 3, 9), tgt_batch = props::ids(padded_batch(tgts, 8), 3, 8);
    Tensor src_alone = props::ids(src, 1, 4), tgt_alone = props::ids(tgt, 1, 4);

    NoGradGuard no_grad;
    const double diff = alone_vs_row(model.forward(src_alone, tgt_alone), model.forward(src_batch, tgt_batch), 1, 4);
    report(norm_first ? "encoder-decoder, pre-norm" : "encoder-decoder, post-norm", dtype, diff);
    EXPECT_LE(diff, tol);
    // Control: without PAD masking the padded source leaks into the sequence's logits.
    EXPECT_GT(alone_vs_row(unmasked.forward(src_alone, tgt_alone), unmasked.forward(src_batch, tgt_batch), 1, 4), 1e-4)
        << "control: unmasked twin";
    // The batch neighbours come out the same as alone too (the longest row has no PAD at all).
    EXPECT_LE(alone_vs_row(model.forward(props::ids(srcs[2], 1, 9), props::ids(tgts[2], 1, 8)),
                           model.forward(src_batch, tgt_batch), 2, 8),
              tol);
  }
}

TEST_P(BatchVsAlone, DecoderOnlyLogitsOfASequenceDoNotDependOnItsBatch) {
  const DType dtype = GetParam();
  models::ModelConfig c = props::small_config(models::Arch::DecoderOnly, dtype, true);
  models::DecoderOnlyModel model(c);
  model.eval();
  const std::vector<int64_t> seq = {props::kBos, 4, 8, 6};
  Tensor batch = props::ids(padded_batch({props::random_tokens(8, 5), seq, props::random_tokens(6, 6)}, 8), 3, 8);
  NoGradGuard no_grad;
  const double diff = alone_vs_row(model.forward(props::ids(seq, 1, 4)), model.forward(batch), 1, 4);
  report("decoder-only", dtype, diff);
  EXPECT_LE(diff, props::reshape_tolerance(dtype));
}

TEST_P(BatchVsAlone, EncoderOnlyHiddenStatesOfASequenceDoNotDependOnItsBatch) {
  const DType dtype = GetParam();
  models::ModelConfig c = props::small_config(models::Arch::EncoderOnly, dtype, false);
  models::EncoderOnlyModel model(c);
  model.eval();
  models::ModelConfig uc = c;
  uc.pad_id = -1;
  models::EncoderOnlyModel unmasked(uc);
  unmasked.load_state_dict(model.state_dict());
  unmasked.eval();
  const std::vector<int64_t> seq = {3, 10, 7};
  Tensor batch = props::ids(padded_batch({props::random_tokens(8, 7), seq}, 8), 2, 8);
  Tensor alone = props::ids(seq, 1, 3);
  NoGradGuard no_grad;
  const double diff = alone_vs_row(model.encode(alone), model.encode(batch), 1, 3);
  report("encoder-only", dtype, diff);
  EXPECT_LE(diff, props::reshape_tolerance(dtype));
  // Control: bidirectional attention sees the trailing PADs when they are not masked.
  EXPECT_GT(alone_vs_row(unmasked.encode(alone), unmasked.encode(batch), 1, 3), 1e-4) << "control: unmasked twin";
}

INSTANTIATE_TEST_SUITE_P(Dtypes, BatchVsAlone, ::testing::Values(DType::F32, DType::F64),
                         [](const ::testing::TestParamInfo<DType>& info) { return props::dtype_label(info.param); });

}  // namespace
}  // namespace attn
