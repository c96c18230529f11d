#!/usr/bin/env bash
# Builds test programs with ThreadSanitizer into ./build-tsan (RelWithDebInfo), for hunting data
# races between gpupool's threads (task workers, the lease manager, the RPC client's event-loop
# thread, the checkpoint writer). Not part of CI (a full rebuild, and the tests run 5-15x slower).
# Pass the targets to build; default: the suites whose synchronisation is pthread-based. Run each
# with the suppressions for the uninstrumented system libraries (see docs/thread-sanitizer.md):
#
#   bash scripts/build-tsan.sh task_api_test
#   TSAN_OPTIONS="suppressions=$PWD/scripts/tsan.supp halt_on_error=0 second_deadlock_stack=1" \
#     GPUPOOL_SOURCE_DIR=$PWD build-tsan/tests/runtime/task_api_test
set -euo pipefail
cd "$(dirname "$0")/.."
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
if [ ! -f build-tsan/build.ninja ]; then
  # -O1 keeps the stacks readable; the Python module and the benchmarks are not run under TSan.
  cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
    -DCMAKE_CXX_FLAGS="-fsanitize=thread -fno-omit-frame-pointer" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=thread" \
    -DGPUPOOL_BUILD_PYTHON=OFF -DGPUPOOL_BUILD_BENCH=OFF
fi
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(task_api_test runtime_test pool_rpc_test checkpoint_test)
fi
ninja -C build-tsan "${targets[@]}"
