#!/usr/bin/env bash
# Configures (once) and builds gpupool into ./build with Ninja. Idempotent: a second run only
# rebuilds what changed. BUILD_DIR and CMAKE_BUILD_TYPE may be set by the caller.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
# ccache, where installed, makes rebuilds in a second checkout cheap (BUILD-NOTES: 2 cores).
launcher=()
if command -v ccache >/dev/null 2>&1; then
  # Paths inside the checkout are hashed relative to it, so clones elsewhere share the cache.
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
if [ ! -f "$build_dir/build.ninja" ]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-RelWithDebInfo}" "${launcher[@]}"
fi
cmake --build "$build_dir" -j "$(nproc)"
