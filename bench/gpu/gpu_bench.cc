// bench/run gpu: the runtime's GPU paths on a real GPU, each beside its baseline measured in the
// same run (a ratio), never against a figure from elsewhere:
//   allreduce   TaskContext::AllReduce<float>(DeviceBuffer) against ncclAllReduce called directly
//               on the same buffer and stream, 1 MiB .. 1 GiB (time and algorithm bandwidth;
//               with one GPU this is the runtime's overhead on NCCL's call path)
//   staging     device <-> host: pageable cudaMemcpy, pinned cudaMemcpyAsync (the baseline), and
//               the runtime's staging path (PinnedHostBuffer + CopyDeviceToHost/HostToDevice,
//               what checkpoints of device state use)
//   alloc       GpuMemoryPool::Allocate+Free against cudaMallocAsync+cudaFreeAsync (p50, p99)
//   scrub       zeroing a block handed to another team (GB/s) against cudaMemset
//   diagnostic  the health diagnostic (known-answer matmul + memory pattern test): duration,
//               FLOP rate and bytes tested per second, beside the device's nominal figures
// Without a GPU it prints "gpu: unavailable (<reason>)" and exits 0.
//   gpu_bench [--json] [--max-mib=1024] [--skip-diagnostic]
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gpupool/gpupool.h"
#include "runtime/agent/cuda_diagnostic.h"
#include "runtime/gpu/device_copy.h"
#include "runtime/gpu/device_memory_test.h"
#include "runtime/gpu/known_answer_matmul.h"
#include "runtime/gpu/memory_pool.h"

namespace {

bool g_json = false;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }
double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}
void Die(const std::string& what) {
  std::fprintf(stderr, "gpu_bench: %s\n", what.c_str());
  std::exit(1);
}
// Throw (not exit): inside a task the runtime's threads are live, and the error reaches main.
void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}
void CheckNccl(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw std::runtime_error(absl::StrCat(what, ": ", ncclGetErrorString(r)));
}

// One figure beside its baseline; `higher_better` says which way the ratio reads.
void Row(const std::string& metric, double value, const std::string& unit, const std::string& baseline_name,
         double baseline) {
  double ratio = baseline > 0 ? value / baseline : 0;
  if (g_json) {
    std::printf("{\"bench\": \"gpu\", \"metric\": \"%s\", \"value\": %.6g, \"unit\": \"%s\", \"baseline\": \"%s\", "
                "\"baseline_value\": %.6g, \"ratio\": %.4f}\n",
                metric.c_str(), value, unit.c_str(), baseline_name.c_str(), baseline, ratio);
  } else {
    std::printf("  %-40s %12.4g %-8s  %-30s %12.4g  ratio %.3f\n", metric.c_str(), value, unit.c_str(),
                baseline_name.c_str(), baseline, ratio);
  }
  std::fflush(stdout);
}
void Heading(const std::string& h) {
  if (!g_json) std::printf("\n%s\n", h.c_str());
}

std::vector<uint64_t> Sizes(uint64_t max_mib) {
  std::vector<uint64_t> s;
  for (uint64_t mib = 1; mib <= max_mib; mib *= 4) s.push_back(mib << 20);
  if (s.back() != (max_mib << 20)) s.push_back(max_mib << 20);
  return s;
}
int Reps(uint64_t bytes) { return bytes <= (16u << 20) ? 50 : bytes <= (256u << 20) ? 20 : 8; }

// --- allreduce: in a task of the embedded pool on the real GPU -------------------------------
// Returns, per size: median seconds direct, median seconds through TaskContext (interleaved).
std::vector<double> AllReduceTimes(gpupool::TaskContext& ctx, std::vector<uint64_t> sizes) {
  const int device = ctx.cuda_device();
  if (device < 0) throw gpupool::Error(gpupool::ErrorCode::kFailedPrecondition, "the task is not on a real GPU");
  ncclComm_t direct;
  CheckNccl(ncclCommInitAll(&direct, 1, &device), "ncclCommInitAll (baseline)");
  cudaStream_t stream = static_cast<cudaStream_t>(ctx.stream());
  std::vector<double> out;
  for (uint64_t bytes : sizes) {
    gpupool::DeviceBuffer b = ctx.Allocate(bytes);
    Check(cudaMemsetAsync(b.data(), 0, bytes, stream), "memset");
    const size_t count = bytes / sizeof(float);
    std::vector<double> d, r;
    for (int i = 0; i < Reps(bytes) + 3; ++i) {
      auto t0 = Clock::now();
      CheckNccl(ncclAllReduce(b.data(), b.data(), count, ncclFloat32, ncclSum, direct, stream), "ncclAllReduce");
      Check(cudaStreamSynchronize(stream), "sync");
      auto t1 = Clock::now();
      ctx.AllReduce<float>(b);
      auto t2 = Clock::now();
      if (i >= 3) {  // warm-ups
        d.push_back(Seconds(t0, t1));
        r.push_back(Seconds(t1, t2));
      }
    }
    out.push_back(Percentile(d, 0.5));
    out.push_back(Percentile(r, 0.5));
  }
  ncclCommDestroy(direct);
  return out;
}
GPUPOOL_REMOTE(AllReduceTimes);

void BenchAllReduce(uint64_t max_mib) {
  Heading("allreduce (float sum, in place; one rank): TaskContext::AllReduce vs ncclAllReduce on the same buffer");
  gpupool::RuntimeOptions o;
  o.driver = "nvidia";
  gpupool::Runtime rt = gpupool::Init(o);
  std::vector<uint64_t> sizes = Sizes(max_mib);
  std::vector<double> t = *gpupool::Get(gpupool::Task(AllReduceTimes).Gpus(1).Submit(sizes), std::chrono::minutes(10));
  for (size_t i = 0; i < sizes.size(); ++i) {
    const double mib = sizes[i] / double(1 << 20);
    const std::string tag = absl::StrCat("allreduce_", static_cast<uint64_t>(mib), "MiB");
    Row(tag + "_us", t[2 * i + 1] * 1e6, "us", "nccl_direct_us", t[2 * i] * 1e6);
    Row(tag + "_algbw_GBps", sizes[i] / t[2 * i + 1] / 1e9, "GB/s", "nccl_direct_algbw_GBps", sizes[i] / t[2 * i] / 1e9);
    // What TaskContext adds per call (agreement check, wait by polling so revocation can abort).
    Row(tag + "_overhead_us", (t[2 * i + 1] - t[2 * i]) * 1e6, "us", "nccl_direct_us", t[2 * i] * 1e6);
  }
  if (!g_json) {
    std::printf("  (one rank: NCCL's in-place allreduce moves no data, so these times are NCCL's call path and\n"
                "   the runtime's overhead on it, not a transfer; the algbw column only restates them)\n");
  }
}

// --- staging ---------------------------------------------------------------------------------
double TimeCopies(int reps, const std::function<void()>& copy) {
  copy();  // warm-up
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    auto t0 = Clock::now();
    copy();
    t.push_back(Seconds(t0, Clock::now()));
  }
  return Percentile(t, 0.5);
}

void BenchStaging(uint64_t max_mib) {
  Heading("staging device <-> host: runtime path (PinnedHostBuffer + Copy*) and pageable vs pinned cudaMemcpyAsync");
  Check(cudaSetDevice(0), "cudaSetDevice");
  cudaStream_t s;
  Check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  for (uint64_t bytes : Sizes(max_mib)) {
    void* dev = nullptr;
    Check(cudaMalloc(&dev, bytes), "cudaMalloc");
    Check(cudaMemset(dev, 1, bytes), "memset");
    void* pinned = nullptr;
    Check(cudaMallocHost(&pinned, bytes), "cudaMallocHost");
    std::vector<char> pageable(bytes, 0);
    gpupool::runtime::PinnedHostBuffer staging(bytes);
    const int reps = std::max(3, Reps(bytes) / 2);
    const std::string mib = absl::StrCat(bytes >> 20, "MiB");
    for (bool d2h : {true, false}) {
      const cudaMemcpyKind kind = d2h ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice;
      double base = TimeCopies(reps, [&] {
        Check(d2h ? cudaMemcpyAsync(pinned, dev, bytes, kind, s) : cudaMemcpyAsync(dev, pinned, bytes, kind, s), "pinned copy");
        Check(cudaStreamSynchronize(s), "sync");
      });
      double page = TimeCopies(reps, [&] {
        Check(d2h ? cudaMemcpyAsync(pageable.data(), dev, bytes, kind, s) : cudaMemcpyAsync(dev, pageable.data(), bytes, kind, s),
              "pageable copy");
        Check(cudaStreamSynchronize(s), "sync");
      });
      double ours = TimeCopies(reps, [&] {
        absl::Status st = d2h ? gpupool::runtime::CopyDeviceToHost(staging.data(), dev, bytes, 0)
                              : gpupool::runtime::CopyHostToDevice(dev, staging.data(), bytes, 0);
        if (!st.ok()) Die(std::string(st.message()));
      });
      const std::string dir = d2h ? "d2h" : "h2d";
      Row(absl::StrCat(dir, "_", mib, "_runtime_GBps"), bytes / ours / 1e9, "GB/s", "pinned_cudaMemcpyAsync_GBps", bytes / base / 1e9);
      Row(absl::StrCat(dir, "_", mib, "_pageable_GBps"), bytes / page / 1e9, "GB/s", "pinned_cudaMemcpyAsync_GBps", bytes / base / 1e9);
    }
    if (!staging.pinned()) std::printf("  (note: PinnedHostBuffer fell back to pageable memory at %s)\n", mib.c_str());
    Check(cudaFreeHost(pinned), "cudaFreeHost");
    Check(cudaFree(dev), "cudaFree");
  }
  cudaStreamDestroy(s);
}

// --- allocation and scrubbing ----------------------------------------------------------------
void BenchAlloc() {
  Heading("device memory pool: Allocate (cached after the first) vs cudaMallocAsync with and without a stream sync\n"
          "(the pool syncs a fresh block so any stream may use it); scrub between teams vs cudaMemset");
  size_t free_b = 0, total_b = 0;
  Check(cudaSetDevice(0), "cudaSetDevice");
  Check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  auto backend = gpupool::runtime::MakeCudaMemoryBackend(0);
  if (!backend.ok()) Die(std::string(backend.status().message()));
  gpupool::runtime::GpuMemoryPool pool("GPU 0", total_b, *std::move(backend));
  auto budget_a = std::make_shared<gpupool::runtime::MemoryBudget>();
  budget_a->team = "a";
  budget_a->limit_bytes = total_b;
  auto budget_b = std::make_shared<gpupool::runtime::MemoryBudget>();
  budget_b->team = "b";
  budget_b->limit_bytes = total_b;
  cudaStream_t s;
  Check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  for (uint64_t bytes : {uint64_t{1} << 20, uint64_t{64} << 20}) {
    const int reps = 2000;
    std::vector<double> ours, base, base_nosync;
    for (int i = 0; i < reps; ++i) {
      auto t0 = Clock::now();
      absl::StatusOr<gpupool::runtime::MemoryBlock*> b = pool.Allocate(budget_a, bytes);
      auto t1 = Clock::now();
      if (!b.ok()) Die(std::string(b.status().message()));
      pool.Free(*b);
      void* p = nullptr;
      auto t2 = Clock::now();
      Check(cudaMallocAsync(&p, bytes, s), "cudaMallocAsync");
      Check(cudaStreamSynchronize(s), "sync");  // as the pool's fresh allocation does: usable on any stream
      auto t3 = Clock::now();
      Check(cudaFreeAsync(p, s), "cudaFreeAsync");
      auto t4 = Clock::now();
      Check(cudaMallocAsync(&p, bytes, s), "cudaMallocAsync");  // usable on stream s only, at once
      auto t5 = Clock::now();
      Check(cudaFreeAsync(p, s), "cudaFreeAsync");
      Check(cudaStreamSynchronize(s), "sync");
      ours.push_back(Seconds(t0, t1));
      base.push_back(Seconds(t2, t3));
      base_nosync.push_back(Seconds(t4, t5));
    }
    const std::string mib = absl::StrCat(bytes >> 20, "MiB");
    Row(absl::StrCat("alloc_", mib, "_p50_us"), Percentile(ours, 0.5) * 1e6, "us", "cudaMallocAsync_p50_us", Percentile(base, 0.5) * 1e6);
    Row(absl::StrCat("alloc_", mib, "_p99_us"), Percentile(ours, 0.99) * 1e6, "us", "cudaMallocAsync_p99_us", Percentile(base, 0.99) * 1e6);
    Row(absl::StrCat("alloc_", mib, "_p50_us_vs_nosync"), Percentile(ours, 0.5) * 1e6, "us",
        "cudaMallocAsync_nosync_p50_us", Percentile(base_nosync, 0.5) * 1e6);
    Row(absl::StrCat("alloc_", mib, "_p99_us_vs_nosync"), Percentile(ours, 0.99) * 1e6, "us",
        "cudaMallocAsync_nosync_p99_us", Percentile(base_nosync, 0.99) * 1e6);
  }
  // Scrub: a block last held by team a, handed to team b, is zeroed first.
  for (uint64_t bytes : {uint64_t{64} << 20, uint64_t{1} << 30}) {
    std::vector<double> scrub, memset_t;
    for (int i = 0; i < 10; ++i) {
      auto a = pool.Allocate(budget_a, bytes);
      if (!a.ok()) Die(std::string(a.status().message()));
      pool.Free(*a);
      auto t0 = Clock::now();
      auto b = pool.Allocate(budget_b, bytes);  // other team: scrubbed
      auto t1 = Clock::now();
      if (!b.ok()) Die(std::string(b.status().message()));
      auto t2 = Clock::now();
      Check(cudaMemsetAsync((*b)->ptr, 0, bytes, s), "memset");
      Check(cudaStreamSynchronize(s), "sync");
      auto t3 = Clock::now();
      pool.Free(*b);
      scrub.push_back(Seconds(t0, t1));
      memset_t.push_back(Seconds(t2, t3));
    }
    Row(absl::StrCat("scrub_", bytes >> 20, "MiB_GBps"), bytes / Percentile(scrub, 0.5) / 1e9, "GB/s", "cudaMemset_GBps",
        bytes / Percentile(memset_t, 0.5) / 1e9);
  }
  cudaStreamDestroy(s);
}

// --- the diagnostic ---------------------------------------------------------------------------
struct Nominal {
  double tbps;       // memory bandwidth, TB/s
  double fp32_tflops;  // FP32, non-tensor
};
Nominal NominalFor(const std::string& name) {
  // NVIDIA's datasheets (SXM parts).
  if (name.find("H200") != std::string::npos) return {4.8, 67};
  if (name.find("H100") != std::string::npos) return {3.35, 67};
  if (name.find("A100") != std::string::npos) return {2.0, 19.5};
  return {0, 0};
}

void BenchDiagnostic() {
  Heading("diagnostic: known-answer matmul and memory pattern test (as the agent runs them) vs nominal");
  cudaDeviceProp p{};
  Check(cudaGetDeviceProperties(&p, 0), "cudaGetDeviceProperties");
  const Nominal nominal = NominalFor(p.name);
  std::printf("  device: %s\n", p.name);
  auto t0 = Clock::now();
  gpupool::runtime::CudaDiagnostic diagnostic;
  std::atomic<bool> stop{false};
  absl::Status s = diagnostic.Run(0, stop);
  const double whole = Seconds(t0, Clock::now());
  std::printf("  diagnostic outcome: %s\n", s.ok() ? "passed" : std::string(s.message()).c_str());
  Row("diagnostic_duration_s", whole, "s", "none", 0);
  auto tm = Clock::now();
  absl::StatusOr<gpupool::gpu::MatmulTestResult> m = gpupool::gpu::RunKnownAnswerMatmul(0, 2048);
  const double matmul_s = Seconds(tm, Clock::now());
  if (m.ok()) {
    Row("diagnostic_matmul_TFLOPs", m->gflops / 1e3, "TFLOP/s", "nominal_fp32_TFLOPs", nominal.fp32_tflops);
    Row("diagnostic_matmul_s", matmul_s, "s", "matmul_kernel_s", m->kernel_seconds);
    std::printf("  matmul: %llu of %llu checked elements wrong\n", static_cast<unsigned long long>(m->mismatches),
                static_cast<unsigned long long>(m->elements));
  }
  absl::StatusOr<size_t> free_b = gpupool::gpu::FreeDeviceMemory(0);
  if (free_b.ok()) {
    const size_t bytes = static_cast<size_t>(*free_b * 0.8);
    auto t1 = Clock::now();
    auto r = gpupool::gpu::RunDeviceMemoryPatternTest(0, bytes);
    const double secs = Seconds(t1, Clock::now());
    if (r.ok()) {
      Row("diagnostic_pattern_tested_TBps", bytes / secs / 1e12, "TB/s", "nominal_memory_TBps", nominal.tbps);
      Row("diagnostic_pattern_s", secs, "s", "none", 0);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t max_mib = 1024;
  bool diagnostic = true;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--json") g_json = true;
    else if (a.rfind("--max-mib=", 0) == 0) max_mib = std::max<uint64_t>(1, std::strtoull(a.c_str() + 10, nullptr, 10));
    else if (a == "--skip-diagnostic") diagnostic = false;
    else Die("unknown flag " + a + " (--json, --max-mib=N, --skip-diagnostic)");
  }
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    std::printf("gpu: unavailable (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "CUDA sees no GPU");
    return 0;
  }
  try {
    cudaDeviceProp p{};
    Check(cudaGetDeviceProperties(&p, 0), "cudaGetDeviceProperties");
    int nccl = 0;
    ncclGetVersion(&nccl);
    if (!g_json) std::printf("gpu: %s, %d GPU(s), NCCL %d\n", p.name, n, nccl);
    BenchAllReduce(max_mib);
    BenchStaging(max_mib);
    BenchAlloc();
    if (diagnostic) BenchDiagnostic();
  } catch (const std::exception& e) {
    Die(e.what());
  }
  return 0;
}
