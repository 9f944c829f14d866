#pragma once
// Building blocks of the Lamport all-reduces: element traits with the -0.0 sentinel, 16-byte
// volatile peer stores and polls, the bounded spin-wait, and the per-call buffer rotation.
//
// Why the data can be its own flag: every buffer is armed with -0.0 in every lane, and no rank
// ever writes -0.0 (inputs are canonicalised to +0.0, which changes no sum). A reader that sees
// no -0.0 lane in a vector has that vector's data; lanes are 2 or 4 bytes and each lands whole,
// so a torn 16-byte store only means polling again.
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/comm/comm_layout.h"
#include "kernels/common/global_timer.cuh"

namespace rs::comm {

// ---- element traits ------------------------------------------------------------------------
template <ElemType kType> struct Elem;

template <> struct Elem<ElemType::bf16> {
  static constexpr int kLanes = 8;
  static constexpr uint32_t kSentinelWord = 0x80008000u;  // two bf16 -0.0
  static constexpr const char* kName = "bf16";
  __device__ static bool has_sentinel(const uint4& v) {
    // __vcmpeq2 compares the two 16-bit halves at once: 0xffff in each half that matches.
    return (__vcmpeq2(v.x, kSentinelWord) | __vcmpeq2(v.y, kSentinelWord) |
            __vcmpeq2(v.z, kSentinelWord) | __vcmpeq2(v.w, kSentinelWord)) != 0u;
  }
  __device__ static uint32_t canonical_word(uint32_t w) { return w & ~__vcmpeq2(w, kSentinelWord); }
  __device__ static void to_float(const uint4& v, float* f) {
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      f[2 * i] = __uint_as_float(w[i] << 16);
      f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
  }
  __device__ static uint4 from_float(const float* f) {
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      __nv_bfloat162 h = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
      w[i] = *reinterpret_cast<uint32_t*>(&h);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
  }
  __device__ static float load_scalar(const void* p, uint64_t i) {
    return __uint_as_float(static_cast<uint32_t>(static_cast<const uint16_t*>(p)[i]) << 16);
  }
  __device__ static void store_lane(void* p, uint64_t i, const uint4& v, int lane) {
    const uint32_t w = (&v.x)[lane / 2];
    static_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(lane % 2 ? w >> 16 : w & 0xffffu);
  }
  __device__ static uint32_t scalar_bits(const void* p, uint64_t i) {
    return static_cast<const uint16_t*>(p)[i];
  }
  __device__ static uint4 pack_bits(const uint32_t* b) {  // kLanes raw element bit patterns
    return make_uint4(b[0] | b[1] << 16, b[2] | b[3] << 16, b[4] | b[5] << 16, b[6] | b[7] << 16);
  }
};

template <> struct Elem<ElemType::fp32> {
  static constexpr int kLanes = 4;
  static constexpr uint32_t kSentinelWord = 0x80000000u;  // fp32 -0.0
  static constexpr const char* kName = "fp32";
  __device__ static bool has_sentinel(const uint4& v) {
    return v.x == kSentinelWord || v.y == kSentinelWord || v.z == kSentinelWord ||
           v.w == kSentinelWord;
  }
  __device__ static uint32_t canonical_word(uint32_t w) { return w == kSentinelWord ? 0u : w; }
  __device__ static void to_float(const uint4& v, float* f) {
    f[0] = __uint_as_float(v.x); f[1] = __uint_as_float(v.y);
    f[2] = __uint_as_float(v.z); f[3] = __uint_as_float(v.w);
  }
  __device__ static uint4 from_float(const float* f) {
    return make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]),
                      __float_as_uint(f[3]));
  }
  __device__ static float load_scalar(const void* p, uint64_t i) {
    return static_cast<const float*>(p)[i];
  }
  __device__ static void store_lane(void* p, uint64_t i, const uint4& v, int lane) {
    static_cast<uint32_t*>(p)[i] = (&v.x)[lane];
  }
  __device__ static uint32_t scalar_bits(const void* p, uint64_t i) {
    return static_cast<const uint32_t*>(p)[i];
  }
  __device__ static uint4 pack_bits(const uint32_t* b) { return make_uint4(b[0], b[1], b[2], b[3]); }
};

template <class E> __device__ __forceinline__ uint4 canonical(const uint4& v) {
  return make_uint4(E::canonical_word(v.x), E::canonical_word(v.y), E::canonical_word(v.z),
                    E::canonical_word(v.w));
}

template <class E> __device__ __forceinline__ uint4 sentinel_vec() {
  return make_uint4(E::kSentinelWord, E::kSentinelWord, E::kSentinelWord, E::kSentinelWord);
}

// ---- memory access ---------------------------------------------------------------------------
// Volatile: the compiler may neither cache a poll in a register nor merge or drop a peer store,
// and the access skips L1, so a poll always reaches the L2 where peer stores land.
__device__ __forceinline__ uint4 ld_volatile(const uint4* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p)
               : "memory");
  return v;
}

__device__ __forceinline__ void st_volatile(uint4* p, const uint4& v) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w)
               : "memory");
}

// Vector `vec` of an array of `count` elements; lanes past the end read as +0.0.
template <class E>
__device__ __forceinline__ uint4 load_vec(const void* base, uint64_t count, uint64_t vec) {
  const uint64_t first = vec * E::kLanes;
  if (first + E::kLanes <= count) return reinterpret_cast<const uint4*>(base)[vec];
  uint32_t bits[E::kLanes];
#pragma unroll
  for (int l = 0; l < E::kLanes; ++l) bits[l] = first + l < count ? E::scalar_bits(base, first + l) : 0u;
  return E::pack_bits(bits);
}

template <class E>
__device__ __forceinline__ void store_vec(void* base, uint64_t count, uint64_t vec, const uint4& v) {
  const uint64_t first = vec * E::kLanes;
  if (first + E::kLanes <= count) {
    reinterpret_cast<uint4*>(base)[vec] = v;
    return;
  }
#pragma unroll
  for (int l = 0; l < E::kLanes; ++l)
    if (first + l < count) E::store_lane(base, first + l, v, l);
}

// ---- bounded spin-wait -----------------------------------------------------------------------
using rs::kern::global_time_ns;

// Where a wait stands, for the diagnostic a timeout prints.
struct WaitSite {
  const char* op;
  int rank;
  uint32_t buffer;
  uint32_t region;  // the slot: which peer's data (or gathered chunk) this rank waits for
  uint64_t vec;
  uint32_t* reported;  // this rank's LamportState::reported: the first timed-out thread prints
};

// `since`: when the wait began (0: now), for a caller that already spent part of the bound.
template <class E>
__device__ __noinline__ uint4 wait_slow(const uint4* p, uint64_t timeout_ns, WaitSite site, uint64_t since = 0) {
  const uint64_t start = since ? since : global_time_ns();
  for (uint32_t spin = 0;; ++spin) {
    const uint4 v = ld_volatile(p);
    if (!E::has_sentinel(v)) return v;
    if ((spin & 255u) == 255u && global_time_ns() - start > timeout_ns) {
      if (atomicCAS(site.reported, 0u, 1u) != 0u) {
        // Another thread reports; trapping at once could end the kernel before its line is out.
        const uint64_t grace = global_time_ns();
        while (global_time_ns() - grace < 100000000ull) {}
        __trap();
      }
      printf("rackserve comm: %s (%s) on rank %d timed out after %llu ms waiting for buffer %u "
             "slot %u vector %llu (block %d thread %d): a peer never wrote it (peer not "
             "launched, mismatched call sequence, or dead GPU); trapping\n",
             site.op, E::kName, site.rank, static_cast<unsigned long long>(timeout_ns / 1000000),
             site.buffer, site.region, static_cast<unsigned long long>(site.vec),
             static_cast<int>(blockIdx.x), static_cast<int>(threadIdx.x));
      __trap();
    }
  }
}

// `first` is a poll of p already issued (so several slots' polls can be in flight at once).
template <class E>
__device__ __forceinline__ uint4 wait_ready(const uint4* p, const uint4& first, uint64_t timeout_ns,
                                            const WaitSite& site) {
  if (!E::has_sentinel(first)) return first;
  return wait_slow<E>(p, timeout_ns, site);
}

// Sum, in fp32 and in rank order 0..N-1, of vector `vec` of every slot of `buffer`; slot
// `rank` is this rank's own canonical input `own` (it never crosses the link). Polls are issued
// a batch at a time so their latencies overlap; the order of the additions never changes, so
// every rank computes the same bits.
constexpr int kPollBatch = 8;

template <class E>
__device__ __forceinline__ void reduce_slots(const LamportView& ws, uint32_t buffer, uint64_t vec,
                                             const uint4& own, const char* op, float* acc) {
#pragma unroll
  for (int l = 0; l < E::kLanes; ++l) acc[l] = 0.f;
  for (int s0 = 0; s0 < ws.nranks; s0 += kPollBatch) {
    uint4 polled[kPollBatch];
#pragma unroll
    for (int i = 0; i < kPollBatch; ++i) {
      const int s = s0 + i;
      if (s < ws.nranks && s != ws.rank) polled[i] = ld_volatile(ws.region(ws.rank, buffer, s) + vec);
    }
#pragma unroll
    for (int i = 0; i < kPollBatch; ++i) {
      const int s = s0 + i;
      if (s >= ws.nranks) break;
      const uint4 w = s == ws.rank ? own
                                   : wait_ready<E>(ws.region(ws.rank, buffer, s) + vec, polled[i],
                                                   ws.timeout_ns,
                                                   WaitSite{op, ws.rank, buffer, static_cast<uint32_t>(s), vec,
                                                            &ws.state->reported});
      float f[E::kLanes];
      E::to_float(w, f);
#pragma unroll
      for (int l = 0; l < E::kLanes; ++l) acc[l] += f[l];
    }
  }
}

// ---- waiting for several vectors at once ---------------------------------------------------
// Spins until no vector addr(k) whose bit is set in `pending` holds the sentinel; v[k] holds a
// poll of addr(k) already issued and ends as its data. Every spin re-polls *all* vectors still
// missing, so a vector that lands while the thread waits for another is seen by the same round
// trip. (Waiting for them one after another costs one more L2 round trip per vector: its first
// poll, issued before the data landed, is stale by the time the thread gets to it.) The
// addresses come from a functor, which the compiler may recompute rather than hold K 64-bit
// pointers in registers (holding them spilled in a first version). Used by tray-first and the
// fused decode op; tried for the whole-row fused op and removed there (no gain at one row, slower
// with many rows: docs/perf/comm.md).
template <class E, int K, class Addr>
__device__ __forceinline__ void wait_ready_all(const LamportView& ws, const char* op, const Addr& addr,
                                               uint4 (&v)[K], uint32_t pending) {
#pragma unroll
  for (int k = 0; k < K; ++k)
    if ((pending >> k & 1u) && !E::has_sentinel(v[k])) pending &= ~(1u << k);
  if (pending == 0u) return;
  const uint64_t start = global_time_ns();
  for (uint32_t spin = 0; pending != 0u; ++spin) {
#pragma unroll
    for (int k = 0; k < K; ++k)
      if (pending >> k & 1u) v[k] = ld_volatile(addr(k));
#pragma unroll
    for (int k = 0; k < K; ++k)
      if ((pending >> k & 1u) && !E::has_sentinel(v[k])) pending &= ~(1u << k);
    if (pending != 0u && (spin & 255u) == 255u && global_time_ns() - start > ws.timeout_ns) {
      // Past the bound: hand the first missing vector to the single-vector wait, its bound
      // already spent, which names its buffer, slot and vector and traps (or returns, had it
      // just landed).
#pragma unroll
      for (int k = 0; k < K; ++k) {
        if (!(pending >> k & 1u)) continue;
        const uint64_t off = static_cast<uint64_t>(addr(k) - ws.buffers[ws.rank]);
        const uint64_t region = off / ws.region_vecs;
        v[k] = wait_slow<E>(addr(k), ws.timeout_ns,
                            WaitSite{op, ws.rank, static_cast<uint32_t>(region / ws.regions),
                                     static_cast<uint32_t>(region % ws.regions), off % ws.region_vecs,
                                     &ws.state->reported},
                            start);
        pending &= ~(1u << k);
      }
    }
  }
}

// The sum, in fp32 and in slot order 0..nslots-1, into acc[k], of kV vectors (vec[k], where active[k]) of
// every slot of `buffer` in this rank's workspace; slot own_slot is this rank's own data own[k]
// (never polled). All polls of a batch of slots, for every vector, are in flight together and
// are waited for together (wait_ready_all); the order of the additions per element never
// changes, so every rank computes the same bits.
template <class E, int kV>
__device__ __forceinline__ void reduce_slots_multi(const LamportView& ws, uint32_t buffer, const uint32_t (&vec)[kV],
                                                   const bool (&active)[kV], const uint4 (&own)[kV], int nslots,
                                                   int own_slot, const char* op, float (&acc)[kV][E::kLanes]) {
  constexpr int kBatch = 4 / kV > 0 ? 4 / kV : 1;  // at most 4 polls in flight
  const uint4* slot0 = ws.region(ws.rank, buffer, 0);
  const uint64_t stride = ws.region_vecs;
  // One batch of slots s0..s0+kBatch-1. The first batch sets acc (peeled, so acc holds no
  // registers while the first polls are waited for: with N <= kBatch that is the only wait).
  const auto batch = [&](int s0, bool first) {
    // Poll idx = k * kBatch + i: vector vec[k] of slot s0 + i.
    const auto addr = [&](int idx) { return slot0 + (s0 + idx % kBatch) * stride + vec[idx / kBatch]; };
    uint4 val[kV * kBatch];
    uint32_t pending = 0;
#pragma unroll
    for (int k = 0; k < kV; ++k)
#pragma unroll
      for (int i = 0; i < kBatch; ++i) {
        const int s = s0 + i, idx = k * kBatch + i;
        if (active[k] && s < nslots && s != own_slot) {
          val[idx] = ld_volatile(addr(idx));
          pending |= 1u << idx;
        } else {
          val[idx] = own[k];
        }
      }
    wait_ready_all<E, kV * kBatch>(ws, op, addr, val, pending);
#pragma unroll
    for (int k = 0; k < kV; ++k) {
      if (!active[k]) continue;  // an inactive acc[k] is left as the caller had it
#pragma unroll
      for (int i = 0; i < kBatch; ++i) {
        float f[E::kLanes];
        E::to_float(val[k * kBatch + i], f);
        const bool in_range = s0 + i < nslots;
#pragma unroll
        for (int l = 0; l < E::kLanes; ++l) {
          if (first && i == 0) acc[k][l] = f[l];  // slot 0 always exists
          else if (in_range) acc[k][l] += f[l];
        }
      }
    }
  };
  batch(0, true);
  for (int s0 = kBatch; s0 < nslots; s0 += kBatch) batch(s0, false);
}

// ---- buffer rotation -------------------------------------------------------------------------
// Call k uses buffer k % 3 and re-arms the buffer of call k-1, whose next use is call k+2.
// Why that is safe without a barrier: this rank finished reading that buffer in call k-1 (this
// call starts after griddepcontrol.wait / kernel order), every peer store into it has landed
// (the reader saw every vector it reads free of the sentinel, and peers store nothing else
// there), and no peer can store into it again before call k+2, which needs this rank's call k+1
// data, written only after this call has completed. Re-arming while peers' data of call k is in
// flight keeps its cost off the critical path.
__device__ __forceinline__ uint32_t previous_buffer(uint32_t buffer) {
  return (buffer + kLamportBuffers - 1) % kLamportBuffers;
}

// `dirty`: the previous buffer's extent (LamportState::dirty_vecs), which a caller may load
// early so that its latency is not paid where the re-arm sits.
template <class E>
__device__ __forceinline__ void rearm_previous(const LamportView& ws, uint32_t buffer, int cta, int ctas,
                                               uint32_t dirty) {
  const uint32_t prev = previous_buffer(buffer);
  const uint64_t total = static_cast<uint64_t>(dirty) * ws.regions;
  const uint4 s = sentinel_vec<E>();
  for (uint64_t i = static_cast<uint64_t>(cta) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<uint64_t>(ctas) * blockDim.x) {
    ws.region(ws.rank, prev, static_cast<uint32_t>(i / dirty))[i % dirty] = s;
  }
}

template <class E>
__device__ __forceinline__ void rearm_previous(const LamportView& ws, uint32_t buffer, int cta, int ctas) {
  rearm_previous<E>(ws, buffer, cta, ctas, ws.state->dirty_vecs[previous_buffer(buffer)]);
}

// Kernel-wrapper side of the rotation: which buffer this CTA's call uses, and the advance after.
__device__ __forceinline__ uint32_t lamport_begin(const LamportView& ws, uint32_t* smem_slot) {
  if (threadIdx.x == 0) *smem_slot = ws.state->next_buffer[blockIdx.x];
  __syncthreads();
  return *smem_slot;
}

__device__ __forceinline__ void lamport_end(const LamportView& ws, uint32_t buffer,
                                            uint32_t vecs_used) {
  __syncthreads();  // every thread of this CTA has read the state before it moves on
  if (threadIdx.x == 0) {
    ws.state->next_buffer[blockIdx.x] = (buffer + 1) % kLamportBuffers;
    if (blockIdx.x == 0) ws.state->dirty_vecs[buffer] = vecs_used;
  }
}

}  // namespace rs::comm
