// The kernel timeline's report (src/bench/timeline_report.*): order, gaps and overlaps, the union
// of busy time, the window around a marker kernel and the CSV, on hand-made spans.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "bench/timeline_report.h"

using rs::bench::TimelineRow;
using rs::cuda::KernelSpan;

namespace {

// Spans in ns, deliberately out of start order.
std::vector<KernelSpan> sample() {
  return {
      {"gate_up", 5000, 9000},   // overlaps router's tail (PDL)
      {"norm", 1000, 2000},
      {"router", 2500, 6000},    // 0.5 us after norm
      {"down", 12000, 13000},    // 3 us after gate_up: a bubble
  };
}

}  // namespace

TEST_SUITE("unit.timeline") {
TEST_CASE("rows are in start order, relative to the first start, with gaps and overlaps") {
  const std::vector<TimelineRow> rows = rs::bench::timeline_rows(sample());
  REQUIRE(rows.size() == 4);
  CHECK(rows[0].kernel == "norm");
  CHECK(rows[1].kernel == "router");
  CHECK(rows[2].kernel == "gate_up");
  CHECK(rows[3].kernel == "down");
  CHECK(rows[0].start_us == doctest::Approx(0.0));
  CHECK(rows[0].gap_us == doctest::Approx(0.0));
  CHECK(rows[1].start_us == doctest::Approx(1.5));
  CHECK(rows[1].gap_us == doctest::Approx(0.5));
  CHECK(rows[2].gap_us == doctest::Approx(-1.0));  // started 1 us before the router ended
  CHECK(rows[2].dur_us == doctest::Approx(4.0));
  CHECK(rows[3].gap_us == doctest::Approx(3.0));
  CHECK(rows[3].end_us == doctest::Approx(12.0));
}

TEST_CASE("totals: busy time is the union of the spans, idle the rest") {
  const auto t = rs::bench::timeline_totals(rs::bench::timeline_rows(sample()));
  CHECK(t.kernels == 4);
  CHECK(t.span_us == doctest::Approx(12.0));
  // norm 1 + router..gate_up 2.5..9 = 6.5 + down 1 = 8.5 us busy
  CHECK(t.busy_us == doctest::Approx(8.5));
  CHECK(t.idle_us == doctest::Approx(3.5));
  CHECK(t.sum_us == doctest::Approx(1.0 + 3.5 + 4.0 + 1.0));
  // A span inside another adds nothing to the busy time.
  const auto nested = rs::bench::timeline_totals(rs::bench::timeline_rows({{"a", 0, 10000}, {"b", 2000, 3000}}));
  CHECK(nested.busy_us == doctest::Approx(10.0));
  CHECK(nested.idle_us == doctest::Approx(0.0));
  CHECK(rs::bench::timeline_totals({}).kernels == 0);
}

TEST_CASE("window around the n-th marker kernel, clipped to the timeline") {
  std::vector<KernelSpan> spans;
  for (int i = 0; i < 10; ++i) spans.push_back({i % 3 == 0 ? "moe_router_fused_kernel" : "other", uint64_t(i) * 1000, uint64_t(i) * 1000 + 500});
  const auto rows = rs::bench::timeline_rows(spans);  // routers at rows 0, 3, 6, 9
  const auto w = rs::bench::timeline_window(rows, "router", 1, 2, 1);
  REQUIRE(w.size() == 4);
  CHECK(w[0].start_us == doctest::Approx(1.0));
  CHECK(w[2].kernel == "moe_router_fused_kernel");
  CHECK(w[3].start_us == doctest::Approx(4.0));
  CHECK(rs::bench::timeline_window(rows, "router", 0, 5, 0).size() == 1);   // clipped at the start
  CHECK(rs::bench::timeline_window(rows, "router", 3, 0, 5).size() == 1);   // and at the end
  CHECK(rs::bench::timeline_window(rows, "router", 4, 1, 1).empty());       // no fifth router
  CHECK(rs::bench::timeline_window(rows, "absent", 0, 1, 1).empty());
}

TEST_CASE("advance: how far each kernel moved the step's end, adding up to the span") {
  const auto adv = rs::bench::timeline_advance(rs::bench::timeline_rows(sample()));
  // norm ends at 1, router at 5 (+4), gate_up at 8 (+3), down at 12 after a bubble (+4).
  REQUIRE(adv.size() == 4);
  CHECK(adv[0].total_us == doctest::Approx(4.0));  // largest total first: down and router
  CHECK(adv[1].total_us == doctest::Approx(4.0));
  CHECK(adv[2].kernel == "gate_up");
  CHECK(adv[2].total_us == doctest::Approx(3.0));
  CHECK(adv[3].kernel == "norm");
  double sum = 0;
  for (const auto& a : adv) sum += a.total_us;
  CHECK(sum == doctest::Approx(12.0));
  // A kernel that ends inside an earlier one moves nothing; medians are per kernel name.
  const auto nested = rs::bench::timeline_advance(rs::bench::timeline_rows(
      {{"a", 0, 10000}, {"b", 2000, 3000}, {"b", 9000, 11000}, {"b", 11000, 16000}}));
  REQUIRE(nested.size() == 2);
  CHECK(nested[0].kernel == "a");
  CHECK(nested[0].total_us == doctest::Approx(10.0));
  CHECK(nested[1].count == 3);
  CHECK(nested[1].total_us == doctest::Approx(6.0));   // 0 + 1 + 5
  CHECK(nested[1].median_us == doctest::Approx(1.0));
  CHECK(rs::bench::timeline_advance({}).empty());
}

TEST_CASE("CSV: header, one line per kernel, quotes doubled") {
  const std::string csv = rs::bench::timeline_csv(rs::bench::timeline_rows({{"k<\"x\">", 0, 1500}, {"b", 2000, 2500}}));
  CHECK(csv == "index,kernel,start_us,end_us,dur_us,gap_us\n"
               "0,\"k<\"\"x\"\">\",0.000,1.500,1.500,0.000\n"
               "1,\"b\",2.000,2.500,0.500,0.500\n");
}
}
