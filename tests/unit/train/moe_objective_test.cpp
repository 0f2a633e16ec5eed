// The training objectives add a mixture-of-experts model's load-balancing loss: with one expert
// per token and renormalised gates the gate is always 1, so the router learns from that loss
// alone. Its weight 0 is the control: then the router gets no gradient at all.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "attn/models/decoder_only.h"
#include "attn/ops/ops.h"
#include "attn/train/objective.h"

namespace attn::train {
namespace {

models::ModelConfig moe_config(double aux_weight) {
  models::ModelConfig c;
  c.arch = models::Arch::DecoderOnly;
  c.d_model = 8;
  c.n_heads = 2;
  c.n_decoder_layers = 1;
  c.d_ff = 16;
  c.dropout = 0.0;
  c.attention_dropout = 0.0;
  c.src_vocab_size = c.tgt_vocab_size = 10;
  c.max_len = 32;
  c.dtype = DType::F64;
  c.n_experts = 4;
  c.expert_top_k = 1;
  c.moe_aux_loss_weight = aux_weight;
  c.seed = 3;
  return c;
}

double router_grad_norm(double aux_weight, double* loss_value) {
  models::DecoderOnlyModel model(moe_config(aux_weight));
  model.train();
  ObjectiveOptions o;
  auto objective = make_objective(model, o);
  const std::vector<io::Example> data = {{{}, {4, 5, 6, 7, 8}}, {{}, {9, 8, 7}}};
  const BatchLoss b = objective->loss(data, {0, 1}, 0);
  b.loss.backward();
  *loss_value = b.loss.item();
  const auto g = model.parameter("layers.0.moe.router.weight").grad().to_vector<double>();
  double s = 0;
  for (double x : g) s += x * x;
  return std::sqrt(s);
}

TEST(MoeObjective, TheLoadBalancingLossTrainsTheRouterAndAddsWeightTimesAux) {
  double with_aux = 0, without_aux = 0;
  const double g = router_grad_norm(0.5, &with_aux);
  const double g0 = router_grad_norm(0.0, &without_aux);
  EXPECT_GT(g, 1e-6);
  EXPECT_EQ(g0, 0.0);  // top-1 renormalised gates: the task loss alone never reaches the router
  // The same weights and batch: the difference is 0.5 * aux, and aux >= 1 (1 when balanced).
  models::DecoderOnlyModel model(moe_config(0.5));
  model.train();
  auto objective = make_objective(model, ObjectiveOptions{});
  const std::vector<io::Example> data = {{{}, {4, 5, 6, 7, 8}}, {{}, {9, 8, 7}}};
  (void)objective->loss(data, {0, 1}, 0);
  const double aux = model.aux_loss().item();
  EXPECT_GE(aux, 1.0 - 1e-12);
  EXPECT_NEAR(with_aux - without_aux, 0.5 * aux, 1e-12);
}

}  // namespace
}  // namespace attn::train
