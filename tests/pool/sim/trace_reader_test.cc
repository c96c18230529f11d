// The openb reader: columns by name, optional columns, and malformed input reported as
// FILE:LINE:COLUMN with what is wrong.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "gtest/gtest.h"
#include "pool/sim/trace_reader.h"

namespace gpupool::pool::sim {
namespace {

class TraceReaderTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& text) {
    std::filesystem::create_directories(dir_);
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  const std::filesystem::path dir_ = std::filesystem::temp_directory_path() /
                                     ("pool_sim_test_" + std::to_string(::getpid()));
};

std::string MessageOf(const absl::Status& s) { return std::string(s.message()); }

TEST_F(TraceReaderTest, ReadsNodes) {
  const std::string path = Write("nodes.csv",
                                 "sn,cpu_milli,memory_mib,gpu,model\r\n"
                                 "n-0,64000,262144,2,P100\r\n"
                                 "n-1,96000,393216,8,G2\r\n"
                                 "cpu-0,32000,65536,0,\r\n\r\n");
  auto nodes = ReadNodeList(path);
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  ASSERT_EQ(nodes->size(), 3u);
  EXPECT_EQ((*nodes)[1].name, "n-1");
  EXPECT_EQ((*nodes)[1].cpu_milli, 96000);
  EXPECT_EQ((*nodes)[1].memory_mib, 393216);
  EXPECT_EQ((*nodes)[1].num_gpu, 8);
  EXPECT_EQ((*nodes)[1].model, "G2");
  EXPECT_EQ((*nodes)[2].num_gpu, 0);
}

TEST_F(TraceReaderTest, ReadsPodsWithAndWithoutTheOptionalColumns) {
  const std::string full = Write(
      "pods.csv",
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
      "deletion_time,scheduled_time\n"
      "p-0,12000,16384,1,1000,,LS,Running,0,12537496,0\n"
      "p-1,6000,12288,1,460,V100M16|V100M32|V100M32,LS,Pending,427061,,\n"
      "p-2,8000,30517,0,0,,BE,Running,1,2,1\n");
  auto pods = ReadPodList(full);
  ASSERT_TRUE(pods.ok()) << pods.status();
  ASSERT_EQ(pods->size(), 3u);
  EXPECT_EQ((*pods)[1].gpu_milli, 460);
  EXPECT_EQ((*pods)[1].gpu_spec, "V100M16|V100M32|V100M32");
  EXPECT_EQ((*pods)[1].creation_time, 427061);
  EXPECT_FALSE((*pods)[1].scheduled_time.has_value());
  EXPECT_EQ((*pods)[0].gpu_demand_milli(), 1000);

  const std::string minimal = Write("multigpu.csv",
                                    "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
                                    "p-0,88000,327680,8,1000\n");
  pods = ReadPodList(minimal);
  ASSERT_TRUE(pods.ok()) << pods.status();
  EXPECT_EQ((*pods)[0].gpu_demand_milli(), 8000);
  EXPECT_EQ((*pods)[0].gpu_spec, "");
}

TEST_F(TraceReaderTest, ModelsAreOpaqueAndSpecsRepeatable) {
  const std::string path = Write("q.csv",
                                 "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
                                 "p,1,1,1,500,\"Weird Model,9|G2\"\n");
  auto pods = ReadPodList(path);
  ASSERT_TRUE(pods.ok()) << pods.status();
  EXPECT_EQ((*pods)[0].gpu_spec, "Weird Model,9|G2");
}

TEST_F(TraceReaderTest, ReportsANonNumberWithFileLineAndColumn) {
  const std::string path = Write("bad-cpu.csv",
                                 "sn,cpu_milli,memory_mib,gpu,model\n"
                                 "n-0,64000,262144,2,P100\n"
                                 "n-1,96x00,393216,8,G2\n");
  auto nodes = ReadNodeList(path);
  ASSERT_FALSE(nodes.ok());
  EXPECT_EQ(MessageOf(nodes.status()),
            path + ":3:7: cpu_milli must be a non-negative integer, got '96x00'");
}

TEST_F(TraceReaderTest, ReportsAMissingFieldAtTheEndOfTheLine) {
  const std::string path = Write("short.csv",
                                 "sn,cpu_milli,memory_mib,gpu,model\n"
                                 "n-0,64000,262144\n");
  auto nodes = ReadNodeList(path);
  ASSERT_FALSE(nodes.ok());
  EXPECT_EQ(MessageOf(nodes.status()).rfind(path + ":2:17: missing field 'gpu'", 0), 0u)
      << nodes.status();
}

TEST_F(TraceReaderTest, ReportsOutOfRangeAndInconsistentGpuRequests) {
  const std::string header = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n";
  auto too_much = ReadPodList(Write("a.csv", header + "p,1000,1,1,1500\n"));
  ASSERT_FALSE(too_much.ok());
  EXPECT_NE(MessageOf(too_much.status()).find(":2:12: gpu_milli is 1500, more than the maximum 1000"),
            std::string::npos)
      << too_much.status();
  auto zero_share = ReadPodList(Write("b.csv", header + "p,1000,1,2,0\n"));
  ASSERT_FALSE(zero_share.ok());
  EXPECT_NE(MessageOf(zero_share.status()).find(":2:12: gpu_milli must be 1..1000"), std::string::npos)
      << zero_share.status();
  auto negative = ReadPodList(Write("c.csv", header + "p,-5,1,0,0\n"));
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(MessageOf(negative.status()).find(":2:3: cpu_milli must be a non-negative integer"),
            std::string::npos)
      << negative.status();
}

TEST_F(TraceReaderTest, ReportsHeaderAndStructureProblems) {
  auto no_model = ReadNodeList(Write("h.csv", "sn,cpu_milli,memory_mib,gpu\nn,1,1,1\n"));
  ASSERT_FALSE(no_model.ok());
  EXPECT_NE(MessageOf(no_model.status()).find(":1:1: missing column 'model'"), std::string::npos);

  auto dup = ReadNodeList(Write("d.csv", "sn,cpu_milli,memory_mib,gpu,model\nn,1,1,1,G2\nn,1,1,1,G2\n"));
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(MessageOf(dup.status()).find(":3:1: duplicate node name 'n' (first on line 2)"),
            std::string::npos);

  auto quote = ReadPodList(Write("q.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
                                          "p,1,1,1,500,\"G2\n"));
  ASSERT_FALSE(quote.ok());
  EXPECT_NE(MessageOf(quote.status()).find(":2:13: unterminated quote"), std::string::npos);

  auto empty = ReadPodList(Write("e.csv", ""));
  ASSERT_FALSE(empty.ok());

  auto missing = ReadPodList("/nonexistent/pods.csv");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(MessageOf(missing.status()).find("/nonexistent/pods.csv: cannot open"), std::string::npos);
}

}  // namespace
}  // namespace gpupool::pool::sim
