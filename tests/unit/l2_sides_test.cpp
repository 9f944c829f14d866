// The L2 sides' classification (kernels/common/l2_sides.h) on made-up latency tables: sides from
// page 0, each page's home from the side means, and the refusals (no gap, one side, a page that
// neither side reaches faster).
#include <doctest/doctest.h>

#include <vector>

#include "kernels/common/l2_sides.h"

namespace {

// 8 SMs, 3 pages: SMs 0-3 side 0, 4-7 side 1 (SM 6 not seen); page 0 and 2 homed on side 0, page 1
// on side 1; near 260 cycles, far 520.
std::vector<float> table() {
  std::vector<float> lat(8 * 3);
  for (int sm = 0; sm < 8; ++sm)
    for (int p = 0; p < 3; ++p) {
      const bool side1 = sm >= 4, home1 = p == 1;
      lat[sm * 3 + p] = (side1 == home1 ? 260.f : 520.f) + float(sm);
    }
  for (int p = 0; p < 3; ++p) lat[6 * 3 + p] = -1.f;
  return lat;
}

}  // namespace

TEST_SUITE("unit.l2_sides") {
TEST_CASE("L2 sides: SM sides from page 0, page homes from the side means") {
  rs::kern::L2SideMap m;
  REQUIRE(rs::kern::classify_l2_sides(table(), 8, 3, 100.f, m));
  CHECK(m.sm_side == std::vector<int>{0, 0, 0, 0, 1, 1, -1, 1});
  CHECK(m.page_home == std::vector<int>{0, 1, 0});
}

TEST_CASE("L2 sides: refused without a gap, below min_gap, with an undecided page, or with a split-off outlier") {
  rs::kern::L2SideMap m;
  std::vector<float> flat(8 * 3, 300.f);
  CHECK_FALSE(rs::kern::classify_l2_sides(flat, 8, 3, 100.f, m));  // one L2 (no gap)
  std::vector<float> t = table();
  CHECK_FALSE(rs::kern::classify_l2_sides(t, 8, 3, 400.f, m));  // the gap is below min_gap
  t = table();
  for (int sm = 0; sm < 8; ++sm) t[sm * 3 + 2] = 400.f;  // page 2 equally far from both
  CHECK_FALSE(rs::kern::classify_l2_sides(t, 8, 3, 100.f, m));
  t = table();
  for (int sm = 4; sm < 8; ++sm) t[sm * 3] = -1.f;  // side 1 unseen on page 0, and one slow SM of
  t[0] = 900.f;  // side 0 split off as a "side" of its own: its pages are not reached faster from it
  CHECK_FALSE(rs::kern::classify_l2_sides(t, 8, 3, 100.f, m));
}
}
