#!/usr/bin/env bash
# Builds, on this (GPU-less) machine, what the lent GPU machine runs, into .device/gpu (ignored by
# git; name it in the device tool's carry list): a stripped Release build for sm_90 (H100/H200) of
# the gpupool command, the real-GPU tests, the GPU bench, the device-memory tests and the
# tasks-anywhere example (a worker on the real GPU), with every
# shared library they need that a bare CUDA image lacks (abseil, Cap'n Proto, UCX, Open MPI,
# SQLite, cudart). NCCL is not carried (the toolkit's libnccl.so.2 alone is 218 MB): the GPU
# machine's own (the nvidia-nccl-cu13 Python package) is used there; scripts/gpu-check.sh finds it.
#   bash scripts/gpu-bundle.sh         then, on the GPU machine:  bash scripts/gpu-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bundle=.device/gpu
build=build-gpu
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DGPUPOOL_BUILD_PYTHON=OFF "${launcher[@]}" >/dev/null
targets=(gpupool real_gpu_test gpu_bench runtime_test tasks_anywhere)
ninja -C "$build" "${targets[@]}"
rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/lib"
cp "$build/runtime/gpupool" "$build/tests/gpu/real_gpu_test" "$build/bench/gpu/gpu_bench" \
   "$build/tests/runtime/runtime_test" "$build/examples/tasks_anywhere/tasks_anywhere" "$bundle/bin/"
# libgpupool_runtime.so and friends built here.
find "$build" -name 'libgpupool*.so*' -exec cp -P {} "$bundle/lib/" \;
strip --strip-unneeded "$bundle"/bin/* "$bundle"/lib/*.so* 2>/dev/null || true
# Every shared library the binaries need, except the C runtime, the driver's and NCCL (the GPU
# machine has its own, newer or matched to its driver).
system='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|librt\.|libpthread\.|libgcc_s\.|libstdc\+\+\.|libcuda\.|libnvidia-ml\.|libnccl\.)'
for f in "$bundle"/bin/* "$bundle"/lib/*.so*; do
  { LD_LIBRARY_PATH="$bundle/lib:${LD_LIBRARY_PATH:-}" ldd "$f" 2>/dev/null || true; } | awk '$3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  [[ "$name" =~ $system ]] && continue
  [ -e "$bundle/lib/$name" ] || cp -L "$path" "$bundle/lib/$name"
done
strip --strip-unneeded "$bundle"/lib/*.so* 2>/dev/null || true
# UCX loads its transports as modules from <libdir>/ucx.
if [ -d /usr/lib/x86_64-linux-gnu/ucx ]; then
  mkdir -p "$bundle/lib/ucx"
  cp -L /usr/lib/x86_64-linux-gnu/ucx/libuct_cma.so* /usr/lib/x86_64-linux-gnu/ucx/libucx_perftest_*.so* \
     "$bundle/lib/ucx/" 2>/dev/null || true
fi
du -sh "$bundle"
echo "bundle ready in $bundle: run scripts/gpu-check.sh on the GPU machine (carry .device/gpu)"
