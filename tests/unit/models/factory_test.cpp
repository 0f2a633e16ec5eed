// make_model: one family per arch, validated configs, and the shared Model interface.
#include <gtest/gtest.h>

#include "attn/models/factory.h"
#include "model_test_util.h"

namespace attn::models {
namespace {

TEST(MakeModel, BuildsTheFamilyTheConfigNames) {
  auto ed = make_model(test_util::tiny(Arch::EncoderDecoder));
  auto dec = make_model(test_util::tiny(Arch::DecoderOnly));
  auto enc = make_model(test_util::tiny(Arch::EncoderOnly));
  EXPECT_NE(std::dynamic_pointer_cast<EncoderDecoderModel>(ed), nullptr);
  EXPECT_NE(std::dynamic_pointer_cast<DecoderOnlyModel>(dec), nullptr);
  EXPECT_NE(std::dynamic_pointer_cast<EncoderOnlyModel>(enc), nullptr);
  EXPECT_EQ(dec->arch(), Arch::DecoderOnly);
  EXPECT_EQ(ed->config().d_model, 8);
  EXPECT_EQ(ed->module().num_parameters(), ed->num_parameters());
  EXPECT_GT(enc->num_parameters(), 0);
}

TEST(MakeModel, RejectsAnInvalidConfig) {
  ModelConfig c = test_util::tiny(Arch::DecoderOnly);
  c.dropout = 1.0;
  EXPECT_THROW(make_model(c), Error);
}

TEST(MakeModel, EvalReachesEveryModule) {
  auto model = make_model(test_util::tiny(Arch::EncoderDecoder));
  model->eval();
  for (auto& [name, m] : model->named_modules()) EXPECT_FALSE(m->is_training()) << name;
}

}  // namespace
}  // namespace attn::models
