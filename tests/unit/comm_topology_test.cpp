// unit.comm: rank placement, trays and write order; NCCL loading errors. No GPU needed.
#include <doctest/doctest.h>

#include "common/error.h"
#include "parallel/nccl_loader.h"
#include "parallel/topology.h"

using rs::Error;
using rs::parallel::Topology;

TEST_SUITE("unit.comm") {

TEST_CASE("topology: one rank per GPU when there are enough GPUs") {
  const Topology t = Topology::make(8, 2, 8);
  CHECK(t.size() == 8);
  CHECK(t.ranks_per_tray() == 4);
  CHECK(t.tray_of(3) == 0);
  CHECK(t.tray_of(4) == 1);
  CHECK(t.device_of(5) == 5);
  CHECK_FALSE(t.ranks_share_devices());
  // Remote tray first, each group rotated to start after the rank; itself last.
  CHECK(t.write_order(1) == std::vector<int>{4, 5, 6, 7, 2, 3, 0, 1});
  CHECK(t.write_order(6) == std::vector<int>{0, 1, 2, 3, 7, 4, 5, 6});
}

TEST_CASE("topology: logical ranks share GPUs in consecutive blocks") {
  const Topology t = Topology::make(8, 2, 2);
  CHECK(t.ranks_per_device() == 4);
  CHECK(t.device_of(3) == 0);
  CHECK(t.device_of(4) == 1);
  CHECK(t.devices() == std::vector<int>{0, 1});
  CHECK(t.describe() == "tp=8 trays=2 ranks->gpus [0,0,0,0,1,1,1,1]");
  const Topology two = Topology::make(2, 2, 2);  // two simulated trays of one GPU
  CHECK(two.tray_of(1) == 1);
  CHECK(two.write_order(0) == std::vector<int>{1, 0});
}

TEST_CASE("topology: bad shapes are rejected with the value named") {
  CHECK_THROWS_WITH_AS(Topology::make(0, 1, 2), doctest::Contains("--tp 0"), Error);
  CHECK_THROWS_WITH_AS(Topology::make(17, 1, 2), doctest::Contains("--tp 17"), Error);
  CHECK_THROWS_WITH_AS(Topology::make(8, 3, 8), doctest::Contains("--trays 3"), Error);
  CHECK_THROWS_WITH_AS(Topology::make(3, 1, 2), doctest::Contains("share GPUs evenly"), Error);
  CHECK_THROWS_WITH_AS(Topology::make(2, 1, 0), doctest::Contains("no CUDA device"), Error);
}

TEST_CASE("nccl loader: a missing library is a message naming the path and the fix") {
  CHECK_THROWS_WITH_AS(rs::parallel::NcclLibrary::load("/nonexistent/libnccl.so.2"),
                       doctest::Contains("/nonexistent/libnccl.so.2"), Error);
  CHECK_THROWS_WITH_AS(rs::parallel::NcclLibrary::load("/nonexistent/libnccl.so.2"),
                       doctest::Contains("RS_NCCL_LIBRARY"), Error);
}

}  // TEST_SUITE
