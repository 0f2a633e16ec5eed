// attn/nn/moe.h — a mixture-of-experts feed-forward layer (Shazeer et al. 2017; GShard, Lepikhin
// et al. 2020; Switch, Fedus et al. 2021), a drop-in for the position-wise FFN of paper §3.3:
//   y_t = sum_{e in top-k(t), kept} g_{t,e} FFN_e(x_t),  router logits r_t = x_t W_r^T (no bias).
// Tokens are dispatched: each expert gathers the tokens routed to it and runs one batched FFN on
// them; unchosen experts never compute. Not here: expert parallelism, noisy or learned-bias
// routing, router z-loss, expert choice routing, token re-routing after a capacity drop.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "attn/core/rng.h"
#include "attn/nn/feed_forward.h"
#include "attn/nn/linear.h"
#include "attn/nn/module.h"

namespace attn::nn {

struct MoEOptions {
  int64_t d_model = 512;
  int64_t d_ff = 2048;  // of each expert
  int64_t n_experts = 8;
  int64_t top_k = 2;  // experts per token, 1 <= top_k <= n_experts
  // Gates. true: softmax over the k chosen logits, i.e. the chosen router probabilities
  // renormalised to sum 1 (Mixtral); with top_k = 1 the gate is then always 1 and the router
  // learns only through the load-balancing loss. false: the raw router probabilities p_{t,e}
  // (Switch, GShard top-1), which keep a gradient path to the router at any k.
  bool normalize_gates = true;
  // Capacity per expert C = ceil(capacity_factor * N * top_k / n_experts) for N tokens of one
  // forward; <= 0 means unlimited. Over capacity, routes are dropped in priority order (every
  // token's first choice before any second choice, then token order): a dropped route adds
  // nothing, the gates of the token's kept routes are not renormalised, and a token with every
  // route dropped outputs zeros (the residual connection around the layer carries it).
  double capacity_factor = 0.0;
  Activation activation = Activation::ReLU;
  double dropout = 0.0;  // inside each expert, as FeedForward
  DType dtype = DType::F32;
};

// What one forward routed, for inspection, the load-balancing loss and tests. N tokens, k routes
// each, indexed r = t * k + c (choice c of token t, c = 0 the highest probability).
struct MoERouting {
  int64_t tokens = 0;                  // N
  int64_t capacity = 0;                // C (N when unlimited)
  std::vector<int64_t> expert;         // [N * k] the expert of route r
  std::vector<double> gate;            // [N * k] its gate g
  std::vector<uint8_t> kept;           // [N * k] 0 = dropped over capacity
  std::vector<int64_t> expert_tokens;  // [E] kept routes per expert (what each expert computed)
  int64_t dropped = 0;                 // routes dropped over capacity
  std::vector<double> fraction;        // [E] f_e: share of the N * k routes choosing e (before drops)
  std::vector<double> mean_prob;       // [E] P_e: mean router probability of e over the N tokens
};

class MixtureOfExperts : public Module {
 public:
  // Children "router" (Linear [E, D], no bias; nn.Linear initialisation) and "experts" (a
  // ModuleList of FeedForward: "experts.0.linear1.weight", ...).
  MixtureOfExperts(const MoEOptions& options, Rng& rng);

  // x [B, T, D] (any [..., D]) -> [..., D], FeedForward's signature. Also computes aux_loss().
  Tensor forward(const Tensor& x);

  // The Switch/GShard load-balancing loss of the last forward, a differentiable scalar:
  //   aux = E * sum_e f_e * P_e,  f_e = (routes choosing e) / (N k) (a constant), P_e = mean_t p_{t,e}.
  // It is 1 when routing is uniform, and E when every token goes to one expert with probability 1.
  // Add coefficient * aux_loss() to the training loss (Switch used 0.01). Undefined before forward.
  const Tensor& aux_loss() const { return aux_loss_; }
  const MoERouting& last_routing() const { return routing_; }

  // The per-expert capacity for `tokens` tokens (see MoEOptions::capacity_factor).
  int64_t capacity(int64_t tokens) const;

  const MoEOptions& options() const { return options_; }
  Linear& router() { return *router_; }
  FeedForward& expert(int64_t e);
  int64_t n_experts() const { return options_.n_experts; }

 private:
  MoEOptions options_;
  std::shared_ptr<Linear> router_;
  std::shared_ptr<ModuleList> experts_;
  std::vector<std::shared_ptr<FeedForward>> expert_list_;
  Tensor aux_loss_;
  MoERouting routing_;
};

// aux = E * sum_e fraction[e] * mean_e(probs[:, e]): probs [N, E] router probabilities (f32/f64),
// fraction [E] constants. Differentiable with respect to probs. The loss MixtureOfExperts uses.
Tensor load_balancing_loss(const Tensor& probs, const std::vector<double>& fraction);

}  // namespace attn::nn
