# OpenBLAS as the imported target attn::openblas, for the build and for the installed package
# (attnConfig.cmake includes this file). Prefers Debian's OpenMP build so that BLAS and attn's
# OpenMP share one thread pool. Sets ATTN_OPENBLAS; defines nothing when OpenBLAS is missing.
if(NOT TARGET attn::openblas)
  find_library(ATTN_OPENBLAS NAMES libopenblas.so.0
    PATHS /usr/lib/x86_64-linux-gnu/openblas-openmp /usr/lib/aarch64-linux-gnu/openblas-openmp
    NO_DEFAULT_PATH)
  if(NOT ATTN_OPENBLAS)
    find_library(ATTN_OPENBLAS NAMES openblas)
  endif()
  if(ATTN_OPENBLAS)
    add_library(attn::openblas UNKNOWN IMPORTED)
    set_target_properties(attn::openblas PROPERTIES IMPORTED_LOCATION ${ATTN_OPENBLAS})
  endif()
endif()
