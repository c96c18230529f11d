// An object's lineage travels with refs between ranks; a reader that decodes it may run the task
// again, so a round trip keeps every field and malformed bytes are refused, never trusted.
#include "runtime/objects/lineage.h"

#include <string>

#include "gmock/gmock.h"
#include "gpupool/error.h"
#include "gtest/gtest.h"

namespace gpupool::runtime {
namespace {

Lineage Sample() {
  Lineage l;
  l.function = "Train";
  l.args = std::string("\0\1binary\xff", 9);
  l.options.Gpus(0.5).GpuMemoryMib(4096).Models({"H100-80GB", "A100-80GB"}).Label("zone", "a")
      .AvoidLabel("node", "n3").HardwareIsolation().Team("vision").Project("p").WorkloadClass("training")
      .PriorityClass("experiment").MaxRetries(5).Name("step");
  l.checkpoint_key = "job-host-42.task-7";
  return l;
}

TEST(Lineage, RoundTripKeepsEveryField) {
  Lineage in = Sample();
  Lineage out = DecodeLineage(EncodeLineage(in));
  EXPECT_EQ(out.function, in.function);
  EXPECT_EQ(out.args, in.args);
  const TaskOptions& a = in.options;
  const TaskOptions& b = out.options;
  EXPECT_EQ(b.gpus, a.gpus);
  EXPECT_EQ(b.gpu_memory_mib, a.gpu_memory_mib);
  EXPECT_EQ(b.models, a.models);
  EXPECT_EQ(b.labels, a.labels);
  EXPECT_EQ(b.avoid_labels, a.avoid_labels);
  EXPECT_EQ(b.hardware_isolation, a.hardware_isolation);
  EXPECT_EQ(b.team, a.team);
  EXPECT_EQ(b.project, a.project);
  EXPECT_EQ(b.workload_class, a.workload_class);
  EXPECT_EQ(b.priority_class, a.priority_class);
  EXPECT_EQ(b.max_retries, a.max_retries);
  EXPECT_EQ(b.name, a.name);
  EXPECT_EQ(out.checkpoint_key, in.checkpoint_key);
}

TEST(Lineage, MalformedBytesAreRefused) {
  std::string good = EncodeLineage(Sample());
  for (size_t cut = 0; cut < good.size(); ++cut) {
    try {
      DecodeLineage(std::string_view(good).substr(0, cut));
      ADD_FAILURE() << "a lineage cut to " << cut << " bytes was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
    }
  }
  std::string other_version = good;
  other_version[0] = 9;
  EXPECT_THROW(DecodeLineage(other_version), Error);
  try {
    DecodeLineage(good + "x");
    ADD_FAILURE() << "trailing bytes were accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("trailing bytes"));
  }
}

}  // namespace
}  // namespace gpupool::runtime
