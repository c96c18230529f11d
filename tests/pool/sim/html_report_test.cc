#include "pool/sim/html_report.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace gpupool::pool::sim {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(LineChartTest, SeriesBecomePolylinesInPlotCoordinates) {
  LineChart chart{.title = "t", .x_label = "x", .y_label = "y", .x_max = 100, .y_max = 100};
  chart.series.push_back({"a", {{0, 0}, {50, 25}, {100, 100}}});
  chart.series.push_back({"b", {{0, 10}}});
  const std::string svg = LineChartSvg(chart);
  // The plot area spans x 64..560 and y 384 (bottom) ..44 (top).
  EXPECT_THAT(svg, HasSubstr("points=\"64.0,384.0 312.0,299.0 560.0,44.0\""));
  EXPECT_THAT(svg, HasSubstr("points=\"64.0,350.0\""));
  EXPECT_THAT(svg, HasSubstr("<title>a</title>"));
  EXPECT_THAT(svg, HasSubstr("<title>b</title>"));
  EXPECT_THAT(svg, Not(HasSubstr("stroke-dasharray")));  // no diagonal asked for
}

TEST(LineChartTest, PointsOutsideTheAxesAreClippedAndNonFiniteOnesSkipped) {
  LineChart chart{.x_max = 100, .y_max = 100};
  chart.series.push_back({"a", {{200, -5}, {std::nan(""), 3}}});
  EXPECT_THAT(LineChartSvg(chart), HasSubstr("points=\"560.0,384.0\""));
}

TEST(LineChartTest, TheDiagonalIsDashedAndNamed) {
  LineChart chart{.x_max = 130, .y_max = 100, .diagonal = "every arrival placed"};
  const std::string svg = LineChartSvg(chart);
  EXPECT_THAT(svg, HasSubstr("stroke-dasharray"));
  EXPECT_THAT(svg, HasSubstr("every arrival placed"));
}

TEST(LineChartTest, TextIsEscaped) {
  LineChart chart{.title = "<b>&"};
  chart.series.push_back({"\"x\" <y>", {}});
  const std::string svg = LineChartSvg(chart);
  EXPECT_THAT(svg, HasSubstr("&lt;b&gt;&amp;"));
  EXPECT_THAT(svg, HasSubstr("&quot;x&quot; &lt;y&gt;"));
  EXPECT_THAT(svg, Not(HasSubstr("<b>")));
  const std::string page = HtmlPage("a<b", "<p>body</p>");
  EXPECT_THAT(page, HasSubstr("<!DOCTYPE html>"));
  EXPECT_THAT(page, HasSubstr("<title>a&lt;b</title>"));
  EXPECT_THAT(page, HasSubstr("<p>body</p>"));
}

}  // namespace
}  // namespace gpupool::pool::sim
