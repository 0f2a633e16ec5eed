// attn/lab/symmetry.h — `attn lab permutation` and `attn lab masks`: seed 000's checks of
// what self-attention can and cannot see, on one MultiHeadAttention layer (paper §3.2.2) with
// random weights, in float64. permutation: without positions f(PX) = P f(X) and mean pooling is
// invariant; sinusoidal positions (§3.5) break both. masks: a causal mask confines a change at
// position p to outputs >= p, a key padding mask makes PAD values invisible (§3.2.3); each with its
// control, the same perturbation without the mask. Not here: trained models, RoPE (lab/rope.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attn/report/matrix.h"

namespace attn::lab {

struct PermutationOptions {
  int64_t d_model = 32;  // the seed's D = 32, 4 heads, T = 10
  int64_t heads = 4;
  int64_t length = 10;
  uint64_t seed = 0;  // weights, inputs and the permutation
};

// One claim and how far from exact it is.
struct SymmetryCheck {
  std::string claim;    // e.g. "f(PX) = P f(X)"
  std::string setting;  // e.g. "no positions"
  double max_diff = 0;  // the largest |difference| between the two sides
  bool holds = false;   // max_diff <= 1e-9 (float64 rounding of reordered sums)
};

struct PermutationDemo {
  std::vector<int64_t> permutation;  // row i of PX is row permutation[i] of X (moves every row)
  std::vector<SymmetryCheck> checks;  // equivariance and pooled invariance, without and with PE
};

PermutationDemo permutation_demo(const PermutationOptions& options);
std::string format_permutation_demo(const PermutationDemo& demo);

struct MasksOptions {
  int64_t d_model = 32;
  int64_t heads = 4;
  int64_t length = 6;    // T
  int64_t real = 4;      // tokens 0 .. real-1 are real, the rest PAD (zeros, then other values)
  int64_t position = 2;  // the causal perturbation adds 1 to every feature of this position
  uint64_t seed = 0;
};

// One perturbation under one mask: the largest |change| of each output position.
struct MaskPerturbation {
  std::string perturbation;    // "x[2] += 1" or "PAD values changed"
  std::string mask;            // "causal", "none", "key padding"
  std::vector<double> change;  // [T]
};

struct MasksDemo {
  int64_t length = 0, real = 0, position = 0;
  // causal with its no-mask control, then key padding with its no-mask control.
  std::vector<MaskPerturbation> rows;
  // The positions whose output changed (change > 0) in a row.
  static std::vector<int64_t> changed(const MaskPerturbation& row);
  // The largest change over the real tokens' outputs.
  double real_token_change(const MaskPerturbation& row) const;
};

MasksDemo masks_demo(const MasksOptions& options);
std::string format_masks_demo(const MasksDemo& demo);
// The changes as a heatmap: one row per (perturbation, mask), one column per output position.
std::string masks_figure(const MasksDemo& demo);

}  // namespace attn::lab
