// Tolerances shared by every test (docs/conventions.md): absolute for values, relative
// for gradients against PyTorch, and for float64 finite differences.
#pragma once

namespace attn::test {

inline constexpr double kAbsF32 = 1e-5;     // float32 outputs against a reference
inline constexpr double kAbsF64 = 1e-10;    // float64 outputs against a reference
inline constexpr double kRelGrad = 1e-4;    // gradients against PyTorch, relative
inline constexpr double kGradcheckRel = 1e-6;  // float64 analytic vs central differences

}  // namespace attn::test
