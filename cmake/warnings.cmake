# Warnings for our own targets; -Werror when ATTN_WERROR is on (CI).
function(attn_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wno-unused-parameter)
  if(ATTN_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
