#pragma once
// One definition of the Lamport workspace layout and of every comm kernel's params, shared by
// the host code that allocates and launches (src/parallel/) and the device ops (kernels/comm/).
//
// A Lamport workspace lives in one cudaMalloc per rank, mapped into every peer by peer access:
//   [LamportState][buffer 0][buffer 1][buffer 2]
// Each buffer holds `regions` regions of `region_vecs` 16-byte vectors. Peers write data into a
// rank's buffer; only the rank itself reads it and re-arms it (fills it with the sentinel, -0.0).
#include <cuda_runtime.h>  // uint4, __host__ __device__ for plain C++ includers

#include <cstdint>

namespace rs::comm {

constexpr int kMaxRanks = 16;        // two trays of 8: the largest group one Comm serves
constexpr int kLamportBuffers = 3;   // in use / idle, re-armed now / armed, next
constexpr int kMaxCtas = 1024;       // per-CTA state entries; a workspace's grid is fixed
constexpr int kVecBytes = 16;        // every peer store and poll is one 16-byte vector

enum class ElemType : uint32_t { bf16 = 0, fp32 = 1 };

// Per rank, in its own memory, read and written only by its own kernels.
struct alignas(16) LamportState {
  // Vectors per region written into each buffer at its last use: the extent the next re-arm clears.
  uint32_t dirty_vecs[kLamportBuffers];
  uint32_t reported;  // set by the first spin-wait that times out, so one thread prints
  // Buffer index of the next call, one entry per CTA. Every CTA of every call advances its own
  // entry, so the entries stay equal without any cross-CTA synchronisation; this is why a
  // workspace's grid size is fixed for its lifetime.
  uint32_t next_buffer[kMaxCtas];
};

// What a kernel on one rank needs to reach every rank's workspace.
struct LamportView {
  uint4* buffers[kMaxRanks];   // peer p's buffer 0, as addressed from this rank's GPU
  LamportState* state;         // this rank's state
  uint32_t region_vecs;        // capacity of one region, in vectors
  uint32_t regions;            // regions per buffer
  int rank;
  int nranks;
  int write_order[kMaxRanks];  // peers in the order this rank writes them (remote tray first)
  uint64_t timeout_ns;         // bound on every spin-wait before the diagnostic and __trap()

  __host__ __device__ uint4* region(int peer, uint32_t buffer, uint32_t r) const {
    return buffers[peer] + (static_cast<uint64_t>(buffer) * regions + r) * region_vecs;
  }
};

// out[i] = sum over ranks of in[i], reduced in rank order 0..N-1 in fp32 on every rank.
struct OneShotParams {
  LamportView ws;
  const void* in;
  void* out;
  uint32_t count;      // elements; count * elem_size <= region_vecs * 16
  ElemType type;
};

// Reduce-scatter then all-gather, both through Lamport buffers: regions 0..N-1 are the scatter
// slots (rank s writes my chunk of its input into slot s), regions N..2N-1 the gathered chunks.
struct TwoShotParams {
  LamportView ws;
  const void* in;
  void* out;
  uint32_t count;      // elements; chunk = ceil(vectors / N) vectors <= region_vecs
  ElemType type;
};

// Tray-first: ranks r = t * tray_size + l (tray t, position l). `tray` holds tray_size slots of
// the element type (slot l: the data of position l of this rank's tray); `across` holds `trays`
// slots of fp32 tray partials (slot t: tray t's partial, from the rank at this rank's position),
// 16 / elem_size x as many vectors as `tray`. Both views share the buffer index: the rotation
// state lives in `tray`'s LamportState; `across`'s holds its own re-arm extents.
struct TrayFirstParams {
  LamportView tray;
  LamportView across;
  const void* in;
  void* out;
  uint32_t count;      // elements; count * elem_size <= tray.region_vecs * 16
  ElemType type;
  int tray_size;       // R = ranks per tray
  int trays;           // T
};

// A fused row is split into chunks of p.chunk_vecs vectors, one chunk per CTA (a whole row in
// one CTA, or one chunk per CTA of a thread block cluster); each thread holds up to this many
// vectors of its chunk in registers.
constexpr int kFusedMaxVecsPerThread = 4;  // hidden <= 4 * 512 * lanes (16384 bf16, 8192 fp32)
constexpr int kFusedMaxThreads = 512;
constexpr int kFusedMaxCluster = 8;        // portable thread block cluster size

// residual_out = residual + all_reduce(x);  normed = rmsnorm(residual_out) * gamma.
// The norm reads residual_out as rounded to the element type: the same numbers an unfused
// all-reduce -> add -> norm sequence sees. residual_out may alias residual.
struct FusedArNormParams {
  LamportView ws;
  const void* x;          // [rows, hidden] this rank's partial sums
  const void* residual;   // [rows, hidden]
  const void* gamma;      // [hidden]
  void* residual_out;     // [rows, hidden]
  void* normed;           // [rows, hidden]
  uint32_t rows;
  uint32_t hidden;
  uint32_t chunk_vecs;    // vectors of a row per CTA (the row split); the host picks it
  float eps;
  ElemType type;
};

}  // namespace rs::comm
