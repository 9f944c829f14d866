#include "parallel/topology.h"

#include <set>

#include "common/error.h"
#include "kernels/comm/comm_layout.h"

namespace rs::parallel {

Topology Topology::make(int tp, int trays, int num_devices) {
  if (tp < 1 || tp > comm::kMaxRanks)
    throw Error("--tp " + std::to_string(tp) + ": tensor-parallel size must be 1.." +
                std::to_string(comm::kMaxRanks));
  if (trays < 1 || tp % trays != 0)
    throw Error("--trays " + std::to_string(trays) + ": must be >= 1 and divide --tp " +
                std::to_string(tp));
  if (num_devices < 1) throw Error("no CUDA device: a tensor-parallel group needs at least one GPU");
  Topology t;
  t.trays_ = trays;
  if (tp <= num_devices) {
    for (int r = 0; r < tp; ++r) t.device_of_rank_.push_back(r);
    t.num_devices_ = tp;
    t.ranks_per_device_ = 1;
  } else {
    if (tp % num_devices != 0)
      throw Error("--tp " + std::to_string(tp) + " on " + std::to_string(num_devices) +
                  " GPUs: logical ranks must share GPUs evenly (tp a multiple of the GPU count)");
    t.ranks_per_device_ = tp / num_devices;
    for (int r = 0; r < tp; ++r) t.device_of_rank_.push_back(r / t.ranks_per_device_);
    t.num_devices_ = num_devices;
  }
  return t;
}

std::vector<int> Topology::devices() const {
  std::set<int> s(device_of_rank_.begin(), device_of_rank_.end());
  return {s.begin(), s.end()};
}

std::vector<int> Topology::write_order(int rank) const {
  std::vector<int> order;
  const int n = size();
  for (int i = 1; i < n; ++i) {
    const int peer = (rank + i) % n;
    if (tray_of(peer) != tray_of(rank)) order.push_back(peer);
  }
  for (int i = 1; i < n; ++i) {
    const int peer = (rank + i) % n;
    if (tray_of(peer) == tray_of(rank)) order.push_back(peer);
  }
  order.push_back(rank);
  return order;
}

std::string Topology::describe() const {
  std::string s = "tp=" + std::to_string(size()) + " trays=" + std::to_string(trays_) +
                  " ranks->gpus [";
  for (int r = 0; r < size(); ++r) s += (r ? "," : "") + std::to_string(device_of_rank_[r]);
  return s + "]";
}

}  // namespace rs::parallel
