#!/usr/bin/env bash
# Builds test programs with ThreadSanitizer into ./build-tsan (RelWithDebInfo at -O1), for hunting
# data races between gpupool's threads (task workers, lease threads, the pool's callback thread,
# the RPC loop threads, the checkpoint writer). Not part of CI (a full rebuild; tests run 2-10x
# slower). Pass the targets to build (and ninja flags such as -j2); default: the suites whose
# synchronisation is pthread-based. Also builds build-tsan/libtsan_absl_mutex.so, which makes
# Debian's uninstrumented absl::Mutex visible to TSan (scripts/tsan_absl_mutex.cc). Run each test
# with it preloaded, the suppressions for KJ, and UCX's memory hooks off (they crash TSan at
# thread exit); docs/thread-sanitizer.md has the results:
#
#   bash scripts/build-tsan.sh
#   UCX_MEM_EVENTS=no LD_PRELOAD=$PWD/build-tsan/libtsan_absl_mutex.so \
#     TSAN_OPTIONS="suppressions=$PWD/scripts/tsan.supp halt_on_error=0 second_deadlock_stack=1" \
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
# Interposes absl::Mutex/CondVar (see the file); rebuilt when its source changes.
if [ ! -f build-tsan/libtsan_absl_mutex.so ] || [ scripts/tsan_absl_mutex.cc -nt build-tsan/libtsan_absl_mutex.so ]; then
  "${CXX:-c++}" -std=c++20 -shared -fPIC -fsanitize=thread -O1 -g \
    -o build-tsan/libtsan_absl_mutex.so scripts/tsan_absl_mutex.cc -ldl
fi
targets=("$@")
if [ ${#targets[@]} -eq 0 ] || [[ "${targets[-1]}" == -* ]]; then
  targets+=(task_api_test runtime_test pool_rpc_test checkpoint_test)
fi
ninja -C build-tsan "${targets[@]}"
