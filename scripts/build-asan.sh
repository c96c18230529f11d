#!/usr/bin/env bash
# Builds test programs with AddressSanitizer into ./build-asan (Debug), for hunting memory errors
# the normal build only shows as rare crashes. Not part of CI (about twice as slow to build and
# run). Pass the targets to build; default: the RPC tests. Run them with leak checks off (capnp's
# and MPI's globals are never freed):
#
#   bash scripts/build-asan.sh pool_rpc_test task_api_test
#   ASAN_OPTIONS=detect_leaks=0 GPUPOOL_SOURCE_DIR=$PWD build-asan/tests/runtime/pool_rpc_test
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f build-asan/build.ninja ]; then
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug \
    -DCMAKE_CXX_FLAGS="-fsanitize=address -fno-omit-frame-pointer" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address" -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address"
fi
ninja -C build-asan "${@:-pool_rpc_test}"
