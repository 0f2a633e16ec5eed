// kernels/simd/isa.h — which instruction set the vector kernels run on, chosen at run time.
// The same vector-kernel source is compiled once per ISA (cmake/isa_kernels.cmake): the
// portable scalar build, AVX2+FMA and AVX-512F. At first use the CPU is asked (cpuid through
// __builtin_cpu_supports) and the widest supported ISA is taken, unless the environment
// variable ATTN_ISA=scalar|avx2|avx512 names one ("generic" is accepted for scalar); naming
// an ISA the CPU lacks is an error. Not here: the kernels themselves (vector_kernels.h).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace attn::kernels::simd {

enum class Isa : uint8_t { Scalar, Avx2, Avx512 };

// "scalar", "avx2", "avx512".
const char* isa_name(Isa isa);
// The ISA a name denotes ("scalar" or "generic", "avx2", "avx512"; case-sensitive); throws
// attn::Error "[ATTN_ISA] ..." for any other name.
Isa parse_isa(std::string_view name);
// Whether this binary holds the ISA's kernels and this CPU (and its OS) can run them.
bool isa_supported(Isa isa);
// Every supported ISA, narrowest first (always starts with Scalar).
std::vector<Isa> supported_isas();
// The widest supported ISA.
Isa best_isa();
// The ISA an ATTN_ISA value selects: best_isa() for null or "", else parse_isa(value), which
// must be supported (an attn::Error naming the ISA and the best one otherwise).
Isa resolve_isa(const char* env_value);

// The ISA the kernels use now: resolved from ATTN_ISA on the first call (an error there is
// thrown from every call until the environment is fixed), or the last set_isa().
Isa active_isa();
// Makes `isa` active for the whole process (tests and benchmarks); it must be supported.
void set_isa(Isa isa);
// Re-reads ATTN_ISA and makes its ISA active (what the first active_isa() call does).
Isa select_isa_from_environment();

// Makes an ISA active for one scope and restores the previous one afterwards.
class IsaGuard {
 public:
  explicit IsaGuard(Isa isa) : previous_(active_isa()) { set_isa(isa); }
  ~IsaGuard() { set_isa(previous_); }
  IsaGuard(const IsaGuard&) = delete;
  IsaGuard& operator=(const IsaGuard&) = delete;

 private:
  Isa previous_;
};

}  // namespace attn::kernels::simd
