// ops/threads.h: blas_core_type_fix, the OpenBLAS core type that the command line re-executes
// itself with when OpenBLAS fell back to its generic kernels on an AVX-512 CPU. Checked against
// what OpenBLAS reports in this process (openblas_get_corename) and the CPU's own flags, and a
// user's OPENBLAS_CORETYPE always wins (no fix is proposed then).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "attn/ops/threads.h"

extern "C" char* openblas_get_corename(void);

namespace attn {
namespace {

// Sets or unsets an environment variable for one scope, restoring it afterwards.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (value != nullptr)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_)
      setenv(name_, old_.c_str(), 1);
    else
      unsetenv(name_);
  }

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

bool has_avx512_for_skylakex() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512vl");
#else
  return false;
#endif
}

// What the fix should be in this process with OPENBLAS_CORETYPE unset or empty: this test
// binary never re-executes itself, so OpenBLAS's choice here is its own detection.
std::string expected_fix() {
  const std::string core = openblas_get_corename();
  if (core != "Prescott" || !has_avx512_for_skylakex()) return "";
#if defined(__x86_64__)
  return __builtin_cpu_supports("avx512bf16") ? "Cooperlake" : "SkylakeX";
#else
  return "";
#endif
}

TEST(BlasCore, FixOnlyForTheGenericFallbackOnAvx512) {
  ScopedEnv unset("OPENBLAS_CORETYPE", nullptr);
  EXPECT_EQ(blas_core_type_fix(), expected_fix()) << "OpenBLAS chose " << openblas_get_corename();
}

TEST(BlasCore, AUsersCoreTypeWins) {
  ScopedEnv chosen("OPENBLAS_CORETYPE", "Haswell");
  EXPECT_EQ(blas_core_type_fix(), "");
}

TEST(BlasCore, AnEmptyCoreTypeIsNotAChoice) {
  // Control for the test above: an empty variable is no choice, so the answer is detection's
  // again (and on a machine where OpenBLAS fell back, non-empty: the user's choice made the
  // difference there).
  ScopedEnv empty("OPENBLAS_CORETYPE", "");
  EXPECT_EQ(blas_core_type_fix(), expected_fix());
}

}  // namespace
}  // namespace attn
