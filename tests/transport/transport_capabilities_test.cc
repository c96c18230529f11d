#include "transport/transport_capabilities.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace gpupool::transport {
namespace {

// Real UCX, NCCL, MPI and CUDA runtime libraries, queried on this machine.
TEST(TransportCapabilities, UcxStartsAndMovesHostMemory) {
  absl::StatusOr<UcxCapabilities> ucx = QueryUcx();
  ASSERT_TRUE(ucx.ok()) << ucx.status();
  EXPECT_THAT(ucx->version, ::testing::MatchesRegex("[0-9]+\\.[0-9]+\\.[0-9]+"));
  EXPECT_THAT(ucx->memory_types, ::testing::Contains("host"));
}

TEST(TransportCapabilities, ReportsNcclMpiAndCuda) {
  absl::StatusOr<TransportCapabilities> caps = QueryTransportCapabilities();
  ASSERT_TRUE(caps.ok()) << caps.status();
  EXPECT_THAT(caps->nccl_version, ::testing::MatchesRegex("2\\.[0-9]+\\.[0-9]+"));
  EXPECT_GE(caps->mpi_version_major, 3);
  EXPECT_FALSE(caps->mpi_library.empty());
  EXPECT_THAT(caps->cuda_runtime_version, ::testing::MatchesRegex("1[0-9]\\.[0-9]+"));
  // Either devices were found, or the reason they were not is given.
  EXPECT_TRUE(caps->cuda_devices > 0 || !caps->cuda_status.empty());
}

}  // namespace
}  // namespace gpupool::transport
