#include "runtime/gpu/known_answer_matmul.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace gpupool::gpu {
namespace {

constexpr int kTile = 16;

absl::Status CudaError(const char* call, cudaError_t err) {
  (void)cudaGetLastError();
  std::string message = std::string(call) + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")";
  if (err == cudaErrorInsufficientDriver || err == cudaErrorNoDevice || err == cudaErrorInvalidDevice) {
    return absl::UnavailableError(message);
  }
  if (err == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

// Fixed-seed values in [-4, 4]: a splitmix of the index, so host and device agree without
// copying a generator's state.
int ValueAt(uint64_t seed, uint64_t i) {
  uint64_t x = (i + seed) * 0x9E3779B97F4A7C15ull;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  return static_cast<int>(x % 9) - 4;
}

__global__ void TiledMatmul(const float* a, const float* b, float* c, int n) {
  __shared__ float ta[kTile][kTile];
  __shared__ float tb[kTile][kTile];
  const int row = blockIdx.y * kTile + threadIdx.y;
  const int col = blockIdx.x * kTile + threadIdx.x;
  float sum = 0;
  for (int t = 0; t < n; t += kTile) {
    ta[threadIdx.y][threadIdx.x] = (row < n && t + threadIdx.x < n) ? a[row * n + t + threadIdx.x] : 0.f;
    tb[threadIdx.y][threadIdx.x] = (col < n && t + threadIdx.y < n) ? b[(t + threadIdx.y) * n + col] : 0.f;
    __syncthreads();
    for (int k = 0; k < kTile; ++k) sum += ta[threadIdx.y][k] * tb[k][threadIdx.x];
    __syncthreads();
  }
  if (row < n && col < n) c[row * n + col] = sum;
}

}  // namespace

absl::StatusOr<size_t> FreeDeviceMemory(int device) {
  if (cudaError_t err = cudaSetDevice(device); err != cudaSuccess) return CudaError("cudaSetDevice", err);
  size_t free_bytes = 0, total = 0;
  if (cudaError_t err = cudaMemGetInfo(&free_bytes, &total); err != cudaSuccess) return CudaError("cudaMemGetInfo", err);
  return free_bytes;
}

absl::StatusOr<MatmulTestResult> RunKnownAnswerMatmul(int device, int n) {
  if (n < 16 || n > 4096) return absl::InvalidArgumentError("matrix size must be in [16, 4096], not " + std::to_string(n));
  if (cudaError_t err = cudaSetDevice(device); err != cudaSuccess) return CudaError("cudaSetDevice", err);
  const size_t count = static_cast<size_t>(n) * n;
  std::vector<float> a(count), b(count), c(count);
  std::vector<int> ai(count), bi(count);
  for (size_t i = 0; i < count; ++i) {
    ai[i] = ValueAt(1, i);
    bi[i] = ValueAt(2, i);
    a[i] = static_cast<float>(ai[i]);
    b[i] = static_cast<float>(bi[i]);
  }
  float *da = nullptr, *db = nullptr, *dc = nullptr;
  cudaError_t err = cudaMalloc(&da, count * sizeof(float));
  if (err == cudaSuccess) err = cudaMalloc(&db, count * sizeof(float));
  if (err == cudaSuccess) err = cudaMalloc(&dc, count * sizeof(float));
  if (err == cudaSuccess) err = cudaMemcpy(da, a.data(), count * sizeof(float), cudaMemcpyHostToDevice);
  if (err == cudaSuccess) err = cudaMemcpy(db, b.data(), count * sizeof(float), cudaMemcpyHostToDevice);
  MatmulTestResult result;
  result.elements = 0;  // counted as checked, below
  cudaEvent_t start = nullptr, stop = nullptr;
  if (err == cudaSuccess) err = cudaEventCreate(&start);
  if (err == cudaSuccess) err = cudaEventCreate(&stop);
  if (err == cudaSuccess) {
    dim3 block(kTile, kTile);
    dim3 grid((n + kTile - 1) / kTile, (n + kTile - 1) / kTile);
    cudaEventRecord(start);
    TiledMatmul<<<grid, block>>>(da, db, dc, n);
    cudaEventRecord(stop);
    err = cudaGetLastError();
  }
  if (err == cudaSuccess) err = cudaEventSynchronize(stop);
  float ms = 0;
  if (err == cudaSuccess) err = cudaEventElapsedTime(&ms, start, stop);
  if (err == cudaSuccess) err = cudaMemcpy(c.data(), dc, count * sizeof(float), cudaMemcpyDeviceToHost);
  if (start != nullptr) cudaEventDestroy(start);
  if (stop != nullptr) cudaEventDestroy(stop);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
  if (err != cudaSuccess) return CudaError("known-answer matmul", err);
  // The exact answer, in integers on the host, for one row of every tile row: row b*kTile + (b %
  // rows) of tile row b (rows: kTile, or fewer in a partial last one). Every block of the kernel computes one tile, so each block has one of its
  // thread rows checked, a different one from tile row to tile row: a faulty SM shows in whichever
  // blocks it ran, at 1/kTile of the host's cost of checking everything (for n = 2048 the full
  // check took ~6 s of host time against 2 ms on the GPU). k-j order keeps it cache-friendly.
  std::vector<int64_t> expected(n);
  for (int b = 0; b * kTile < n; ++b) {
    const int rows = std::min(kTile, n - b * kTile);  // the last tile row may be partial
    const int i = b * kTile + (b % rows);
    std::fill(expected.begin(), expected.end(), 0);
    for (int k = 0; k < n; ++k) {
      const int64_t aik = ai[static_cast<size_t>(i) * n + k];
      if (aik == 0) continue;
      const int* brow = &bi[static_cast<size_t>(k) * n];
      for (int j = 0; j < n; ++j) expected[j] += aik * brow[j];
    }
    const float* crow = &c[static_cast<size_t>(i) * n];
    for (int j = 0; j < n; ++j) result.mismatches += crow[j] != static_cast<float>(expected[j]);
    result.elements += static_cast<uint64_t>(n);
  }
  result.kernel_seconds = ms / 1000.0;
  result.gflops = result.kernel_seconds > 0 ? 2.0 * n * n * static_cast<double>(n) / result.kernel_seconds / 1e9 : 0;
  return result;
}

}  // namespace gpupool::gpu
