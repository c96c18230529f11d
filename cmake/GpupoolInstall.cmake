# `cmake --install build --prefix P` installs libgpupool_runtime, its public headers, the gpupool
# tool and a CMake package, so another project can do:
#   find_package(gpupool REQUIRED)   # with CMAKE_PREFIX_PATH=P
#   target_link_libraries(app PRIVATE gpupool::runtime)
include(CMakePackageConfigHelpers)

# Keep the toolkit's library directory (libcudart) on the installed files' run path.
set_target_properties(gpupool_runtime gpupool PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)

install(TARGETS gpupool_runtime EXPORT gpupoolTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS gpupool RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/runtime/include/gpupool
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
install(EXPORT gpupoolTargets NAMESPACE gpupool::
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/gpupool)
# The exported target is named gpupool::runtime.
set_target_properties(gpupool_runtime PROPERTIES EXPORT_NAME runtime)

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/gpupoolConfig.cmake.in
  ${PROJECT_BINARY_DIR}/gpupoolConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/gpupool)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/gpupoolConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/gpupoolConfig.cmake ${PROJECT_BINARY_DIR}/gpupoolConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/gpupool)
