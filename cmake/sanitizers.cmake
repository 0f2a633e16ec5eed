# Sanitizer and fuzzing builds (docs/fuzzing.md).
#   ATTN_SANITIZE=ON  every target with AddressSanitizer + UndefinedBehaviorSanitizer; the first
#                     report ends the process (-fno-sanitize-recover), so a test that trips one fails.
#   ATTN_FUZZ=ON      also the libFuzzer targets of tests/fuzz/ (clang only; implies ATTN_SANITIZE):
#                     the libraries get libFuzzer's coverage instrumentation (fuzzer-no-link), the
#                     fuzz executables link libFuzzer's main (-fsanitize=fuzzer).
# Both are meant for a build folder of their own (build-san/), never for a release build.
if(ATTN_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "attn: ATTN_FUZZ needs clang (libFuzzer), e.g. -DCMAKE_CXX_COMPILER=clang++-14")
  endif()
  set(ATTN_SANITIZE ON)
endif()
if(ATTN_SANITIZE)
  # -gline-tables-only: reports with file:line (all a sanitizer report prints) at a fraction of
  # full -g's compile and link time. The Release flags' -O2 stay: the sanitized tests train
  # models, and -O1 would slow them more than it speeds the build.
  add_compile_options(-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    add_compile_options(-gline-tables-only)
  else()
    add_compile_options(-g1)
  endif()
  add_link_options(-fsanitize=address,undefined)
  # The instrumentation keeps clang from vectorizing some `#pragma omp simd` loops, which it
  # reports as -Wpass-failed; only a sanitized build loses that vectorization.
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    add_compile_options(-Wno-pass-failed)
  endif()
  # clang's OpenMP is LLVM's libomp, while Debian's OpenMP OpenBLAS calls GCC's libgomp: two
  # OpenMP runtimes in one process, which was seen to hang (OpenBLAS's exec_blas spinning while
  # its worker waits in libomp). The sanitizer build takes OpenBLAS's pthread variant instead, so
  # the process holds one OpenMP runtime (attn_openblas.cmake keeps a library found here).
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    find_library(ATTN_OPENBLAS NAMES libopenblas.so.0
      PATHS /usr/lib/x86_64-linux-gnu/openblas-pthread /usr/lib/aarch64-linux-gnu/openblas-pthread
      NO_DEFAULT_PATH)
    if(NOT ATTN_OPENBLAS)
      message(WARNING "attn: no pthread OpenBLAS (Debian: libopenblas0-pthread); the sanitizer "
                      "build will hold two OpenMP runtimes (docs/fuzzing.md)")
    endif()
  endif()
  message(STATUS "attn: AddressSanitizer + UndefinedBehaviorSanitizer (ATTN_SANITIZE)")
endif()
if(ATTN_FUZZ)
  add_compile_options(-fsanitize=fuzzer-no-link)
  message(STATUS "attn: libFuzzer targets in tests/fuzz (ATTN_FUZZ)")
endif()
