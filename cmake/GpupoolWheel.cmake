# The Python wheel's layout (`pip install .`, scikit-build-core; see pyproject.toml), installed as
# component `python` so that the C++ install (GpupoolInstall.cmake) stays out of the wheel:
#   gpupool/_gpupool_core.*.so       the extension, RPATH $ORIGIN
#   gpupool/libgpupool_runtime.so.0  the runtime it links, RPATH $ORIGIN (+ the link path)
#   gpupool/libcudart.so.*           the CUDA runtime (redistributable), so no toolkit is needed
#   gpupool/bin/gpupool              the command line, RPATH $ORIGIN/..
#   <venv>/bin/gpupool               a launcher for it (python/scripts/gpupool)
# The pure-Python modules come from python/gpupool (pyproject's wheel.packages).

# One file, no symlinks: a wheel is a zip, and the loader asks for the SONAME only.
set_target_properties(gpupool_runtime PROPERTIES VERSION ${PROJECT_VERSION_MAJOR} INSTALL_RPATH "$ORIGIN")
set_target_properties(_gpupool_core PROPERTIES INSTALL_RPATH "$ORIGIN")
set_target_properties(gpupool PROPERTIES INSTALL_RPATH "$ORIGIN/..")

install(TARGETS _gpupool_core LIBRARY DESTINATION gpupool COMPONENT python)
install(TARGETS gpupool_runtime LIBRARY DESTINATION gpupool NAMELINK_SKIP COMPONENT python)
install(TARGETS gpupool RUNTIME DESTINATION gpupool/bin COMPONENT python)
install(PROGRAMS ${PROJECT_SOURCE_DIR}/python/scripts/gpupool DESTINATION ${SKBUILD_SCRIPTS_DIR}
  COMPONENT python)

# libcudart is the one non-system library the runtime links (the driver and NVML are dlopen'ed).
get_target_property(gpupool_cudart CUDA::cudart IMPORTED_LOCATION)
if(gpupool_cudart)
  file(REAL_PATH ${gpupool_cudart} gpupool_cudart_file)
  execute_process(COMMAND objdump -p ${gpupool_cudart_file} OUTPUT_VARIABLE gpupool_cudart_dyn)
  if(gpupool_cudart_dyn MATCHES "SONAME +([^\n ]+)")
    install(FILES ${gpupool_cudart_file} DESTINATION gpupool RENAME ${CMAKE_MATCH_1} COMPONENT python)
  endif()
endif()
