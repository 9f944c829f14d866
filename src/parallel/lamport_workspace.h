#pragma once
// A Lamport workspace: symmetric memory laid out as kernels/comm/comm_layout.h says, armed with
// the element type's -0.0 sentinel, plus the fixed launch grid its per-CTA state is sized for.
// One per (algorithm, element type): the sentinel differs between bf16 and fp32, so a buffer
// armed for one type cannot serve the other.
#include <cstdint>
#include <vector>

#include "kernels/comm/comm_layout.h"
#include "parallel/peer_memory.h"
#include "parallel/topology.h"

namespace rs::parallel {

struct LamportShape {
  uint32_t regions;        // regions per buffer (N for one-shot, 2N for two-shot)
  uint64_t region_bytes;   // capacity of one region (multiple of 16)
  int ctas;                // the fixed grid every kernel on this workspace is launched with
};

class LamportWorkspace {
 public:
  LamportWorkspace(const Topology& topo, comm::ElemType type, LamportShape shape,
                   uint64_t timeout_ns);

  // The kernel-side view of one rank, built once by the constructor: every launch passes one.
  const comm::LamportView& view(int rank) const { return views_.at(static_cast<size_t>(rank)); }
  comm::ElemType type() const { return type_; }
  int ctas() const { return shape_.ctas; }
  uint64_t region_bytes() const { return shape_.region_bytes; }
  uint64_t bytes_per_rank() const { return mem_.bytes(); }

 private:
  static uint64_t state_bytes();
  comm::LamportView make_view(const Topology& topo, int rank, uint64_t timeout_ns) const;
  comm::ElemType type_;
  LamportShape shape_;
  SymmetricAllocation mem_;
  std::vector<comm::LamportView> views_;  // [rank]
};

}  // namespace rs::parallel
