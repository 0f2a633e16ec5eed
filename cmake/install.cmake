# cmake --install: the public headers, the static library of every layer, the `attn`
# executable, a CMake package (find_package(attn): attn::<layer> and attn::attn) and attn.pc.
# Included by the top-level CMakeLists.txt after the targets exist; installs no tests, no
# examples and no private headers (src/ stays private).
include(CMakePackageConfigHelpers)
set(ATTN_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/attn)

install(DIRECTORY ${CMAKE_SOURCE_DIR}/include/attn DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS ${ATTN_LIBRARIES} attn_all EXPORT attnTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS attn_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT attnTargets NAMESPACE attn:: DESTINATION ${ATTN_CMAKE_DIR})

configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/attnConfig.cmake.in
  ${CMAKE_BINARY_DIR}/attnConfig.cmake INSTALL_DESTINATION ${ATTN_CMAKE_DIR})
# 0.x: a new minor version may change the API.
write_basic_package_version_file(${CMAKE_BINARY_DIR}/attnConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/attnConfig.cmake ${CMAKE_BINARY_DIR}/attnConfigVersion.cmake
  ${CMAKE_SOURCE_DIR}/cmake/attn_openblas.cmake DESTINATION ${ATTN_CMAKE_DIR})

# attn.pc: the static libraries top layer first, so that one link line resolves them, then
# what they link; prefix is found from the file's own place, so any --prefix works.
set(ATTN_PC_LIBS "")
set(ATTN_PC_ORDER ${ATTN_LIBRARIES})
list(REVERSE ATTN_PC_ORDER)
foreach(lib ${ATTN_PC_ORDER})
  string(APPEND ATTN_PC_LIBS " -l${lib}")
endforeach()
set(ATTN_PC_REQUIRES "nlohmann_json sentencepiece icu-uc cpp-httplib")
if(ATTN_HAVE_MPI)
  string(APPEND ATTN_PC_REQUIRES " mpi-c")
endif()
configure_file(${CMAKE_SOURCE_DIR}/cmake/attn.pc.in ${CMAKE_BINARY_DIR}/attn.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/attn.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
