# Per-ISA builds of the vector kernels (src/kernels/simd/, after CTranslate2's
# ct2_compile_kernels_for_isa): vector_kernels.cpp is compiled once per instruction set into
# its own object library, each with its own flags, and isa.cpp picks one at run time.
# Only these objects see -mavx2/-mavx512f, so the library still runs on CPUs without them.
# -ffp-contract=off everywhere: the compiler may not fuse a * b + c behind the kernels' back,
# so element-wise kernels give the same bits on every ISA and only explicit fma() calls fuse.

set(ATTN_SIMD_DIR ${CMAKE_SOURCE_DIR}/src/kernels/simd)

if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  set(ATTN_SIMD_X86 ON)
else()
  set(ATTN_SIMD_X86 OFF)
endif()

# One object library attn_simd_<name> from vector_kernels.cpp with ATTN_SIMD_ISA=<id> and <flags>.
function(attn_isa_object name id)
  add_library(attn_simd_${name} OBJECT ${ATTN_SIMD_DIR}/vector_kernels.cpp)
  target_include_directories(attn_simd_${name} PRIVATE ${CMAKE_SOURCE_DIR}/include ${CMAKE_SOURCE_DIR}/src)
  target_compile_definitions(attn_simd_${name} PRIVATE ATTN_SIMD_ISA=${id})
  target_compile_options(attn_simd_${name} PRIVATE -ffp-contract=off ${ARGN})
  attn_warnings(attn_simd_${name})
endfunction()

# Adds the dispatcher and every ISA build of the vector kernels to `target`.
function(attn_add_isa_kernels target)
  attn_isa_object(scalar 0)
  set(objects $<TARGET_OBJECTS:attn_simd_scalar>)
  if(ATTN_SIMD_X86)
    attn_isa_object(avx2 1 -mavx2 -mfma)
    # GCC 12's avx512fintrin.h self-initialises its undefined registers (__m512 __Y = __Y),
    # which -Wuninitialized flags at every use; the same source is checked with the warning
    # on in the scalar and AVX2 builds (and by clang, which has neither the problem nor
    # -Wmaybe-uninitialized).
    attn_isa_object(avx512 2 -mavx512f -mavx2 -mfma $<$<CXX_COMPILER_ID:GNU>:-Wno-uninitialized>
      $<$<CXX_COMPILER_ID:GNU>:-Wno-maybe-uninitialized>)
    list(APPEND objects $<TARGET_OBJECTS:attn_simd_avx2> $<TARGET_OBJECTS:attn_simd_avx512>)
  endif()
  # The dispatcher is compiled for the baseline ISA like the rest of the library.
  add_library(attn_simd_dispatch OBJECT ${ATTN_SIMD_DIR}/isa.cpp)
  target_include_directories(attn_simd_dispatch PRIVATE ${CMAKE_SOURCE_DIR}/include ${CMAKE_SOURCE_DIR}/src)
  if(ATTN_SIMD_X86)
    target_compile_definitions(attn_simd_dispatch PRIVATE ATTN_SIMD_X86)
  endif()
  attn_warnings(attn_simd_dispatch)
  target_sources(${target} PRIVATE $<TARGET_OBJECTS:attn_simd_dispatch> ${objects})
  if(ATTN_SIMD_X86)
    message(STATUS "attn: vector kernels for scalar, avx2 and avx512, chosen at run time (ATTN_ISA)")
  else()
    message(STATUS "attn: vector kernels for scalar only (not x86-64)")
  endif()
endfunction()
