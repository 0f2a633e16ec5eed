// Building a model without initialisation (ModelInit::None, nn::SkipInitGuard) for loaders:
// every parameter allocated with its shape and dtype but zero, the random initialisers skipped
// only while the guard lives (nested guards restore), and a checkpoint loaded through
// load_checkpoint (which uses it) equal to the model saved.
#include <gtest/gtest.h>

#include <filesystem>

#include "attn/models/checkpoint.h"
#include "attn/models/factory.h"
#include "attn/nn/init.h"
#include "model_test_util.h"
#include "support/expect_close.h"

namespace attn::models {
namespace {

bool all_zero(const Tensor& t) {
  for (double v : t.to_vector<double>())
    if (v != 0.0) return false;
  return true;
}

TEST(ModelInit, NoneAllocatesEveryParameterButDrawsNothing) {
  for (Arch arch : {Arch::EncoderDecoder, Arch::DecoderOnly, Arch::EncoderOnly}) {
    ModelConfig c = test_util::tiny(arch);
    c.positional = nn::PositionalKind::Learned;
    const auto random = make_model(c);
    const auto bare = make_model(c, ModelInit::None);
    const auto a = random->named_parameters(), b = bare->named_parameters();
    ASSERT_EQ(a.size(), b.size()) << arch_name(arch);
    bool random_has_values = false;
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].first, b[i].first);
      EXPECT_EQ(a[i].second.shape(), b[i].second.shape()) << a[i].first;
      EXPECT_EQ(a[i].second.dtype(), b[i].second.dtype()) << a[i].first;
      // Weights and biases drawn at random stay zero; norms' constant weights are still filled.
      if (a[i].first.find("norm") == std::string::npos) {
        EXPECT_TRUE(all_zero(b[i].second)) << arch_name(arch) << " " << a[i].first;
        random_has_values = random_has_values || !all_zero(a[i].second);
      }
    }
    EXPECT_TRUE(random_has_values) << arch_name(arch);
  }
  EXPECT_FALSE(nn::init_skipped());  // the guard is gone with the call
}

TEST(ModelInit, GuardsNestAndRestore) {
  EXPECT_FALSE(nn::init_skipped());
  {
    nn::SkipInitGuard outer;
    {
      nn::SkipInitGuard inner;
      EXPECT_TRUE(nn::init_skipped());
    }
    EXPECT_TRUE(nn::init_skipped());
    Tensor t = Tensor::zeros({3, 2});
    Rng rng(1);
    nn::xavier_uniform_(t, rng);
    EXPECT_TRUE(all_zero(t));
    nn::constant_(t, 2.0);
    EXPECT_EQ(t.to_vector<double>(), std::vector<double>(6, 2.0));
  }
  EXPECT_FALSE(nn::init_skipped());
  Tensor t = Tensor::zeros({3, 2});
  Rng rng(1);
  nn::xavier_uniform_(t, rng);
  EXPECT_FALSE(all_zero(t));
}

TEST(ModelInit, LoadedCheckpointEqualsTheSavedModel) {
  const std::string dir = (std::filesystem::temp_directory_path() / "attn_model_init_test").string();
  std::filesystem::remove_all(dir);
  ModelConfig c = test_util::tiny(Arch::DecoderOnly);
  c.n_experts = 2;
  const auto saved = make_model(c);
  save_model(dir, *saved);
  const auto loaded = load_model(dir);
  const auto a = saved->named_parameters(), b = loaded->named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(test::all_close(a[i].second, b[i].second, 0.0)) << a[i].first;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace attn::models
