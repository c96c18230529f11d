// Tests of the NVIDIA driver that hold on a machine without an NVIDIA driver: how Open() fails,
// and the pure helpers it is built from (NVML error mapping, PCI bus ids, sysfs NUMA lookup,
// NVLink islands). What needs a GPU (Discover, ReadHealth, MIG) is not exercised here.
#include "pool/devices/nvidia_driver.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "pool/devices/nvml_api.h"
#include "pool/devices/nvml_library.h"

namespace gpupool::pool {
namespace {

using nvidia_internal::AssignNvLinkIslands;
using nvidia_internal::CanonicalPciBusId;
using nvidia_internal::NvmlLibraryPath;
using nvidia_internal::NvmlResultToStatus;
using nvidia_internal::OnlyNumaNode;
using nvidia_internal::ReadSysfsNumaNode;

constexpr char kEnv[] = "GPUPOOL_NVML_LIBRARY";

// Sets (or, for nullptr, clears) an environment variable for one test and restores it after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_.has_value()) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

bool Contains(absl::string_view text, absl::string_view part) {
  return absl::StrContains(text, part);
}

// ---- Open(). ----

TEST(NvidiaDriverOpen, MissingLibraryIsUnavailableAndNamesThePath) {
  NvidiaDriverOptions options;
  options.nvml_library = "/nonexistent/gpupool-test/libnvidia-ml.so.1";
  absl::StatusOr<std::unique_ptr<NvidiaDriver>> driver = NvidiaDriver::Open(options);
  ASSERT_FALSE(driver.ok());
  EXPECT_EQ(driver.status().code(), absl::StatusCode::kUnavailable) << driver.status();
  EXPECT_TRUE(Contains(driver.status().message(), "NVIDIA driver not found")) << driver.status();
  EXPECT_TRUE(Contains(driver.status().message(), options.nvml_library)) << driver.status();
}

TEST(NvidiaDriverOpen, DefaultLibraryAbsentHereIsUnavailable) {
  ScopedEnv no_override(kEnv, nullptr);
  if (NvidiaDriver::DriverPresent()) {
    GTEST_SKIP() << "libnvidia-ml.so.1 is installed on this machine; this test checks the "
                    "failure on machines without an NVIDIA driver";
  }
  absl::StatusOr<std::unique_ptr<NvidiaDriver>> driver = NvidiaDriver::Open();
  ASSERT_FALSE(driver.ok());
  EXPECT_EQ(driver.status().code(), absl::StatusCode::kUnavailable) << driver.status();
  EXPECT_TRUE(Contains(driver.status().message(), "libnvidia-ml.so.1")) << driver.status();
}

TEST(NvidiaDriverOpen, EnvironmentVariableChoosesTheLibrary) {
  ScopedEnv override(kEnv, "/nonexistent/gpupool-test/env-nvml.so");
  absl::StatusOr<std::unique_ptr<NvidiaDriver>> driver = NvidiaDriver::Open();
  ASSERT_FALSE(driver.ok());
  EXPECT_EQ(driver.status().code(), absl::StatusCode::kUnavailable) << driver.status();
  EXPECT_TRUE(Contains(driver.status().message(), "/nonexistent/gpupool-test/env-nvml.so"))
      << driver.status();
  EXPECT_FALSE(NvidiaDriver::DriverPresent());
}

TEST(NvidiaDriverOpen, LibraryPathPrefersOptionThenEnvironmentThenDefault) {
  {
    ScopedEnv no_override(kEnv, nullptr);
    EXPECT_EQ(NvmlLibraryPath(""), "libnvidia-ml.so.1");
  }
  {
    ScopedEnv empty_override(kEnv, "");
    EXPECT_EQ(NvmlLibraryPath(""), "libnvidia-ml.so.1");
  }
  ScopedEnv override(kEnv, "/opt/nvidia/libnvidia-ml.so.1");
  EXPECT_EQ(NvmlLibraryPath(""), "/opt/nvidia/libnvidia-ml.so.1");
  EXPECT_EQ(NvmlLibraryPath("/custom/libnvidia-ml.so"), "/custom/libnvidia-ml.so");
}

TEST(NvidiaDriverOpen, LibraryWithoutNvmlSymbolsIsUnavailable) {
  // The C library loads, but is not NVML: the driver must refuse it, not crash calling into it.
  NvidiaDriverOptions options;
  options.nvml_library = "libc.so.6";
  absl::StatusOr<std::unique_ptr<NvidiaDriver>> driver = NvidiaDriver::Open(options);
  ASSERT_FALSE(driver.ok());
  EXPECT_EQ(driver.status().code(), absl::StatusCode::kUnavailable) << driver.status();
  EXPECT_TRUE(Contains(driver.status().message(), "lacks nvmlInit_v2")) << driver.status();
}

// ---- NVML results as Status. ----

TEST(NvmlResultToStatus, SuccessIsOk) {
  EXPECT_TRUE(NvmlResultToStatus(nvml::NVML_SUCCESS, "nvmlDeviceGetName", "Success").ok());
}

TEST(NvmlResultToStatus, CodesFollowWhatTheCallerShouldDo) {
  struct Case {
    int result;
    absl::StatusCode code;
  };
  const Case cases[] = {
      {nvml::NVML_ERROR_NO_PERMISSION, absl::StatusCode::kPermissionDenied},
      {nvml::NVML_ERROR_NOT_FOUND, absl::StatusCode::kNotFound},
      {nvml::NVML_ERROR_INSUFFICIENT_RESOURCES, absl::StatusCode::kFailedPrecondition},
      {nvml::NVML_ERROR_IN_USE, absl::StatusCode::kFailedPrecondition},
      {nvml::NVML_ERROR_NOT_SUPPORTED, absl::StatusCode::kFailedPrecondition},
      {nvml::NVML_ERROR_RESET_REQUIRED, absl::StatusCode::kFailedPrecondition},
      {nvml::NVML_ERROR_INVALID_ARGUMENT, absl::StatusCode::kInvalidArgument},
      {nvml::NVML_ERROR_GPU_IS_LOST, absl::StatusCode::kUnavailable},
      {nvml::NVML_ERROR_DRIVER_NOT_LOADED, absl::StatusCode::kUnavailable},
      {nvml::NVML_ERROR_UNINITIALIZED, absl::StatusCode::kUnavailable},
      {nvml::NVML_ERROR_LIB_RM_VERSION_MISMATCH, absl::StatusCode::kUnavailable},
      {nvml::NVML_ERROR_TIMEOUT, absl::StatusCode::kUnavailable},
      {nvml::NVML_ERROR_FUNCTION_NOT_FOUND, absl::StatusCode::kUnimplemented},
      {nvml::NVML_ERROR_MEMORY, absl::StatusCode::kInternal},
      {nvml::NVML_ERROR_UNKNOWN, absl::StatusCode::kInternal},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(NvmlResultToStatus(c.result, "call", "text").code(), c.code)
        << "NVML result " << c.result;
  }
}

TEST(NvmlResultToStatus, MessageNamesTheCallTheTextAndTheCode) {
  absl::Status status = NvmlResultToStatus(nvml::NVML_ERROR_INSUFFICIENT_RESOURCES,
                                           "nvmlDeviceCreateGpuInstance on GPU node-0/1",
                                           "Insufficient Resources");
  EXPECT_EQ(status.message(),
            "nvmlDeviceCreateGpuInstance on GPU node-0/1: Insufficient Resources (NVML error 23)");
}

TEST(NvmlResultToStatus, MissingErrorTextStillGivesAMessage) {
  absl::Status status = NvmlResultToStatus(nvml::NVML_ERROR_UNKNOWN, "nvmlInit_v2", "");
  EXPECT_TRUE(Contains(status.message(), "nvmlInit_v2: unknown NVML error (NVML error 999)"))
      << status;
}

// ---- PCI bus ids. ----

TEST(CanonicalPciBusId, NvmlEightDigitDomainBecomesTheKernelsForm) {
  EXPECT_EQ(CanonicalPciBusId("00000000:1B:00.0"), "0000:1b:00.0");
}

TEST(CanonicalPciBusId, CudaFourDigitDomainIsUnchangedButLowerCased) {
  EXPECT_EQ(CanonicalPciBusId("0000:1B:00.0"), "0000:1b:00.0");
  EXPECT_EQ(CanonicalPciBusId("0000:19:00.0"), "0000:19:00.0");
}

TEST(CanonicalPciBusId, WideDomainsKeepTheirSignificantDigits) {
  // VMD and some virtual machines use domains above 0xffff; the kernel prints those in full.
  EXPECT_EQ(CanonicalPciBusId("00010000:01:00.0"), "10000:01:00.0");
}

TEST(CanonicalPciBusId, TrailingPaddingAndOddInputs) {
  EXPECT_EQ(CanonicalPciBusId(std::string("00000000:3B:00.0\0\0", 18)), "0000:3b:00.0");
  EXPECT_EQ(CanonicalPciBusId("  00000000:3B:00.0 \n"), "0000:3b:00.0");
  EXPECT_EQ(CanonicalPciBusId("NoColon"), "nocolon");
  EXPECT_EQ(CanonicalPciBusId(""), "");
}

// ---- sysfs NUMA node. ----

class SysfsNumaNodeTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(testing::TempDir()) /
           ("nvidia_driver_test_" + std::to_string(getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void WriteNumaNode(const std::string& device, const std::string& contents) {
    std::filesystem::create_directories(dir_ / device);
    std::ofstream(dir_ / device / "numa_node") << contents;
  }
  std::string dir() const { return dir_.string(); }

  std::filesystem::path dir_;
};

TEST_F(SysfsNumaNodeTest, ReadsTheNodeOfTheDeviceNvmlNames) {
  WriteNumaNode("0000:1b:00.0", "1\n");
  EXPECT_EQ(ReadSysfsNumaNode("00000000:1B:00.0", dir()), 1);
}

TEST_F(SysfsNumaNodeTest, KernelsNoAffinityIsReturnedAsMinusOne) {
  WriteNumaNode("0000:1b:00.0", "-1\n");
  EXPECT_EQ(ReadSysfsNumaNode("00000000:1B:00.0", dir()), -1);
}

TEST_F(SysfsNumaNodeTest, MissingOrMalformedIsUnknown) {
  WriteNumaNode("0000:2c:00.0", "not a number\n");
  EXPECT_EQ(ReadSysfsNumaNode("00000000:1B:00.0", dir()), std::nullopt);
  EXPECT_EQ(ReadSysfsNumaNode("00000000:2C:00.0", dir()), std::nullopt);
  EXPECT_EQ(ReadSysfsNumaNode("", dir()), std::nullopt);
}

TEST_F(SysfsNumaNodeTest, AHostOfOneNodeHasEveryDeviceOnIt) {
  auto online = [this](const std::string& text) {
    std::ofstream(dir_ / "online") << text;
    return OnlyNumaNode(dir());
  };
  EXPECT_EQ(online("0\n"), 0);
  EXPECT_EQ(online("1\n"), 1);
  EXPECT_EQ(online("0-1\n"), std::nullopt);  // two nodes: the device's own answer is needed
  EXPECT_EQ(online("0,2\n"), std::nullopt);
  EXPECT_EQ(online(""), std::nullopt);
  EXPECT_EQ(OnlyNumaNode(dir() + "/absent"), std::nullopt);
}

TEST_F(SysfsNumaNodeTest, BusIdCannotLeaveTheDirectory) {
  // Were the id used as given, <dir>/sub/../0000:1b:00.0/numa_node would resolve to a real file.
  WriteNumaNode("0000:1b:00.0", "3\n");
  std::filesystem::create_directories(dir_ / "sub");
  EXPECT_EQ(ReadSysfsNumaNode("../0000:1b:00.0", dir() + "/sub"), std::nullopt);
  EXPECT_EQ(ReadSysfsNumaNode("0000:1b:00.0", dir()), 3);
}

// ---- NVLink islands. ----

DiscoveredGpu Gpu(int index, std::string bus_id, std::vector<NvLinkPeer> peers = {}) {
  DiscoveredGpu gpu;
  gpu.index = index;
  gpu.pci_bus_id = std::move(bus_id);
  gpu.nvlink_peers = std::move(peers);
  return gpu;
}

TEST(AssignNvLinkIslands, GpusWithoutNvLinkAreTheirOwnIsland) {
  std::vector<DiscoveredGpu> gpus = {Gpu(0, "00000000:19:00.0"), Gpu(1, "00000000:3B:00.0")};
  AssignNvLinkIslands(gpus);
  EXPECT_EQ(gpus[0].nvlink_island, "gpu0");
  EXPECT_EQ(gpus[1].nvlink_island, "gpu1");
}

TEST(AssignNvLinkIslands, BridgedPairsFormSeparateIslands) {
  // Two PCIe cards bridged pairwise (0-1, 2-3); peers spelled as NVML and as CUDA would.
  std::vector<DiscoveredGpu> gpus = {
      Gpu(0, "00000000:19:00.0", {{"00000000:3B:00.0", 4}}),
      Gpu(1, "00000000:3B:00.0", {{"0000:19:00.0", 4}}),
      Gpu(2, "00000000:5D:00.0", {{"00000000:9A:00.0", 4}}),
      Gpu(3, "00000000:9A:00.0", {{"00000000:5d:00.0", 4}}),
      Gpu(4, "00000000:BB:00.0"),
  };
  AssignNvLinkIslands(gpus);
  EXPECT_EQ(gpus[0].nvlink_island, "nvl0");
  EXPECT_EQ(gpus[1].nvlink_island, "nvl0");
  EXPECT_EQ(gpus[2].nvlink_island, "nvl1");
  EXPECT_EQ(gpus[3].nvlink_island, "nvl1");
  EXPECT_EQ(gpus[4].nvlink_island, "gpu4");
}

TEST(AssignNvLinkIslands, GpusSharingNvSwitchesFormOneIsland) {
  // On an HGX board each link's remote end is an NVSwitch, not the peer GPU; GPUs reaching a
  // common switch reach each other.
  const std::string switch_a = "00000000:05:00.0";
  const std::string switch_b = "00000000:06:00.0";
  std::vector<DiscoveredGpu> gpus = {
      Gpu(0, "00000000:18:00.0", {{switch_a, 9}}),
      Gpu(1, "00000000:2A:00.0", {{switch_a, 5}, {switch_b, 4}}),
      Gpu(2, "00000000:3A:00.0", {{switch_b, 9}}),
  };
  AssignNvLinkIslands(gpus);
  EXPECT_EQ(gpus[0].nvlink_island, "nvl0");
  EXPECT_EQ(gpus[1].nvlink_island, "nvl0");
  EXPECT_EQ(gpus[2].nvlink_island, "nvl0");
}

TEST(AssignNvLinkIslands, ConnectionIsTransitiveAndEitherEndCounts) {
  // A chain 0-1-2, each link reported by one end only (GPU 2's own link query found nothing):
  // all three share one island.
  std::vector<DiscoveredGpu> gpus = {
      Gpu(0, "00000000:01:00.0", {{"00000000:02:00.0", 2}}),
      Gpu(1, "00000000:02:00.0", {{"00000000:03:00.0", 2}}),
      Gpu(2, "00000000:03:00.0"),
  };
  AssignNvLinkIslands(gpus);
  EXPECT_EQ(gpus[0].nvlink_island, "nvl0");
  EXPECT_EQ(gpus[1].nvlink_island, "nvl0");
  EXPECT_EQ(gpus[2].nvlink_island, "nvl0");
}

TEST(AssignNvLinkIslands, GpuWithUnknownBusIdIsStillPlaced) {
  std::vector<DiscoveredGpu> gpus = {Gpu(0, ""), Gpu(1, "", {{"00000000:05:00.0", 1}})};
  AssignNvLinkIslands(gpus);
  EXPECT_EQ(gpus[0].nvlink_island, "gpu0");
  EXPECT_EQ(gpus[1].nvlink_island, "nvl0");
}

}  // namespace
}  // namespace gpupool::pool
