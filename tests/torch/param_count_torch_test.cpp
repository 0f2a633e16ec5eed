// Parameter count of one encoder block against PyTorch (SPEC "what the seeds check"): our
// pre-norm EncoderLayer with D = 32, 4 heads, d_ff = 64 has nn.TransformerEncoderLayer's 8544
// parameters, under the same state_dict names with the same shapes, and loads its state_dict
// strictly. A strict load of a state_dict with one entry missing fails (the control).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "attn/nn/encoder.h"
#include "torch/fixture.h"

namespace attn::test {
namespace {

nn::LayerOptions seed_block(const TorchCase& c) {
  nn::LayerOptions o;
  o.d_model = c.integer("d_model");
  o.n_heads = c.integer("n_heads");
  o.d_ff = c.integer("d_ff");
  o.norm_first = true;
  o.dtype = DType::F32;
  return o;
}

TEST(ParamCountTorch, PreNormEncoderLayerHasPytorchsCountNamesAndShapes) {
  TorchCase c("param_count");
  ASSERT_EQ(c.integer("count"), 8544);  // the seed's figure, as PyTorch computed it
  Rng rng(1);
  nn::EncoderLayer layer(seed_block(c), rng);
  EXPECT_EQ(layer.num_parameters(), c.integer("count"));

  std::map<std::string, Shape> ours, theirs;
  for (const auto& [n, t] : layer.named_parameters()) ours[n] = t.shape();
  for (const auto& [n, t] : c.params()) theirs[n] = t.shape();
  EXPECT_EQ(ours, theirs);
  EXPECT_NO_THROW(c.load_params(layer));
}

TEST(ParamCountTorchControl, AStrictLoadWithAMissingEntryFails) {
  TorchCase c("param_count");
  Rng rng(1);
  nn::EncoderLayer layer(seed_block(c), rng);
  nn::NamedTensors state = c.params();
  state.pop_back();
  EXPECT_THROW(layer.load_state_dict(state, /*strict=*/true), Error);
}

}  // namespace
}  // namespace attn::test
