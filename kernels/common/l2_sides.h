#pragma once
// The two sides of a Hopper L2. An H100/H200 splits its L2 in two partitions, each wired to half
// of the SMs; a 4 KB page of memory is homed in one of them. An atomic (or the first read of a
// line another SM just wrote) from an SM on the other side crosses between the partitions: on an
// H200, 510-530 cycles against 265 for an atomic, unloaded, and under a decode step's load ~0.8-1
// us more per trip (wait probe, 2026-12-02). A counter every block of a grid polls therefore costs
// the far half one crossing per poll; a copy homed on each side, each block polling its own,
// takes that away. Neither the SM-to-side map nor the page hash is documented, so both are
// measured once per device: dependent atomics from every SM to each page of a small arena.
// Plain C++ (host side); the device reads `sm_side` and the pages.
#include <cstdint>
#include <vector>

namespace rs::kern {

constexpr int kL2SideMaxSms = 256;

constexpr int kL2SidePages = 2;  // pages homed on each side: counters + routing, x

struct L2Sides {
  bool valid = false;                  // two sides found (else: one counter, as before)
  const uint8_t* sm_side = nullptr;    // device: %smid -> 0 or 1
  unsigned* page[2][kL2SidePages] = {};  // device: 4 KB pages homed on side 0, on side 1
  std::vector<uint8_t> sm_side_host;     // the same table on the host (reports)
};

// One token's routing and normed x written by the cluster router a second and third time, into
// pages homed on each side, so the expert launch's blocks read them from their own side (the wait
// probe put the far half's inputs ~0.8 us behind the near half's). Page 0 of a side: the grid
// counters at word 0-1, the routing's ids at byte kL2SideIdsOffset, weights at kL2SideWeightsOffset;
// page 1: x. Where hidden, top_k fit.
constexpr uint32_t kL2SideIdsOffset = 256, kL2SideWeightsOffset = 1024;
inline bool l2_sided_inputs_fit(int hidden, int top_k) {
  return hidden > 0 && hidden * 2 <= 4096 && top_k > 0 && top_k * 4 <= int(kL2SideWeightsOffset - kL2SideIdsOffset);
}
inline int32_t* l2_side_ids(const L2Sides& s, int side) {
  return reinterpret_cast<int32_t*>(reinterpret_cast<uint8_t*>(s.page[side][0]) + kL2SideIdsOffset);
}
inline float* l2_side_weights(const L2Sides& s, int side) {
  return reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(s.page[side][0]) + kL2SideWeightsOffset);
}
inline void* l2_side_x(const L2Sides& s, int side) { return s.page[side][1]; }
// The router's launcher notes, for this host thread, which x, ids and weights it also wrote to the
// sides (nulls: none); the expert launcher reads the sided copies only when its own inputs are
// those buffers, and the note is cleared by the take.
void l2_sided_inputs_mark(const void* x, const void* ids, const void* weights);
bool l2_sided_inputs_take(const void* x, const void* ids, const void* weights);

// Once per device (cached; thread-safe); invalid where the measurement finds no clean split or
// RS_L2_SIDES=0 is set. The measurement allocates and synchronizes, so a caller that may be inside
// a stream capture passes may_measure = false: before the first measurement that returns invalid.
// The CUDA backend measures when it starts.
const L2Sides& l2_sides(bool may_measure = true);

// The measurement's arithmetic, on the host: lat[sm * pages + p] = cycles of an atomic from SM
// `sm` to page p (< 0: SM not seen). Sides from page 0 (near: below the midpoint of its fastest
// and slowest SM), then each page's home: the side whose SMs reach it faster. Fails (returns
// false) unless page 0 splits the SMs by at least min_gap cycles into two non-empty sides and
// every page's two side means differ by that much too.
struct L2SideMap {
  std::vector<int> sm_side;  // per SM index: 0, 1, or -1 (not seen)
  std::vector<int> page_home;
};
bool classify_l2_sides(const std::vector<float>& lat, int sms, int pages, float min_gap, L2SideMap& out);

}  // namespace rs::kern
