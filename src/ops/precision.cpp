// The precision of the matrix products (attn/ops/precision.h): one flag per thread, read by
// linear and matmul (src/ops/matmul.cpp).
#include "attn/ops/precision.h"

#include <string>

#include "attn/core/error.h"

namespace attn {

namespace {
thread_local Precision g_precision = Precision::F32;
}  // namespace

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::F32: return "f32";
    case Precision::BF16: return "bf16";
  }
  return "?";
}

Precision parse_precision(std::string_view name) {
  if (name == "f32") return Precision::F32;
  if (name == "bf16") return Precision::BF16;
  fail("precision", "unknown precision '", std::string(name), "' (choices: f32, bf16)");
}

Precision matmul_precision() { return g_precision; }

PrecisionGuard::PrecisionGuard(Precision p) : previous_(g_precision) { g_precision = p; }

PrecisionGuard::~PrecisionGuard() { g_precision = previous_; }

}  // namespace attn
