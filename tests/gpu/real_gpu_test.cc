// The GPU paths on a real NVIDIA GPU: NCCL through TaskContext (the ranks' communicator and the
// gang lease's), the per-lease memory budget on real allocations, scrubbing between teams, and a
// preempted task's device state resumed bit-identical. Every test skips, saying why, where CUDA
// sees no GPU (the build machines); scripts/gpu-check.sh runs them on a lent GPU machine.
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gpupool/gpupool.h"
#include "gtest/gtest.h"
#include "pool/devices/nvidia_driver.h"
#include "runtime/gpu/nccl_communicator.h"
#include "tests/runtime/training_state.h"

namespace {

using ::testing::HasSubstr;

// Why no test here can run, or "" when a GPU is there.
std::string NoGpu() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) return absl::StrCat("no CUDA device: ", cudaGetErrorString(e));
  if (n == 0) return "no CUDA device";
  return "";
}
#define SKIP_WITHOUT_GPU()                       \
  do {                                           \
    if (std::string why = NoGpu(); !why.empty()) \
      GTEST_SKIP() << why;                       \
  } while (0)

void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}
std::vector<float> Download(const gpupool::DeviceBuffer& b) {
  std::vector<float> v(b.size() / sizeof(float));
  Check(cudaMemcpy(v.data(), b.data(), b.size(), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
  return v;
}
void Upload(gpupool::DeviceBuffer& b, const std::vector<float>& v) {
  Check(cudaMemcpy(b.data(), v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  // From pageable memory cudaMemcpy may return before the DMA is done; the collectives run on
  // other (non-blocking) streams.
  Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}
bool IsDeviceMemory(const void* p) {
  cudaPointerAttributes a{};
  return cudaPointerGetAttributes(&a, p) == cudaSuccess && a.type == cudaMemoryTypeDevice;
}

// 1M floats i*0.5 on the task's GPU; one rank: AllReduce sum and max leave them as they are (a
// communicator of one), and the values went through NCCL (NCCL_DEBUG=INFO shows its init).
std::string RankAllReduce(gpupool::TaskContext& ctx, int n) {
  gpupool::DeviceBuffer b = ctx.Allocate(n * sizeof(float));
  if (!IsDeviceMemory(b.data())) return "not device memory";
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = 0.5f * i;
  Upload(b, v);
  ctx.AllReduce<float>(b);
  ctx.AllReduce<float>(b, gpupool::ReduceOp::kMax);
  ctx.Broadcast(0, b);
  return Download(b) == v ? "same" : "changed";
}

// One buffer per slot of a gang lease, reduced across the lease's GPUs.
std::string SlotsAllReduce(gpupool::TaskContext& ctx, int n) {
  std::vector<gpupool::DeviceBuffer> bufs;
  std::vector<float> expect(n, 0.0f);
  for (size_t s = 0; s < ctx.slots().size(); ++s) {
    bufs.push_back(ctx.Allocate(n * sizeof(float), s));
    std::vector<float> v(n);
    for (int i = 0; i < n; ++i) v[i] = float(i % 97) + float(s);
    for (int i = 0; i < n; ++i) expect[i] += v[i];
    Upload(bufs.back(), v);
  }
  ctx.AllReduceAcrossSlots<float>(bufs);
  for (const gpupool::DeviceBuffer& b : bufs) {
    if (Download(b) != expect) return "wrong";
  }
  return absl::StrCat("ok over ", bufs.size(), " GPUs");
}

// Allocations under the budget are real device memory; one past it fails in this task only.
std::string OverBudget(gpupool::TaskContext& ctx) {
  const uint64_t budget = ctx.memory_budget_bytes();
  gpupool::DeviceBuffer half = ctx.Allocate(budget / 2);
  if (!IsDeviceMemory(half.data())) return "not device memory";
  try {
    gpupool::DeviceBuffer more = ctx.Allocate(budget / 2 + (64u << 20));
    return "over budget was allowed";
  } catch (const gpupool::Error& e) {
    return absl::StrCat(static_cast<int>(e.code()), ":", e.what());
  }
}

// Writes 0xAB over a block and frees it; another team's task reads the next block of that size.
uint64_t Dirty(gpupool::TaskContext& ctx, uint64_t bytes) {
  gpupool::DeviceBuffer b = ctx.Allocate(bytes);
  Check(cudaMemset(b.data(), 0xAB, bytes), "cudaMemset");
  Check(cudaDeviceSynchronize(), "sync");
  return reinterpret_cast<uintptr_t>(b.data());
}
std::string ReadFresh(gpupool::TaskContext& ctx, uint64_t bytes) {
  gpupool::DeviceBuffer b = ctx.Allocate(bytes);
  std::vector<unsigned char> host(bytes);
  Check(cudaMemcpy(host.data(), b.data(), bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
  uint64_t nonzero = 0;
  for (unsigned char c : host) nonzero += c != 0;
  return absl::StrCat(reinterpret_cast<uintptr_t>(b.data()), ":", nonzero);
}

// Device-resident "training" state: each step reads it back, updates it, writes it (integer
// arithmetic, so a resumed run must end with exactly the bits of an uninterrupted one).
std::atomic<int64_t> progress{0};
using gpupool::testing::Checksum;  // tests/runtime/training_state.h
using gpupool::testing::Update;
struct DeviceTrainResult {
  uint64_t checksum = 0;
  int64_t resumed_from = -1;
};
DeviceTrainResult DeviceTrain(gpupool::TaskContext& ctx, int steps) {
  constexpr size_t kWords = 1 << 20;  // 8 MiB of device state
  gpupool::DeviceBuffer state = ctx.Allocate(kWords * sizeof(uint64_t));
  std::vector<uint64_t> host(kWords, 1);
  Check(cudaMemcpy(state.data(), host.data(), state.size(), cudaMemcpyHostToDevice), "init");
  int64_t first = ctx.Checkpointable({gpupool::StateRegion::Of(state)});
  DeviceTrainResult r;
  r.resumed_from = ctx.resumed() ? first : -1;
  for (int64_t s = first; s < steps; ++s) {
    Check(cudaMemcpy(host.data(), state.data(), state.size(), cudaMemcpyDeviceToHost), "step D2H");
    Update(host, s);
    Check(cudaMemcpy(state.data(), host.data(), state.size(), cudaMemcpyHostToDevice), "step H2D");
    progress.store(s + 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    ctx.Step();
  }
  Check(cudaMemcpy(host.data(), state.data(), state.size(), cudaMemcpyDeviceToHost), "final");
  r.checksum = Checksum(host);
  return r;
}
int Hold(gpupool::TaskContext& ctx, int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  ctx.Step();
  return ms;
}
std::string ModelOfMyGpu(gpupool::TaskContext& ctx) { return ctx.slots().at(0).model; }

GPUPOOL_REMOTE(RankAllReduce);
GPUPOOL_REMOTE(SlotsAllReduce);
GPUPOOL_REMOTE(OverBudget);
GPUPOOL_REMOTE(Dirty);
GPUPOOL_REMOTE(ReadFresh);
GPUPOOL_REMOTE(DeviceTrain);
GPUPOOL_REMOTE(Hold);
GPUPOOL_REMOTE(ModelOfMyGpu);

gpupool::Runtime RealPool(std::string config = "", double clock_speed = 1.0) {
  gpupool::RuntimeOptions o;
  o.driver = "nvidia";
  o.config_text = std::move(config);
  o.clock_speed = clock_speed;
  o.lease_linger_ms = 20;
  return gpupool::Init(o);
}

// The catalogue's name for this machine's GPU, as the real driver reports it.
std::string LocalModel() {
  gpupool::Runtime rt = RealPool();
  return *gpupool::Get(gpupool::Task(ModelOfMyGpu).Gpus(1).Submit(), std::chrono::seconds(60));
}

// Two teams on this machine's GPUs: `owner` is guaranteed them, `borrower` borrows them.
std::string TwoTeams(const std::string& model, int gpus) {
  return absl::StrCat("model_groups:\n  gpus: [", model, "]\n",
                      "priority_classes:\n"
                      "  - {name: training, value: 500, preemptible: true, grace_period_s: 120, checkpoint_interval_s: 600}\n"
                      "teams:\n"
                      "  - name: owner\n    quotas: [{gpus: gpus, nominal: ", gpus, "}]\n"
                      "  - name: borrower\n    quotas: [{gpus: gpus, nominal: 0, borrowing_limit: ", gpus, "}]\n");
}

int DeviceCount() {
  int n = 0;
  cudaGetDeviceCount(&n);
  return n;
}

// The NVIDIA driver on the real GPU: what it discovers, its health and telemetry readings, and
// whether NVML took the XID event registration. Printed for the comparison with nvidia-smi -q.
TEST(RealGpu, NvidiaDriverDiscoversAndReadsEveryGpu) {
  SKIP_WITHOUT_GPU();
  auto driver = gpupool::pool::NvidiaDriver::Open();
  ASSERT_TRUE(driver.ok()) << driver.status();
  std::printf("XID critical-error events: %s\n",
              (*driver)->xid_events_registered() ? "registered" : "not offered by this driver (counters only)");
  auto nodes = (*driver)->Discover();
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  ASSERT_EQ(nodes->size(), 1u);
  const gpupool::pool::DiscoveredNode& node = nodes->front();
  for (const auto& [k, v] : node.labels) std::printf("node label %s=%s\n", k.c_str(), v.c_str());
  EXPECT_EQ(static_cast<int>(node.gpus.size()), DeviceCount());
  for (const gpupool::pool::DiscoveredGpu& g : node.gpus) {
    std::printf("GPU %d: %s (catalogue %s) %s %llu MiB cc %d.%d SMs %d MIG %d bus %s NUMA %d NVLink peers %zu island %s\n",
                g.index, g.name.c_str(), g.model.empty() ? "-" : g.model.c_str(), g.uuid.c_str(),
                static_cast<unsigned long long>(g.memory_mib), g.compute_capability_major, g.compute_capability_minor,
                g.sm_count, static_cast<int>(g.mig_mode), g.pci_bus_id.c_str(), g.numa_node, g.nvlink_peers.size(),
                g.nvlink_island.c_str());
    EXPECT_FALSE(g.model.empty()) << g.name << " is not in the catalogue";
    EXPECT_GT(g.memory_mib, 0u);
    EXPECT_GT(g.sm_count, 0);
    cudaDeviceProp p{};
    ASSERT_EQ(cudaGetDeviceProperties(&p, g.index), cudaSuccess);  // CUDA_DEVICE_ORDER=PCI_BUS_ID
    EXPECT_EQ(g.sm_count, p.multiProcessorCount);
    EXPECT_EQ(g.compute_capability_major, p.major);
    gpupool::pool::GpuRef ref{node.name, g.index};
    auto health = (*driver)->ReadHealth(ref);
    ASSERT_TRUE(health.ok()) << health.status();
    std::printf("  health: reachable %d ecc %lld/%lld retired %lld remapped %lld/%lld pending %d failed %d xids %zu "
                "throttle 0x%llx temp %d recovery %d\n",
                health->reachable, static_cast<long long>(health->ecc_correctable),
                static_cast<long long>(health->ecc_uncorrectable), static_cast<long long>(health->retired_pages),
                static_cast<long long>(health->remapped_rows_correctable),
                static_cast<long long>(health->remapped_rows_uncorrectable), health->remap_pending, health->remap_failed,
                health->xids.size(), static_cast<unsigned long long>(health->throttle_reasons), health->temperature_c,
                health->recovery_action);
    EXPECT_TRUE(health->reachable);
    auto t = (*driver)->ReadTelemetry(ref);
    ASSERT_TRUE(t.ok()) << t.status();
    std::printf("  telemetry: util %d%% fb used %lld free %lld MiB temp %d C power %.1f W last xid %d\n",
                t->utilization_percent, static_cast<long long>(t->fb_used_mib), static_cast<long long>(t->fb_free_mib),
                t->temperature_c, t->power_watts, t->last_xid);
    EXPECT_GT(t->fb_free_mib, 0);
    EXPECT_GT(t->power_watts, 0);
  }
}

TEST(RealGpu, NcclCommunicatorsRunOnEveryDevice) {
  SKIP_WITHOUT_GPU();
  absl::StatusOr<std::string> version = gpupool::runtime::NcclCommunicator::Version();
  ASSERT_TRUE(version.ok()) << version.status();
  std::vector<int> devices;
  for (int d = 0; d < DeviceCount(); ++d) devices.push_back(d);
  auto comm = gpupool::runtime::NcclCommunicator::OverDevices(devices);
  ASSERT_TRUE(comm.ok()) << comm.status();
  // A repeated device is refused before NCCL sees it.
  auto twice = gpupool::runtime::NcclCommunicator::OverDevices({0, 0});
  EXPECT_EQ(twice.status().code(), absl::StatusCode::kInvalidArgument);
  std::printf("NCCL %s over %zu GPU(s)\n", version->c_str(), devices.size());
}

// A rank that never joins: the nonblocking init of a communicator of two ranks whose second never
// comes is given up at its deadline, or when its stop callback says so (a revocation), and the
// communicator is aborted (not left waiting in NCCL's bootstrap). A misuse NCCL detects (a send to
// this rank with no receive) fails with NCCL's reason and breaks the communicator. The GPU stays
// usable for a new one throughout.
TEST(RealGpu, AGivenUpOrFailedOperationAbortsTheCommunicatorAndTheGpuStaysUsable) {
  SKIP_WITHOUT_GPU();
  using gpupool::runtime::NcclBuffer;
  using gpupool::runtime::NcclCommunicator;
  using gpupool::runtime::NcclWait;
  void* dev = nullptr;
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dev, 1 << 20), cudaSuccess);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  auto id = [] {
    absl::StatusOr<std::string> id = NcclCommunicator::UniqueId();
    EXPECT_TRUE(id.ok()) << id.status();
    return *id;
  };
  // Rank 1 never joins: the deadline.
  absl::Time t0 = absl::Now();
  auto alone = NcclCommunicator::OverRanks(id(), 2, 0, 0, NcclWait{t0 + absl::Milliseconds(500), nullptr});
  EXPECT_EQ(alone.status().code(), absl::StatusCode::kDeadlineExceeded) << alone.status();
  EXPECT_LT(absl::Now() - t0, absl::Seconds(20));
  std::printf("init without rank 1, deadline: %.0f ms: %s\n", absl::ToDoubleMilliseconds(absl::Now() - t0),
              std::string(alone.status().message()).c_str());
  // Rank 1 never joins: the stop callback.
  t0 = absl::Now();
  alone = NcclCommunicator::OverRanks(id(), 2, 0, 0, NcclWait{t0 + absl::Seconds(60), [&] {
                                        return absl::Now() - t0 > absl::Milliseconds(300);
                                      }});
  EXPECT_EQ(alone.status().code(), absl::StatusCode::kAborted) << alone.status();
  EXPECT_LT(absl::Now() - t0, absl::Seconds(20));
  // A misuse NCCL detects: its reason, and the communicator is broken from then on.
  auto comm = NcclCommunicator::OverRanks(id(), 1, 0, 0, NcclWait{absl::Now() + absl::Seconds(60), nullptr});
  ASSERT_TRUE(comm.ok()) << comm.status();
  absl::Status s = (*comm)->Send(NcclBuffer{dev, stream}, 1 << 20, /*peer=*/0, NcclWait{absl::Now() + absl::Seconds(60), nullptr});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;  // NCCL's "invalid usage"
  EXPECT_THAT(s.message(), HasSubstr("NCCL send of 1048576 bytes to rank 0"));
  EXPECT_TRUE((*comm)->broken());
  absl::Status later = (*comm)->AllReduce({NcclBuffer{dev, stream}}, 16, 0, gpupool::ReduceOp::kSum, NcclWait{});
  EXPECT_THAT(later.message(), HasSubstr("broken"));
  // The GPU and a new communicator still work.
  comm = NcclCommunicator::OverRanks(id(), 1, 0, 0, NcclWait{absl::Now() + absl::Seconds(60), nullptr});
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_TRUE((*comm)->AllReduce({NcclBuffer{dev, stream}}, 1 << 18, 0, gpupool::ReduceOp::kSum,
                                 NcclWait{absl::Now() + absl::Seconds(30), nullptr}).ok());
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaStreamDestroy(stream);
  cudaFree(dev);
}

TEST(RealGpu, RankAllReduceOfADeviceBufferRunsOnNccl) {
  SKIP_WITHOUT_GPU();
  gpupool::Runtime rt = RealPool();
  EXPECT_EQ(*gpupool::Get(gpupool::Task(RankAllReduce).Gpus(1).Submit(1 << 20), std::chrono::seconds(120)), "same");
}

TEST(RealGpu, GangLeaseReducesAcrossItsGpus) {
  SKIP_WITHOUT_GPU();
  gpupool::Runtime rt = RealPool();
  const int n = DeviceCount();
  EXPECT_EQ(*gpupool::Get(gpupool::Task(SlotsAllReduce).Gpus(n).Submit(1 << 20), std::chrono::seconds(120)),
            absl::StrCat("ok over ", n, " GPUs"));
}

TEST(RealGpu, LeaseBudgetIsEnforcedOnRealAllocations) {
  SKIP_WITHOUT_GPU();
  gpupool::Runtime rt = RealPool();
  // A fraction with a 2 GiB budget: 1 GiB is real device memory, 1 GiB + 64 MiB more is refused.
  std::string r = *gpupool::Get(gpupool::Task(OverBudget).Gpus(0.25).GpuMemoryMib(2048).Submit(),
                                std::chrono::seconds(120));
  EXPECT_THAT(r, HasSubstr(absl::StrCat(static_cast<int>(gpupool::ErrorCode::kResourceExhausted), ":")));
  EXPECT_THAT(r, HasSubstr("2048"));  // the message names the budget
}

TEST(RealGpu, DeviceMemoryIsScrubbedBetweenTeams) {
  SKIP_WITHOUT_GPU();
  const std::string model = LocalModel();
  gpupool::Runtime rt = RealPool(TwoTeams(model, DeviceCount()));
  const uint64_t bytes = 64ull << 20;
  uint64_t dirty = *gpupool::Get(gpupool::Task(Dirty).Gpus(1).Team("owner").Submit(bytes), std::chrono::seconds(60));
  std::string fresh = *gpupool::Get(gpupool::Task(ReadFresh).Gpus(1).Team("borrower").Submit(bytes),
                                    std::chrono::seconds(60));
  // The same block came back (the pool reuses it), with no byte of the owner's left in it.
  EXPECT_EQ(fresh, absl::StrCat(dirty, ":0"));
  EXPECT_GE(rt.Stats().scrubbed_bytes, bytes);
}

TEST(RealGpu, PreemptedDeviceStateResumesBitIdentical) {
  SKIP_WITHOUT_GPU();
  const std::string model = LocalModel();
  std::vector<uint64_t> expect(1 << 20, 1);
  for (int64_t s = 0; s < 400; ++s) Update(expect, s);
  gpupool::Runtime rt = RealPool(TwoTeams(model, DeviceCount()), /*clock_speed=*/100);
  progress = 0;
  auto training = gpupool::Task(DeviceTrain).Gpus(1).Team("borrower").PriorityClass("training").Submit(400);
  for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
       progress.load() < 100 && std::chrono::steady_clock::now() < until;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_GE(progress.load(), 100);
  // The owner wants every GPU: the borrower's lease is revoked, its task snapshots its device
  // state at the next safe point, and resumes from it.
  std::vector<gpupool::ObjectRef<int>> owners;
  for (int g = 0; g < DeviceCount(); ++g) owners.push_back(gpupool::Task(Hold).Gpus(1).Team("owner").Submit(200));
  for (auto& o : owners) EXPECT_EQ(*gpupool::Get(o, std::chrono::seconds(60)), 200);
  DeviceTrainResult r = *gpupool::Get(training, std::chrono::seconds(120));
  EXPECT_GE(r.resumed_from, 100) << "it resumed from the snapshot taken at the revocation";
  EXPECT_EQ(r.checksum, Checksum(expect)) << "the resumed device state must end bit-identical";
}

}  // namespace
