// kernels/simd/isa.cpp — run-time choice of the vector kernels' ISA (isa.h): the CPU check,
// the ATTN_ISA override and the table of the active ISA. Compiled without any ISA flags, so
// it runs everywhere; it only reads cpuid (through libgcc's __builtin_cpu_supports, which
// also checks that the OS saves the wider registers) and hands out function tables.
// Not here: the kernels (vector_kernels.cpp, compiled once per ISA).
#include "kernels/simd/isa.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include "attn/core/error.h"
#include "kernels/simd/vector_kernels.h"

namespace attn::kernels::simd {

namespace {

constexpr const char* kOp = "ATTN_ISA";

bool cpu_has(Isa isa) {
#if defined(ATTN_SIMD_X86)
  switch (isa) {
    case Isa::Scalar: return true;
    case Isa::Avx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Isa::Avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") &&
             __builtin_cpu_supports("fma");
  }
  return false;
#else
  return isa == Isa::Scalar;  // only the portable build exists off x86-64
#endif
}

// The active table; null until the first active_isa() resolves ATTN_ISA.
std::atomic<const VectorKernels*> g_active{nullptr};

const VectorKernels* table_of(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return &detail::kScalarKernels;
#if defined(ATTN_SIMD_X86)
    case Isa::Avx2: return &detail::kAvx2Kernels;
    case Isa::Avx512: return &detail::kAvx512Kernels;
#else
    default: return nullptr;
#endif
  }
  return nullptr;
}

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
  }
  return "?";
}

Isa parse_isa(std::string_view name) {
  if (name == "scalar" || name == "generic") return Isa::Scalar;
  if (name == "avx2") return Isa::Avx2;
  if (name == "avx512") return Isa::Avx512;
  fail(kOp, "unknown instruction set '", std::string(name), "' (expected scalar, avx2 or avx512)");
}

bool isa_supported(Isa isa) { return table_of(isa) != nullptr && cpu_has(isa); }

std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512})
    if (isa_supported(isa)) out.push_back(isa);
  return out;
}

Isa best_isa() { return supported_isas().back(); }

Isa resolve_isa(const char* env_value) {
  if (env_value == nullptr || *env_value == '\0') return best_isa();
  const Isa isa = parse_isa(env_value);
  ATTN_CHECK(isa_supported(isa), kOp, "instruction set '", isa_name(isa),
             "' is not supported by this CPU or build (best available: ", isa_name(best_isa()), ")");
  return isa;
}

Isa select_isa_from_environment() {
  const Isa isa = resolve_isa(std::getenv("ATTN_ISA"));
  g_active.store(table_of(isa), std::memory_order_release);
  return isa;
}

Isa active_isa() { return vector_kernels().isa; }

void set_isa(Isa isa) {
  ATTN_CHECK(isa_supported(isa), "set_isa", "instruction set '", isa_name(isa),
             "' is not supported by this CPU or build (best available: ", isa_name(best_isa()), ")");
  g_active.store(table_of(isa), std::memory_order_release);
}

const VectorKernels& vector_kernels() {
  const VectorKernels* t = g_active.load(std::memory_order_acquire);
  if (t == nullptr) {
    select_isa_from_environment();  // throws on a bad ATTN_ISA, leaving nothing selected
    t = g_active.load(std::memory_order_acquire);
  }
  return *t;
}

const VectorKernels& vector_kernels(Isa isa) {
  ATTN_CHECK(isa_supported(isa), "vector_kernels", "instruction set '", isa_name(isa),
             "' is not supported by this CPU or build (best available: ", isa_name(best_isa()), ")");
  return *table_of(isa);
}

}  // namespace attn::kernels::simd
