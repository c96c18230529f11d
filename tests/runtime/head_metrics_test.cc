// /metrics rendering on its own (runtime/service/metrics/): label escaping, the per-team project
// cap, and the counters PoolMetrics keeps as leases open, are revoked and close.
#include "runtime/service/metrics/head_metrics.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/http/prometheus_text.h"

namespace gpupool::runtime {
namespace {

using ::testing::HasSubstr;

TEST(PrometheusText, LabelValuesAreEscaped) {
  EXPECT_EQ(EscapeLabelValue("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  PrometheusText out;
  out.Family("x_total", "counter", "a counter");
  out.Sample("x_total", {{"project", "p\"} 1\nx_total 9"}}, 2);
  EXPECT_EQ(out.Take(), "# HELP x_total a counter\n# TYPE x_total counter\nx_total{project=\"p\\\"} 1\\nx_total 9\"} 2\n");
}

pool::Lease LeaseOf(const std::string& id, const std::string& team, const std::string& project, int64_t milli) {
  pool::Lease l;
  l.id = id;
  l.request.id = id;
  l.request.team = team;
  l.request.project = project;
  l.request.workload_class = "training";
  l.milli = milli;
  return l;
}

TEST(PoolMetrics, ProjectsAreCappedPerTeamAtTheirTopByGpuSeconds) {
  PoolMetrics m;
  // 30 projects of one team: kept names are capped at record time, the scrape shows the top ones.
  for (int i = 0; i < 30; ++i) {
    std::string id = "r" + std::to_string(i);
    m.Granted(LeaseOf(id, "vision", "p" + std::to_string(i), 1000), "H100-80GB", 0);
    m.Closed(id, 1 + i, /*lost=*/false);  // project i used 1 + i GPU-seconds
  }
  m.Granted(LeaseOf("other-team", "nlp", "solo", 500), "L4", 0);
  PoolSnapshot s;
  s.counters = m.Take(10);
  std::string text = RenderHeadMetrics(s, Viewer::Operator());
  int vision_rows = 0;
  for (size_t at = 0; (at = text.find("gpupool_gpu_seconds_total{team=\"vision\"", at)) != std::string::npos; ++at) {
    ++vision_rows;
  }
  EXPECT_EQ(vision_rows, static_cast<int>(kTopProjects) + 1) << text;
  EXPECT_THAT(text, HasSubstr("project=\"p19\""));   // the largest kept name
  EXPECT_THAT(text, Not(HasSubstr("project=\"p20\"")));  // past the record-time cap: "other"
  EXPECT_THAT(text, Not(HasSubstr("project=\"p0\"")));   // kept, but not in the top: folded
  EXPECT_THAT(text, HasSubstr("project=\"other\""));
  EXPECT_THAT(text, HasSubstr("gpupool_gpu_seconds_total{team=\"nlp\",project=\"solo\",workload_class=\"training\",model=\"L4\"} 5"));
}

TEST(PoolMetrics, PreemptionsAndWorkLostSinceTheLastCheckpoint) {
  PoolMetrics m;
  m.Submitted("a", 0);
  m.Granted(LeaseOf("a", "vision", "x", 2000), "H100-80GB", 30);
  m.Checkpointed("a", 100);
  m.Revoked("a", pool::RevokeCause::kReclaim);
  m.Closed("a", 110, /*lost=*/false);  // released 10 s after its checkpoint: 2 GPUs x 10 s lost
  m.Granted(LeaseOf("b", "vision", "x", 1000), "H100-80GB", 0);
  m.Closed("b", 50, /*lost=*/false);  // released normally: nothing lost
  PoolMetrics::Counters c = m.Take(200);
  EXPECT_EQ((c.preemptions[{"vision", "reclaim"}]), 1u);
  EXPECT_DOUBLE_EQ(c.work_lost_gpu_seconds["vision"], 20);
  EXPECT_DOUBLE_EQ((c.gpu_seconds[{"vision", "x", "training", "H100-80GB"}]), 2 * 80 + 50);
  ASSERT_EQ(c.admission_wait.size(), 1u);
  EXPECT_EQ(c.admission_wait.begin()->second.count(), 1u);
  EXPECT_DOUBLE_EQ(c.admission_wait.begin()->second.sum(), 30);
}

}  // namespace
}  // namespace gpupool::runtime
