#pragma once
// Symmetric peer memory for in-process ranks: one plain cudaMalloc of the same size per rank,
// and peer access enabled between every pair of GPUs in use, so a kernel on any rank's GPU can
// store into (and load from) any other rank's allocation through its ordinary device pointer
// (one process: unified addressing, no IPC handles needed). No multicast objects, ever.
#include <cstddef>
#include <vector>

#include "parallel/topology.h"

namespace rs::parallel {

// Enables peer access from every GPU in `devices` to every other one. Throws rs::Error naming
// the pair when the hardware cannot reach a peer (no NVLink/PCIe P2P path).
void enable_peer_access(const std::vector<int>& devices);

class SymmetricAllocation {
 public:
  SymmetricAllocation(const Topology& topo, size_t bytes_per_rank);
  ~SymmetricAllocation();
  SymmetricAllocation(const SymmetricAllocation&) = delete;
  SymmetricAllocation& operator=(const SymmetricAllocation&) = delete;

  void* ptr(int rank) const { return ptrs_.at(rank); }
  size_t bytes() const { return bytes_; }

 private:
  Topology topo_;
  size_t bytes_ = 0;
  std::vector<void*> ptrs_;
};

}  // namespace rs::parallel
