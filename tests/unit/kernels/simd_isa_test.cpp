// Run-time ISA selection (src/kernels/simd/isa.h): names, the CPU check, the ATTN_ISA
// override (read again through select_isa_from_environment), errors for unknown names and
// for ISAs the CPU lacks, and IsaGuard's restore.
#include "kernels/simd/isa.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "attn/core/error.h"
#include "kernels/simd/vector_kernels.h"

namespace attn::kernels::simd {
namespace {

// Sets ATTN_ISA for one scope (unset when `value` is null) and restores the old value and
// the old active ISA afterwards.
class EnvIsa {
 public:
  explicit EnvIsa(const char* value) : saved_active_(active_isa()) {
    const char* old = std::getenv("ATTN_ISA");
    had_old_ = old != nullptr;
    if (had_old_) old_ = old;
    if (value)
      setenv("ATTN_ISA", value, 1);
    else
      unsetenv("ATTN_ISA");
  }
  ~EnvIsa() {
    if (had_old_)
      setenv("ATTN_ISA", old_.c_str(), 1);
    else
      unsetenv("ATTN_ISA");
    set_isa(saved_active_);
  }

 private:
  Isa saved_active_;
  bool had_old_ = false;
  std::string old_;
};

TEST(SimdIsa, NamesRoundTrip) {
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) EXPECT_EQ(parse_isa(isa_name(isa)), isa);
  EXPECT_EQ(parse_isa("generic"), Isa::Scalar);
}

TEST(SimdIsa, UnknownNamesAreErrors) {
  for (const char* bad : {"sse", "AVX2", "avx-512", "avx512f", " avx2"})
    EXPECT_THROW(parse_isa(bad), Error) << bad;
  try {
    parse_isa("neon");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[ATTN_ISA] unknown instruction set 'neon'"), std::string::npos)
        << e.what();
  }
}

TEST(SimdIsa, SupportFollowsTheCpu) {
  const auto isas = supported_isas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.front(), Isa::Scalar);
  EXPECT_EQ(best_isa(), isas.back());
#if defined(__x86_64__)
  EXPECT_EQ(isa_supported(Isa::Avx2), __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"));
  EXPECT_EQ(isa_supported(Isa::Avx512),
            __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") &&
                __builtin_cpu_supports("fma"));
#endif
  for (Isa isa : isas) EXPECT_EQ(vector_kernels(isa).isa, isa);
}

// Each ISA the CPU lacks is refused by name, by set_isa and by vector_kernels; each it has is
// resolved and served (so the test checks something on every CPU, one with all ISAs too).
TEST(SimdIsa, UnsupportedIsasAreErrorsAndSupportedOnesAreServed) {
  for (Isa isa : {Isa::Avx2, Isa::Avx512}) {
    if (isa_supported(isa)) {
      EXPECT_EQ(resolve_isa(isa_name(isa)), isa);
      EXPECT_EQ(vector_kernels(isa).isa, isa);
    } else {
      EXPECT_THROW(resolve_isa(isa_name(isa)), Error);
      EXPECT_THROW(set_isa(isa), Error);
      EXPECT_THROW(vector_kernels(isa), Error);
    }
  }
}

TEST(SimdIsa, EnvironmentOverrideSelectsEachSupportedIsa) {
  for (Isa isa : supported_isas()) {
    EnvIsa env(isa_name(isa));
    EXPECT_EQ(select_isa_from_environment(), isa);
    EXPECT_EQ(active_isa(), isa);
    EXPECT_EQ(vector_kernels().isa, isa);
  }
  {
    EnvIsa env(nullptr);
    EXPECT_EQ(select_isa_from_environment(), best_isa());
  }
  {
    EnvIsa env("");
    EXPECT_EQ(select_isa_from_environment(), best_isa());
  }
}

TEST(SimdIsa, BadEnvironmentValueIsAnErrorAndKeepsTheActiveIsa) {
  const Isa before = active_isa();
  EnvIsa env("avx1024");
  EXPECT_THROW(select_isa_from_environment(), Error);
  EXPECT_EQ(active_isa(), before);
}

TEST(SimdIsa, GuardRestoresThePreviousIsa) {
  const Isa before = active_isa();
  {
    IsaGuard guard(Isa::Scalar);
    EXPECT_EQ(active_isa(), Isa::Scalar);
    EXPECT_EQ(&vector_kernels(), &vector_kernels(Isa::Scalar));
  }
  EXPECT_EQ(active_isa(), before);
}

}  // namespace
}  // namespace attn::kernels::simd
