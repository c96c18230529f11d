#!/usr/bin/env bash
# Configures (once) and builds gpupool into ./build with Ninja. Idempotent: a second run only
# rebuilds what changed. BUILD_DIR and CMAKE_BUILD_TYPE may be set by the caller.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
if [ ! -f "$build_dir/build.ninja" ]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-RelWithDebInfo}"
fi
cmake --build "$build_dir" -j "$(nproc)"
