#include "parallel/lamport_workspace.h"

#include <cuda_runtime.h>

#include "kernels/comm/comm_launch.h"
#include "parallel/cuda_check.h"

namespace rs::parallel {
namespace {

const LamportShape& validated(const LamportShape& shape) {
  if (shape.region_bytes == 0 || shape.region_bytes % comm::kVecBytes != 0)
    throw Error("comm workspace region of " + std::to_string(shape.region_bytes) +
                " bytes: must be a positive multiple of 16");
  if (shape.region_bytes / comm::kVecBytes > UINT32_MAX)
    throw Error("comm workspace region of " + std::to_string(shape.region_bytes) + " bytes is too large");
  if (shape.ctas < 1 || shape.ctas > comm::kMaxCtas)
    throw Error("comm workspace grid of " + std::to_string(shape.ctas) + " CTAs: must be 1.." +
                std::to_string(comm::kMaxCtas));
  return shape;
}

uint64_t buffers_bytes(const LamportShape& s) {
  return static_cast<uint64_t>(comm::kLamportBuffers) * s.regions * s.region_bytes;
}

}  // namespace

uint64_t LamportWorkspace::state_bytes() {
  return (sizeof(comm::LamportState) + 255) / 256 * 256;  // buffers start 256-byte aligned
}

LamportWorkspace::LamportWorkspace(const Topology& topo, comm::ElemType type, LamportShape shape,
                                   uint64_t timeout_ns)
    : type_(type), shape_(validated(shape)), mem_(topo, state_bytes() + buffers_bytes(shape)) {
  int current = 0;
  cuda_check(cudaGetDevice(&current), "cudaGetDevice");
  for (int r = 0; r < topo.size(); ++r) {
    cuda_check(cudaSetDevice(topo.device_of(r)), "cudaSetDevice");
    auto* base = static_cast<char*>(mem_.ptr(r));
    // State zeroed: every CTA starts at buffer 0, nothing dirty. Every buffer armed.
    cuda_check(cudaMemset(base, 0, state_bytes()), "cudaMemset of comm state");
    cuda_check(comm::launch_arm(reinterpret_cast<uint4*>(base + state_bytes()),
                                buffers_bytes(shape) / comm::kVecBytes, type, nullptr),
               "arming comm workspace of rank " + std::to_string(r));
    cuda_check(cudaDeviceSynchronize(), "arming comm workspace of rank " + std::to_string(r));
  }
  cuda_check(cudaSetDevice(current), "cudaSetDevice");
  for (int r = 0; r < topo.size(); ++r) views_.push_back(make_view(topo, r, timeout_ns));
}

comm::LamportView LamportWorkspace::make_view(const Topology& topo, int rank, uint64_t timeout_ns) const {
  comm::LamportView v{};
  for (int p = 0; p < topo.size(); ++p)
    v.buffers[p] = reinterpret_cast<uint4*>(static_cast<char*>(mem_.ptr(p)) + state_bytes());
  v.state = reinterpret_cast<comm::LamportState*>(mem_.ptr(rank));
  v.region_vecs = static_cast<uint32_t>(shape_.region_bytes / comm::kVecBytes);
  v.regions = shape_.regions;
  v.rank = rank;
  v.nranks = topo.size();
  const auto order = topo.write_order(rank);
  for (int i = 0; i < topo.size(); ++i) v.write_order[i] = order[i];
  v.timeout_ns = timeout_ns;
  return v;
}

}  // namespace rs::parallel
