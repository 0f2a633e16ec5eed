// `attn lab permutation` and `attn lab masks`: seed 000's symmetry and mask checks, run on the
// library's MultiHeadAttention in float64 so that "equal" means equal up to the rounding of sums
// taken in another order, and "masked" means a change of exactly zero.
#include "attn/lab/symmetry.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "attn/nn/attention.h"
#include "attn/nn/positional.h"
#include "attn/ops/ops.h"
#include "attn/report/figures.h"

namespace attn::lab {

namespace {

constexpr double kExact = 1e-9;

void check_sizes(const char* op, int64_t d_model, int64_t heads, int64_t length) {
  ATTN_CHECK(d_model > 0 && heads > 0 && length > 0, op, "--d-model, --heads and --length must be positive, got ",
             d_model, ", ", heads, ", ", length);
  ATTN_CHECK(d_model % heads == 0, op, "--d-model ", d_model, " is not divisible by --heads ", heads);
}

// A permutation of 0..T-1 that moves every position when T > 1 (shuffled, fixed points swapped on).
std::vector<int64_t> derangement(int64_t T, Rng& rng) {
  std::vector<int64_t> p(static_cast<size_t>(T));
  std::iota(p.begin(), p.end(), 0);
  for (int64_t i = T - 1; i > 0; --i)
    std::swap(p[static_cast<size_t>(i)], p[static_cast<size_t>(rng.below(static_cast<uint64_t>(i + 1)))]);
  for (int64_t i = 0; T > 1 && i < T; ++i)
    if (p[static_cast<size_t>(i)] == i) std::swap(p[static_cast<size_t>(i)], p[static_cast<size_t>((i + 1) % T)]);
  return p;
}

// Row i of the result is row perm[i] of x [1, T, D].
Tensor permute_rows(const Tensor& x, const std::vector<int64_t>& perm) {
  const int64_t T = x.size(1), D = x.size(2);
  const auto v = x.to_vector<double>();
  std::vector<double> out(v.size());
  for (int64_t i = 0; i < T; ++i)
    std::copy_n(v.begin() + perm[static_cast<size_t>(i)] * D, D, out.begin() + i * D);
  return Tensor::from_vector<double>(out, {1, T, D});  // [1, T, D]
}

// x [1, T, D] -> the mean over T, [1, 1, D].
Tensor mean_pool(const Tensor& x) { return scale(sum(x, 1, true), 1.0 / static_cast<double>(x.size(1))); }

double max_diff(const Tensor& a, const Tensor& b) {
  const auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < va.size(); ++i) m = std::max(m, std::fabs(va[i] - vb[i]));
  return m;
}

// The largest |a - b| of each position of two [1, T, D] tensors.
std::vector<double> per_position(const Tensor& a, const Tensor& b) {
  const int64_t T = a.size(1), D = a.size(2);
  const auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  std::vector<double> out(static_cast<size_t>(T), 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t d = 0; d < D; ++d)
      out[static_cast<size_t>(t)] =
          std::max(out[static_cast<size_t>(t)], std::fabs(va[static_cast<size_t>(t * D + d)] - vb[static_cast<size_t>(t * D + d)]));
  return out;
}

std::string yes_no(bool b) { return b ? "yes" : "no"; }

}  // namespace

PermutationDemo permutation_demo(const PermutationOptions& o) {
  check_sizes("lab permutation", o.d_model, o.heads, o.length);
  ATTN_CHECK(o.length >= 2, "lab permutation", "--length must be at least 2 to permute, got ", o.length);
  NoGradGuard no_grad;
  Rng rng(o.seed);
  nn::MultiHeadAttention mha(o.d_model, o.heads, 0.0, DType::F64, rng);
  mha.eval();
  Tensor x = Tensor::randn({1, o.length, o.d_model}, rng, DType::F64);  // [1, T, D]
  PermutationDemo demo;
  demo.permutation = derangement(o.length, rng);
  const Tensor pe = nn::sinusoidal_table(o.length, o.d_model, DType::F64);  // [T, D]
  auto f = [&](const Tensor& in) { return mha.forward(in, in, in); };      // self-attention [1, T, D]
  auto P = [&](const Tensor& in) { return permute_rows(in, demo.permutation); };

  auto add_check = [&](const std::string& claim, const std::string& setting, double diff) {
    demo.checks.push_back({claim, setting, diff, diff <= kExact});
  };
  add_check("f(PX) = P f(X)", "no positions", max_diff(f(P(x)), P(f(x))));
  add_check("mean f(PX) = mean f(X)", "no positions, mean pooling", max_diff(mean_pool(f(P(x))), mean_pool(f(x))));
  add_check("f(PX + PE) = P f(X + PE)", "sinusoidal positions", max_diff(f(add(P(x), pe)), P(f(add(x, pe)))));
  add_check("mean f(PX + PE) = mean f(X + PE)", "sinusoidal positions, mean pooling",
            max_diff(mean_pool(f(add(P(x), pe))), mean_pool(f(add(x, pe)))));
  return demo;
}

std::string format_permutation_demo(const PermutationDemo& d) {
  std::string s = "self-attention f = one MultiHeadAttention layer, random weights; P permutes the tokens:";
  for (int64_t p : d.permutation) s += " " + std::to_string(p);
  s += "\n\n  claim                              setting                              holds   max |diff|\n";
  char line[512];
  for (const SymmetryCheck& c : d.checks) {
    std::snprintf(line, sizeof line, "  %-33s  %-35s  %-5s   %.2e\n", c.claim.c_str(), c.setting.c_str(),
                  yes_no(c.holds).c_str(), c.max_diff);
    s += line;
  }
  s += "\nWithout positions a token's output depends only on its content and the set of the others\n"
       "(permutation-equivariant); pooling makes it invariant. Positional encodings break both, which\n"
       "is what lets the model tell \"dog bites man\" from \"man bites dog\".\n";
  return s;
}

std::vector<int64_t> MasksDemo::changed(const MaskPerturbation& row) {
  std::vector<int64_t> out;
  for (size_t t = 0; t < row.change.size(); ++t)
    if (row.change[t] > 0) out.push_back(static_cast<int64_t>(t));
  return out;
}

double MasksDemo::real_token_change(const MaskPerturbation& row) const {
  double m = 0;
  for (int64_t t = 0; t < real && t < static_cast<int64_t>(row.change.size()); ++t)
    m = std::max(m, row.change[static_cast<size_t>(t)]);
  return m;
}

MasksDemo masks_demo(const MasksOptions& o) {
  const char* op = "lab masks";
  check_sizes(op, o.d_model, o.heads, o.length);
  ATTN_CHECK(o.real >= 1 && o.real < o.length, op, "--real must be in [1, length) so that there is PAD, got ", o.real,
             " with length ", o.length);
  ATTN_CHECK(o.position >= 0 && o.position < o.length, op, "--position must be in [0, ", o.length, "), got ",
             o.position);
  NoGradGuard no_grad;
  Rng rng(o.seed);
  nn::MultiHeadAttention mha(o.d_model, o.heads, 0.0, DType::F64, rng);
  mha.eval();
  const int64_t T = o.length, D = o.d_model;
  Tensor x = Tensor::randn({1, T, D}, rng, DType::F64);  // [1, T, D]
  double* px = x.data<double>();
  for (int64_t i = o.real * D; i < T * D; ++i) px[i] = 0.0;  // PAD rows are zeros
  Tensor bumped = x.clone();                                // x[position] += 1
  for (int64_t d = 0; d < D; ++d) bumped.data<double>()[o.position * D + d] += 1.0;
  Tensor other_pad = x.clone();  // the PAD rows hold other values
  Tensor noise = Tensor::randn({T - o.real, D}, rng, DType::F64);
  std::copy_n(noise.data<double>(), (T - o.real) * D, other_pad.data<double>() + o.real * D);

  std::vector<int> pad(static_cast<size_t>(T), 0);
  for (int64_t t = o.real; t < T; ++t) pad[static_cast<size_t>(t)] = 1;
  nn::AttentionMasks causal, none, padding;
  causal.causal = true;
  padding.key_padding_mask = Tensor::from_bools(pad, {1, T});  // [1, T], true = PAD
  auto f = [&](const Tensor& in, const nn::AttentionMasks& m) { return mha.forward(in, in, in, m); };

  MasksDemo demo;
  demo.length = T;
  demo.real = o.real;
  demo.position = o.position;
  const std::string bump = "x[" + std::to_string(o.position) + "] += 1";
  demo.rows.push_back({bump, "causal", per_position(f(bumped, causal), f(x, causal))});
  demo.rows.push_back({bump, "none", per_position(f(bumped, none), f(x, none))});
  demo.rows.push_back({"PAD values changed", "key padding", per_position(f(other_pad, padding), f(x, padding))});
  demo.rows.push_back({"PAD values changed", "none", per_position(f(other_pad, none), f(x, none))});
  return demo;
}

std::string format_masks_demo(const MasksDemo& d) {
  char line[512];
  std::snprintf(line, sizeof line,
                "one MultiHeadAttention layer, T = %lld tokens: %lld real, then %lld PAD (zeros); the largest change\n"
                "of each output position when the input is perturbed, with the mask and without it (the control):\n\n",
                static_cast<long long>(d.length), static_cast<long long>(d.real),
                static_cast<long long>(d.length - d.real));
  std::string s = line;
  std::snprintf(line, sizeof line, "  %-20s %-12s", "perturbation", "mask");
  s += line;
  for (int64_t t = 0; t < d.length; ++t) {
    std::snprintf(line, sizeof line, " %8s", ("t=" + std::to_string(t)).c_str());
    s += line;
  }
  s += "   outputs changed\n";
  for (const MaskPerturbation& r : d.rows) {
    std::snprintf(line, sizeof line, "  %-20s %-12s", r.perturbation.c_str(), r.mask.c_str());
    s += line;
    for (double c : r.change) {
      if (c == 0)
        std::snprintf(line, sizeof line, " %8s", "0");
      else
        std::snprintf(line, sizeof line, " %8.3g", c);
      s += line;
    }
    s += "   [";
    const auto changed = MasksDemo::changed(r);
    for (size_t i = 0; i < changed.size(); ++i) s += (i ? " " : "") + std::to_string(changed[i]);
    s += "]\n";
  }
  const double masked = d.rows.size() > 2 ? d.real_token_change(d.rows[2]) : 0.0;
  const double unmasked = d.rows.size() > 3 ? d.real_token_change(d.rows[3]) : 0.0;
  char masked_text[32];
  std::snprintf(masked_text, sizeof masked_text, masked == 0 ? "exactly 0" : "%.3g", masked);
  std::snprintf(line, sizeof line,
                "\ncausal: changing position %lld changes only outputs >= %lld; without the mask, every output.\n"
                "key padding: changing the PAD values changes the real tokens' outputs by %s with the mask,\n"
                "by %.3g without it. PAD positions still produce outputs: leave them out of the loss.\n",
                static_cast<long long>(d.position), static_cast<long long>(d.position), masked_text, unmasked);
  s += line;
  return s;
}

std::string masks_figure(const MasksDemo& d) {
  std::vector<double> values;
  report::HeatmapOptions o;
  for (const MaskPerturbation& r : d.rows) {
    values.insert(values.end(), r.change.begin(), r.change.end());
    o.row_labels.push_back(r.perturbation + ", mask: " + r.mask);
  }
  for (int64_t t = 0; t < d.length; ++t)
    o.col_labels.push_back(t < d.real ? std::to_string(t) : std::to_string(t) + " PAD");
  o.title = "Largest change of each output when the input is perturbed";
  o.x_title = "output position";
  o.colorbar_title = "max |change|";
  o.vmin = 0.0;
  o.annotate = report::Annotate::Always;
  o.cell_size = 56;
  return report::heatmap(report::Matrix(values, static_cast<int64_t>(d.rows.size()), d.length), o);
}

}  // namespace attn::lab
