# Finds every dependency of the design once, for all targets. scripts/install-deps.sh installs them.

find_package(CUDAToolkit REQUIRED)
# NCCL ships with the toolkit here but has no CMake or pkg-config files.
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} REQUIRED)
find_library(NCCL_LIBRARY NAMES nccl HINTS ${CUDAToolkit_LIBRARY_DIR} REQUIRED)
add_library(gpupool_nccl INTERFACE)
target_include_directories(gpupool_nccl INTERFACE ${NCCL_INCLUDE_DIR})
target_link_libraries(gpupool_nccl INTERFACE ${NCCL_LIBRARY})

find_package(MPI REQUIRED COMPONENTS C CXX)
find_package(ucx CONFIG REQUIRED)
find_package(CapnProto CONFIG REQUIRED)
find_package(absl CONFIG REQUIRED)
find_package(yaml-cpp CONFIG REQUIRED)
find_package(nlohmann_json CONFIG REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
find_package(SQLite3 REQUIRED)
find_package(OpenSSL 3.0 REQUIRED COMPONENTS Crypto)  # HMAC-SHA256: a worker and its driver prove the job's key
find_package(PkgConfig REQUIRED)
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)
find_package(Threads REQUIRED)

if(GPUPOOL_BUILD_TESTS)
  find_package(GTest CONFIG REQUIRED)
endif()
if(GPUPOOL_BUILD_BENCH)
  find_package(benchmark CONFIG REQUIRED)
endif()
if(GPUPOOL_BUILD_PYTHON)
  # Debian's pytest, numpy and pybind11 belong to /usr/bin/python3; the python3 on PATH may be a
  # pyenv shim. Pick one interpreter explicitly so the module and its tests agree.
  if(NOT DEFINED Python_EXECUTABLE AND EXISTS /usr/bin/python3)
    set(Python_EXECUTABLE /usr/bin/python3)
  endif()
  set(PYBIND11_FINDPYTHON ON)
  find_package(Python REQUIRED COMPONENTS Interpreter Development.Module)
  find_package(pybind11 CONFIG REQUIRED)
endif()
