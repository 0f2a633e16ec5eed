# run_example.cmake — one example of examples/: configure it out of tree against the installed
# package (-DCMAKE_PREFIX_PATH=PREFIX), build it, run it with ARGS and WORK/stdin.txt, and
# require every regex of EXPECT in its output (ARGS and EXPECT come from WORK/example.cmake).
# Run by tests/install/CMakeLists.txt as `cmake -P`; it prints the example's output and never
# reads attn's source tree.
foreach(var SOURCE WORK PREFIX CXX)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_example.cmake: -D${var}= is required")
  endif()
endforeach()
get_filename_component(name ${SOURCE} NAME)
include(${WORK}/example.cmake)
set(launcher "")
if(LAUNCHER)
  set(launcher -DCMAKE_CXX_COMPILER_LAUNCHER=${LAUNCHER})
endif()

file(REMOVE_RECURSE ${WORK}/build)
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE} -B ${WORK}/build -DCMAKE_BUILD_TYPE=Release
  -DCMAKE_PREFIX_PATH=${PREFIX} -DCMAKE_CXX_COMPILER=${CXX} ${launcher} COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK}/build COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND ${WORK}/build/${name} ${ARGS} INPUT_FILE ${WORK}/stdin.txt
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
message("${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "example ${name} exited with ${rc}:\n${err}")
endif()
foreach(regex ${EXPECT})
  if(NOT out MATCHES "${regex}")
    message(FATAL_ERROR "example ${name}: no line matches \"${regex}\"")
  endif()
endforeach()
