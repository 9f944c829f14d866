#include <doctest/doctest.h>

#include "bench/routing_carry_over.h"

TEST_CASE("routing_carry_over: the share of a step's first k experts a layer chose again in the next step") {
  using rs::bench::routing_carry_over;
  const std::vector<std::vector<int32_t>> prev = {{3, 7, 1}, {5, 2, 9}};
  const std::vector<std::vector<int32_t>> next = {{7, 3, 8}, {1, 2, 4}};
  CHECK(routing_carry_over(prev, next, 1) == doctest::Approx(0.5));        // 3 kept; 5 not
  CHECK(routing_carry_over(prev, next, 2) == doctest::Approx(3.0 / 4.0));  // 3, 7, 2 of 3, 7, 5, 2
  CHECK(routing_carry_over(prev, next, 3) == doctest::Approx(3.0 / 6.0));
  CHECK(routing_carry_over(prev, prev, 3) == doctest::Approx(1.0));
  CHECK(routing_carry_over({}, next, 2) == 0.0);
}
