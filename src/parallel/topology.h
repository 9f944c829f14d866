#pragma once
// Where the tensor-parallel ranks live: N ranks, grouped into T trays of consecutive ranks
// (a tray is a set of GPUs on one NVLink board; the production shape is N = 8, T = 2), placed
// on the GPUs this process sees. With fewer GPUs than ranks, consecutive ranks share a GPU as
// separate logical ranks (own workspace, own host thread, own stream): this is how N = 4 or 8
// runs on a 2-GPU machine.
#include <string>
#include <vector>

namespace rs::parallel {

class Topology {
 public:
  // Throws rs::Error naming the bad value: tp outside 1..16, trays not dividing tp, no GPU,
  // or tp not a multiple of the GPU count when ranks must share GPUs.
  static Topology make(int tp, int trays, int num_devices);

  int size() const { return static_cast<int>(device_of_rank_.size()); }
  int trays() const { return trays_; }
  int ranks_per_tray() const { return size() / trays_; }
  int tray_of(int rank) const { return rank / ranks_per_tray(); }
  int device_of(int rank) const { return device_of_rank_.at(rank); }
  int num_devices() const { return num_devices_; }   // distinct GPUs in use
  int ranks_per_device() const { return ranks_per_device_; }
  bool ranks_share_devices() const { return ranks_per_device_ > 1; }
  std::vector<int> devices() const;                   // distinct GPUs in use, ascending

  // The order in which `rank` stores into its peers (itself included, last): ranks in other
  // trays first (their stores take the longer path, so they start earliest), each group
  // rotated to begin after `rank` so that the ranks do not all hit the same peer at once.
  std::vector<int> write_order(int rank) const;

  std::string describe() const;  // "tp=4 trays=2 ranks->gpus [0,0,1,1]"

 private:
  int trays_ = 1;
  int num_devices_ = 0;
  int ranks_per_device_ = 1;
  std::vector<int> device_of_rank_;
};

}  // namespace rs::parallel
