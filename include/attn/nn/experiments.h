// attn/nn/experiments.h — small numerical experiments from the seeds, as library functions so
// that the property tests and a CLI command (`attn lab scale`) share one computation.
// The sqrt(D) saturation table (paper §3.2.1, footnote 4; seed 000): with q, k ~ N(0, 1), q·k
// has variance D, so without the 1/sqrt(D) scale the softmax piles onto one key as D grows.
// Deliberately not here: training-based experiments, plotting, anything random beyond q and k.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace attn::nn {

// One row of the saturation table, averaged over `trials` independent draws of q and k.
struct ScaleRow {
  int64_t d = 0;              // query/key dimension D
  int64_t seq_len = 0;        // T queries and T keys per trial
  int64_t trials = 0;         // independent draws
  double score_variance = 0;  // Var(q·k) over every raw score (about D)
  double unscaled = 0;        // mean over queries of the largest softmax(q k^T) weight
  double scaled = 0;          // the same with the default scale 1/sqrt(D)
};

// The seed's setup: D = 4, 64, 512 with 16 queries and 16 keys (it drew one matrix per D and
// reported 0.367/0.829/0.925 unscaled and 0.208/0.254/0.253 scaled).
inline const std::vector<int64_t> kSeedScaleDims = {4, 64, 512};
inline constexpr int64_t kSeedScaleSeqLen = 16;

// Draws q, k [trials, 1, T, D] ~ N(0, 1) in float64 from Rng(seed) (q first, then k) and runs
// the library's scaled_dot_product_attention twice, with scale 1 and with the default scale,
// reading the weights [trials, 1, T, T]. Errors (attn::Error) for non-positive sizes.
ScaleRow saturation_row(int64_t d, int64_t seq_len, int64_t trials, uint64_t seed);

// saturation_row for each D in `dims`, with the same seq_len, trials and seed.
std::vector<ScaleRow> saturation_table(const std::vector<int64_t>& dims, int64_t seq_len, int64_t trials,
                                       uint64_t seed);

// The table as text, one line per row: "D  Var(q·k)  unscaled  scaled", with a header line.
std::string format_saturation_table(const std::vector<ScaleRow>& rows);

}  // namespace attn::nn
