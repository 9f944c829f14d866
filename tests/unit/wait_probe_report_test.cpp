// The wait probe's report (src/bench/wait_probe_report.*): launches grouped by grid id in order of
// their first entry, named from the timeline by grid and block sizes, their release, late entry,
// spread and advance, and the summary by kernel, on hand-made records.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "bench/wait_probe_report.h"

using rs::bench::ProbeLaunch;
using rs::kern::WaitProbeRecord;

namespace {

WaitProbeRecord rec(uint64_t grid, uint64_t entry, uint64_t exit, uint32_t block, uint32_t blocks, uint32_t threads) {
  WaitProbeRecord r;
  r.grid = grid;
  r.entry_ns = entry;
  r.exit_ns = exit;
  r.block = block;
  r.blocks = blocks;
  r.threads = threads;
  return r;
}

// Three launches (grid ids out of order on purpose): A (2 blocks, resident early), B (2 blocks,
// one arriving 1 us after its release), A again.
std::vector<WaitProbeRecord> sample() {
  return {
      rec(7, 1000, 3000, 0, 2, 256), rec(7, 1200, 3100, 1, 2, 256),   // A: release 2.0 us
      rec(3, 2000, 5000, 0, 2, 544), rec(3, 6000, 6200, 1, 2, 544),   // B: release 4.0, late 1.0
      rec(9, 5500, 8000, 0, 2, 256), rec(9, 5600, 8500, 1, 2, 256),   // A: release 7.0
  };
}

}  // namespace

TEST_SUITE("unit.timeline") {
TEST_CASE("wait probe: launches in entry order with release, late entry, spread and advance") {
  const std::vector<rs::cuda::KernelSpan> spans = {
      {"a_kernel", 0, 1, 2, 256}, {"embed", 0, 1, 1, 64}, {"b_kernel", 0, 1, 2, 544}, {"a_kernel", 0, 1, 2, 256}};
  const std::vector<ProbeLaunch> l = rs::bench::probe_launches(sample(), spans);
  REQUIRE(l.size() == 3);
  CHECK(l[0].kernel == "a_kernel");
  CHECK(l[1].kernel == "b_kernel");  // the span without a wait (embed) is skipped
  CHECK(l[2].kernel == "a_kernel");
  CHECK(l[0].records == 2);
  CHECK(l[0].release_us == doctest::Approx(2.0));
  CHECK(l[0].late_us == doctest::Approx(-1.8));  // both blocks waited before the release
  CHECK(l[1].release_us == doctest::Approx(4.0));
  CHECK(l[1].late_us == doctest::Approx(5.0 - 4.0));
  CHECK(l[1].spread_us == doctest::Approx(5.2 - 4.0));
  CHECK(l[0].advance_us == doctest::Approx(2.0));
  CHECK(l[1].advance_us == doctest::Approx(3.0));
  CHECK(l[2].advance_us == doctest::Approx(0.0));  // the last has no next release

  const auto s = rs::bench::probe_summary(l);
  REQUIRE(s.size() == 2);
  CHECK(s[0].kernel == "b_kernel");  // 3.0 us of advance against a_kernel's 2.0 (the last launch has none)
  CHECK(s[0].advance_total_us == doctest::Approx(3.0));
  CHECK(s[1].kernel == "a_kernel");
  CHECK(s[1].count == 1);

  const std::string csv = rs::bench::probe_csv(l);
  CHECK(csv.find("index,kernel,blocks") == 0);
  CHECK(csv.find("1,\"b_kernel\",2,544,2,") != std::string::npos);
}

TEST_CASE("wait probe: marks after the wait, the last block's, from the release; unset slots ignored") {
  std::vector<WaitProbeRecord> r = sample();
  WaitProbeRecord m0 = rec(3, 0, 6500, 0, 2, 544), m1 = rec(3, 0, 7200, 1, 2, 544), unset;
  m0.tag = m1.tag = rs::kern::kProbeEnd;
  WaitProbeRecord in = rec(7, 0, 3500, 1, 2, 256);
  in.tag = rs::kern::kProbeInputReady;
  r.insert(r.begin(), {m0, unset, m1, in});
  const std::vector<ProbeLaunch> l = rs::bench::probe_launches(r, {});
  REQUIRE(l.size() == 3);
  CHECK(l[1].records == 2);  // marks are not blocks
  CHECK(l[1].mark_last_us[rs::kern::kProbeEnd] == doctest::Approx(6.2 - 4.0));  // times from the first entry (1 us)
  CHECK(l[1].mark_last_us[rs::kern::kProbeInputReady] < 0);
  CHECK(l[0].mark_last_us[rs::kern::kProbeInputReady] == doctest::Approx(0.5));
  const auto s = rs::bench::probe_summary(l);
  CHECK(s[0].mark_median_us[rs::kern::kProbeEnd] == doctest::Approx(2.2));
}

TEST_CASE("wait probe: without a timeline launches are named by their sizes") {
  const std::vector<ProbeLaunch> l = rs::bench::probe_launches(sample(), {});
  REQUIRE(l.size() == 3);
  CHECK(l[0].kernel == "2x256");
  CHECK(l[1].kernel == "2x544");
}
}

TEST_SUITE("unit.timeline") {
TEST_CASE("wait probe: every record as CSV, times from the earliest wait entry; unset slots left out") {
  std::vector<WaitProbeRecord> r = sample();
  r[1].smid = 17;
  WaitProbeRecord m = rec(3, 0, 6500, 1, 2, 544), unset;
  m.tag = rs::kern::kProbeMainDone;
  m.smid = 5;
  r.push_back(m);
  r.push_back(unset);
  const std::string csv = rs::bench::probe_records_csv(r);
  CHECK(csv.find("grid,block,smid,tag,entry_us,exit_us\n") == 0);
  CHECK(csv.find("7,1,17,0,0.200,2.100\n") != std::string::npos);  // entry 1.2 us, exit 3.1, from t0 = 1.0
  CHECK(csv.find("3,1,5,2,0.000,5.500\n") != std::string::npos);   // a mark: its time only
  size_t lines = 0;
  for (char c : csv) lines += c == '\n';
  CHECK(lines == 1 + 7);  // header, six waits, one mark
}
}

TEST_SUITE("unit.timeline") {
TEST_CASE("wait probe: with the SMs' L2 sides, each side's last wait exit and marks, from the release") {
  std::vector<WaitProbeRecord> r = sample();  // B (grid 3): blocks 0 and 1, exits 5.0 and 6.2 us
  r[2].smid = 4;                              // B block 0 on side 0
  r[3].smid = 9;                              // B block 1 on side 1
  WaitProbeRecord m0 = rec(3, 0, 6500, 0, 2, 544), m1 = rec(3, 0, 7400, 1, 2, 544);
  m0.tag = m1.tag = rs::kern::kProbeEnd;
  m0.smid = 4;
  m1.smid = 9;
  r.push_back(m0);
  r.push_back(m1);
  std::vector<uint8_t> side(16, 0);
  side[9] = 1;
  const std::vector<ProbeLaunch> l = rs::bench::probe_launches(r, {}, &side);
  REQUIRE(l.size() == 3);
  CHECK(l[1].side_last_us[0][0] == doctest::Approx(4.0 - 4.0));  // side 0's block out at the release
  CHECK(l[1].side_last_us[1][0] == doctest::Approx(5.2 - 4.0));
  CHECK(l[1].side_last_us[0][rs::kern::kProbeEnd] == doctest::Approx(5.5 - 4.0));
  CHECK(l[1].side_last_us[1][rs::kern::kProbeEnd] == doctest::Approx(6.4 - 4.0));
  CHECK(l[1].side_last_us[1][rs::kern::kProbeMainDone] < 0);  // no such mark
  CHECK(l[0].side_last_us[1][0] < 0);                          // A's blocks: SM 0, side 0 only
  const auto s = rs::bench::probe_summary(l);
  CHECK(s[0].kernel == "2x544");
  CHECK(s[0].side_median_us[1][rs::kern::kProbeEnd] == doctest::Approx(2.4));
  // Without sides, nothing per side.
  const std::vector<ProbeLaunch> plain = rs::bench::probe_launches(r, {});
  CHECK(plain[1].side_last_us[0][0] < 0);
}
}
