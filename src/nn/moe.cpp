// MixtureOfExperts: route, dispatch, compute per expert, combine. The router's top-k is chosen on
// the logits' values (no gradient flows through the choice); the gates and everything after are
// recorded ops, so the layer is differentiable with respect to x, the router and every expert that
// received a token. Dispatch is one gather (the embedding op on the token rows), each expert runs
// one FFN on its contiguous block of rows, and a combine node scatters gate * output back.
#include "attn/nn/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "attn/ops/ops.h"

namespace attn::kernels {
namespace {

// out [N, D] (zeroed by the caller) += gate[route[m]] * y[m] at row token[m], for m < M:
//   out_t = sum_{m: token[m] = t} g_{route[m]} y_m
template <class T>
void moe_combine_forward(T* out, const T* y, const T* gate, const int64_t* token, const int64_t* route, int64_t M,
                         int64_t D) {
  for (int64_t m = 0; m < M; ++m) {
    const T g = gate[route[m]];
    const T* ym = y + m * D;
    T* ot = out + token[m] * D;
    for (int64_t d = 0; d < D; ++d) ot[d] += g * ym[d];
  }
}

// Backward of out_t = sum_m g_{route[m]} y_m: accumulates (+=) into dy [M, D] and dgate [N * k]:
//   dy_m = g_{route[m]} dout_{token[m]},   dg_{route[m]} = dout_{token[m]} . y_m
// (dropped routes appear in no m, so their dgate stays 0).
template <class T>
void moe_combine_backward(T* dy, T* dgate, const T* dout, const T* y, const T* gate, const int64_t* token,
                          const int64_t* route, int64_t M, int64_t D) {
  for (int64_t m = 0; m < M; ++m) {
    const T g = gate[route[m]];
    const T* gt = dout + token[m] * D;
    const T* ym = y + m * D;
    T* dym = dy + m * D;
    T dot = 0;
    for (int64_t d = 0; d < D; ++d) {
      dym[d] += g * gt[d];
      dot += gt[d] * ym[d];
    }
    dgate[route[m]] += dot;
  }
}

}  // namespace
}  // namespace attn::kernels

namespace attn::nn {

namespace {

constexpr const char* kOp = "MixtureOfExperts";

struct MoECombineBackward : Node {
  Tensor y, gate;                   // detached: [M, D] expert outputs, [N * k] gates
  std::vector<int64_t> token, route;  // [M]
  int64_t N = 0;
  const char* name() const override { return "MoECombineBackward"; }
  std::vector<Tensor> backward(const Tensor& g_in) override {
    NoGradGuard guard;
    const Tensor g = g_in.dtype() == y.dtype() ? g_in.contiguous() : g_in.to(y.dtype());
    Tensor dy = Tensor::zeros(y.shape(), y.dtype());        // [M, D]
    Tensor dgate = Tensor::zeros(gate.shape(), y.dtype());  // [N * k]
    const int64_t M = y.size(0), D = y.size(1);
    if (y.dtype() == DType::F32)
      kernels::moe_combine_backward<float>(dy.data<float>(), dgate.data<float>(), g.data<float>(), y.data<float>(),
                                           gate.data<float>(), token.data(), route.data(), M, D);
    else
      kernels::moe_combine_backward<double>(dy.data<double>(), dgate.data<double>(), g.data<double>(),
                                            y.data<double>(), gate.data<double>(), token.data(), route.data(), M, D);
    return {dy, dgate};
  }
  void release() override { y = gate = Tensor(); }
};

// out [N, D] = sum over the M dispatched rows of gate[route[m]] * y[m], at row token[m].
Tensor moe_combine(const Tensor& y_in, const Tensor& gate_in, std::vector<int64_t> token, std::vector<int64_t> route,
                   int64_t N) {
  const Tensor y = y_in.contiguous(), gate = gate_in.contiguous();
  const int64_t M = y.size(0), D = y.size(1);
  Tensor out = Tensor::zeros({N, D}, y.dtype());  // [N, D]
  if (y.dtype() == DType::F32)
    kernels::moe_combine_forward<float>(out.data<float>(), y.data<float>(), gate.data<float>(), token.data(),
                                        route.data(), M, D);
  else
    kernels::moe_combine_forward<double>(out.data<double>(), y.data<double>(), gate.data<double>(), token.data(),
                                         route.data(), M, D);
  if (needs_grad({&y_in, &gate_in})) {
    auto node = std::make_shared<MoECombineBackward>();
    node->y = y.detach();
    node->gate = gate.detach();
    node->token = std::move(token);
    node->route = std::move(route);
    node->N = N;
    attach_node(out, node, {y_in, gate_in});
  }
  return out;
}

// Rows `ids` of the [R, 1] column `flat`, as [N, k] (differentiable with respect to flat).
Tensor pick(const Tensor& flat, const std::vector<int64_t>& ids, int64_t N, int64_t k) {
  const Tensor idx = Tensor::from_vector<int64_t>(ids, {N * k});  // [N * k]
  return reshape(embedding(flat, idx), {N, k});                  // [N, k]
}

}  // namespace

Tensor load_balancing_loss(const Tensor& probs, const std::vector<double>& fraction) {
  ATTN_CHECK(probs.defined() && probs.dim() == 2 && is_floating(probs.dtype()), "load_balancing_loss",
             "probs must be a floating [N, E] matrix, got ", probs.defined() ? probs.str() : "undefined");
  const int64_t N = probs.size(0), E = probs.size(1);
  ATTN_CHECK(N > 0 && E > 0, "load_balancing_loss", "probs must have tokens and experts, got ", probs.str());
  ATTN_CHECK(static_cast<int64_t>(fraction.size()) == E, "load_balancing_loss", "fraction has ", fraction.size(),
             " entries for ", E, " experts (probs ", probs.str(), ")");
  Tensor mean_prob = scale(sum(probs, 0), 1.0 / static_cast<double>(N));           // [E], P_e
  Tensor f = Tensor::from_vector<double>(fraction, {E}).to(probs.dtype());          // [E], f_e
  return scale(sum(mul(mean_prob, f)), static_cast<double>(E));                    // [], E * sum f P
}

MixtureOfExperts::MixtureOfExperts(const MoEOptions& o, Rng& rng) : options_(o) {
  ATTN_CHECK(o.d_model > 0 && o.d_ff > 0, kOp, "d_model and d_ff must be positive, got ", o.d_model, " and ",
             o.d_ff);
  ATTN_CHECK(o.n_experts >= 1, kOp, "n_experts must be at least 1, got ", o.n_experts);
  ATTN_CHECK(o.top_k >= 1 && o.top_k <= o.n_experts, kOp, "top_k must be in [1, n_experts = ", o.n_experts,
             "], got ", o.top_k);
  ATTN_CHECK(std::isfinite(o.capacity_factor), kOp, "capacity_factor must be finite, got ", o.capacity_factor);
  ATTN_CHECK(o.dropout >= 0.0 && o.dropout < 1.0, kOp, "dropout must be in [0, 1), got ", o.dropout);
  ATTN_CHECK(is_floating(o.dtype), kOp, "dtype must be f32 or f64, got ", dtype_name(o.dtype));
  router_ = register_module("router", std::make_shared<Linear>(o.d_model, o.n_experts, false, o.dtype, rng));
  experts_ = register_module("experts", std::make_shared<ModuleList>());
  for (int64_t e = 0; e < o.n_experts; ++e) {
    auto ff = std::make_shared<FeedForward>(o.d_model, o.d_ff, o.activation, o.dropout, o.dtype, rng);
    experts_->push_back(ff);
    expert_list_.push_back(ff);
  }
}

FeedForward& MixtureOfExperts::expert(int64_t e) {
  ATTN_CHECK(e >= 0 && e < options_.n_experts, kOp, "expert ", e, " is outside [0, ", options_.n_experts, ")");
  return *expert_list_[static_cast<size_t>(e)];
}

int64_t MixtureOfExperts::capacity(int64_t tokens) const {
  if (options_.capacity_factor <= 0.0) return tokens;  // unlimited: an expert can take every token once
  const double c = options_.capacity_factor * static_cast<double>(tokens * options_.top_k) /
                   static_cast<double>(options_.n_experts);
  return static_cast<int64_t>(std::ceil(c - 1e-9));  // guard 2.0000000001 -> 3
}

Tensor MixtureOfExperts::forward(const Tensor& x) {
  const int64_t D = options_.d_model, E = options_.n_experts, k = options_.top_k;
  ATTN_CHECK(x.defined() && x.dim() >= 1 && x.size(-1) == D, kOp, "x must be [..., ", D, "], got ",
             x.defined() ? x.str() : "undefined");
  ATTN_CHECK(x.dtype() == options_.dtype, kOp, "x must be ", dtype_name(options_.dtype),
             " like the parameters, got ", x.str());
  const int64_t N = x.numel() / D;
  ATTN_CHECK(N > 0, kOp, "x holds no token: ", x.str());

  // Route: logits r_t = x_t W_r^T, probabilities p_t = softmax(r_t), the top k of r_t.
  Tensor x2 = reshape(x, {N, D});            // [N, D]
  Tensor logits = router_->forward(x2);      // [N, E]
  Tensor probs = softmax(logits);            // [N, E]
  const std::vector<double> lv = logits.to_vector<double>();
  MoERouting r;
  r.tokens = N;
  r.capacity = capacity(N);
  r.expert.resize(static_cast<size_t>(N * k));
  std::vector<int64_t> order(static_cast<size_t>(E));
  std::vector<int64_t> picked(static_cast<size_t>(N * k));  // flat index t * E + e of each route
  for (int64_t t = 0; t < N; ++t) {
    const double* row = lv.data() + t * E;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t a, int64_t b) {
      return row[a] > row[b] || (row[a] == row[b] && a < b);
    });
    for (int64_t c = 0; c < k; ++c) {
      r.expert[static_cast<size_t>(t * k + c)] = order[static_cast<size_t>(c)];
      picked[static_cast<size_t>(t * k + c)] = t * E + order[static_cast<size_t>(c)];
    }
  }

  // Gates g [N, k]: softmax over the chosen logits, or the chosen probabilities as they are.
  Tensor gates = options_.normalize_gates ? softmax(pick(reshape(logits, {N * E, 1}), picked, N, k))  // [N, k]
                                          : pick(reshape(probs, {N * E, 1}), picked, N, k);          // [N, k]
  Tensor gate_flat = reshape(gates, {N * k});  // [N * k], route r = t * k + c

  // Capacity: first choices of all tokens first, then second choices, ...; token order within.
  r.kept.assign(static_cast<size_t>(N * k), 0);
  r.expert_tokens.assign(static_cast<size_t>(E), 0);
  for (int64_t c = 0; c < k; ++c)
    for (int64_t t = 0; t < N; ++t) {
      const size_t route = static_cast<size_t>(t * k + c);
      int64_t& load = r.expert_tokens[static_cast<size_t>(r.expert[route])];
      if (load < r.capacity) {
        r.kept[route] = 1;
        ++load;
      } else {
        ++r.dropped;
      }
    }

  // Dispatch: the kept routes grouped by expert (token order within), one gather of their rows.
  std::vector<int64_t> token, route;
  std::vector<int64_t> first(static_cast<size_t>(E + 1), 0);  // expert e owns rows [first[e], first[e+1])
  for (int64_t e = 0; e < E; ++e) first[static_cast<size_t>(e + 1)] = first[static_cast<size_t>(e)] +
                                                                       r.expert_tokens[static_cast<size_t>(e)];
  token.resize(static_cast<size_t>(first.back()));
  route.resize(token.size());
  std::vector<int64_t> next_slot(first.begin(), first.end() - 1);
  for (int64_t q = 0; q < N * k; ++q) {
    if (!r.kept[static_cast<size_t>(q)]) continue;
    const size_t slot = static_cast<size_t>(next_slot[static_cast<size_t>(r.expert[static_cast<size_t>(q)])]++);
    token[slot] = q / k;
    route[slot] = q;
  }
  Tensor out;  // [N, D]
  const int64_t M = static_cast<int64_t>(token.size());
  if (M == 0) {
    out = Tensor::zeros({N, D}, x.dtype());  // [N, D]: every route dropped
  } else {
    Tensor dispatched = embedding(x2, Tensor::from_vector<int64_t>(token, {M}));  // [M, D]
    std::vector<Tensor> parts;
    for (int64_t e = 0; e < E; ++e) {
      const int64_t lo = first[static_cast<size_t>(e)], hi = first[static_cast<size_t>(e + 1)];
      if (hi == lo) continue;  // no token chose this expert: it does not run
      parts.push_back(expert_list_[static_cast<size_t>(e)]->forward(slice(dispatched, 0, lo, hi)));  // [n_e, D]
    }
    Tensor y = parts.size() == 1 ? parts[0] : concat(parts, 0);  // [M, D]
    out = moe_combine(y, gate_flat, std::move(token), std::move(route), N);  // [N, D]
  }

  // Load balance: f_e over all N * k routes (before capacity drops), P_e the mean probability.
  r.fraction.assign(static_cast<size_t>(E), 0.0);
  for (int64_t e : r.expert) r.fraction[static_cast<size_t>(e)] += 1.0 / static_cast<double>(N * k);
  const std::vector<double> pv = probs.to_vector<double>();
  r.mean_prob.assign(static_cast<size_t>(E), 0.0);
  for (int64_t t = 0; t < N; ++t)
    for (int64_t e = 0; e < E; ++e)
      r.mean_prob[static_cast<size_t>(e)] += pv[static_cast<size_t>(t * E + e)] / static_cast<double>(N);
  r.gate = gate_flat.to_vector<double>();
  aux_loss_ = load_balancing_loss(probs, r.fraction);
  routing_ = std::move(r);
  return reshape(out, x.shape());  // [..., D]
}

}  // namespace attn::nn
