#pragma once
// Previous decode kernel, kept for A/B runs (RS_MLA_DECODE=wmma): WMMA flash-decoding over the paged latent cache. A block
// owns 16 heads of one sequence and one KV split; 64-token cache tiles are double-buffered with
// cp.async so the next tile streams in while the current one is multiplied. Because the cache row
// is the key and (its first kv_lora columns) the value, one shared-memory tile serves both GEMMs.
#include <mma.h>

#include "kernels/common/reduce.cuh"
#include "kernels/ops/mla_decode_params.h"

namespace rs::cuda {

namespace mla_decode_wmma {
constexpr int kHeads = 16;    // MMA M: heads per block
constexpr int kTile = 64;     // cache tokens per tile
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr float kLog2e = 1.4426950408889634f;

struct Layout {  // shared-memory carve-up, in bytes; strides padded against bank conflicts
  int qs, ks, ss, ps, os;  // element strides
  size_t q_off, k_off, s_off, p_off, o_off, stat_off, slot_off, total;
  __host__ __device__ Layout(int kv_lora, int kv_dim) {
    qs = kv_dim + 8; ks = kv_dim + 8; ss = kTile + 4; ps = kTile + 8; os = kv_lora + 4;
    q_off = 0;
    k_off = q_off + size_t(kHeads) * qs * 2;
    s_off = k_off + 2 * size_t(kTile) * ks * 2;
    p_off = s_off + 2 * size_t(kHeads) * ss * 4;
    o_off = p_off + size_t(kHeads) * ps * 2;
    stat_off = o_off + size_t(kHeads) * os * 4;
    slot_off = stat_off + 3 * kHeads * 4;
    total = slot_off + 2 * kTile * 8;
  }
};

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int bytes = valid ? 16 : 0;  // 0: the 16 bytes are zero-filled
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }
}  // namespace mla_decode_wmma

__device__ __forceinline__ void mla_decode_wmma_split_block(const MlaDecodeParams& p, int split, int head_group,
                                                       int b, char* smem) {
  using namespace nvcuda;
  using namespace mla_decode_wmma;
  const Layout L(p.kv_lora, p.kv_dim);
  __nv_bfloat16* Qs = reinterpret_cast<__nv_bfloat16*>(smem + L.q_off);
  __nv_bfloat16* Ks = reinterpret_cast<__nv_bfloat16*>(smem + L.k_off);
  float* Ss = reinterpret_cast<float*>(smem + L.s_off);
  __nv_bfloat16* Ps = reinterpret_cast<__nv_bfloat16*>(smem + L.p_off);
  float* Os = reinterpret_cast<float*>(smem + L.o_off);
  float* m_s = reinterpret_cast<float*>(smem + L.stat_off);
  float* l_s = m_s + kHeads;
  float* a_s = l_s + kHeads;
  int64_t* slot_s = reinterpret_cast<int64_t*>(smem + L.slot_off);  // [2][kTile] cache rows of a tile
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int h0 = head_group * kHeads;
  const int len = p.seq_lens[b];
  const int per_split = ((len + p.splits - 1) / p.splits + kTile - 1) / kTile * kTile;
  const int t0 = split * per_split, t1 = min(len, t0 + per_split);
  const int64_t part = (static_cast<int64_t>(b) * p.heads) * p.splits + split;  // + h * splits

  if (t0 >= t1) {  // empty split: contributes nothing to the combine
    for (int r = tid; r < kHeads; r += blockDim.x)
      if (h0 + r < p.heads) p.part_lse[part + static_cast<int64_t>(h0 + r) * p.splits] = -INFINITY;
    return;
  }

  const int vecs = p.kv_dim / 8;
  const int32_t* bt = p.block_tables + static_cast<int64_t>(b) * p.bt_stride;
  // The block-table lookups of a tile happen once per row, in parallel, before the copies: a
  // lookup per 16-byte copy would put an L2 round trip in front of every cp.async.
  auto load_tile = [&](int tile, int buf) {
    int64_t* slots = slot_s + buf * kTile;
    if (tid < kTile) {
      const int t = min(t0 + tile * kTile + tid, t1 - 1);
      slots[tid] = static_cast<int64_t>(bt[t / p.block_size]) * p.block_size + t % p.block_size;
    }
    __syncthreads();
    __nv_bfloat16* dst = Ks + buf * kTile * L.ks;
    const int rows = min(kTile, t1 - (t0 + tile * kTile));
    // (row, vector) walked incrementally: no integer division per 16-byte copy.
    int r = tid / vecs, v = tid - (tid / vecs) * vecs;
    const int dr = kThreads / vecs, dv = kThreads - dr * vecs;
    while (r < kTile) {
      cp_async16(dst + r * L.ks + v * 8, p.cache + slots[r] * p.kv_dim + v * 8, r < rows);
      v += dv;
      r += dr;
      if (v >= vecs) { v -= vecs; ++r; }
    }
    cp_async_commit();
  };

  load_tile(0, 0);
  const int64_t qrow = p.q_rows ? p.q_rows[b] : b;
  for (int i = tid; i < kHeads * vecs; i += blockDim.x) {
    const int r = i / vecs, v = i % vecs;
    uint4 val = make_uint4(0, 0, 0, 0);
    if (h0 + r < p.heads)
      val = *reinterpret_cast<const uint4*>(p.q + (qrow * p.heads + h0 + r) * p.kv_dim + v * 8);
    *reinterpret_cast<uint4*>(Qs + r * L.qs + v * 8) = val;
  }
  const int lshift = __ffs(p.kv_lora) - 1;  // kv_lora is a power of two (checked on the host)
  for (int i = tid; i < kHeads * p.kv_lora; i += blockDim.x) Os[(i >> lshift) * L.os + (i & (p.kv_lora - 1))] = 0.f;
  if (tid < kHeads) { m_s[tid] = -INFINITY; l_s[tid] = 0.f; }

  const int tiles = (t1 - t0 + kTile - 1) / kTile;
  const int ksteps = p.kv_dim / 16, khalf = (ksteps + 1) / 2;
  const float scale2 = p.scale * kLog2e;  // softmax in base 2: exp2 is one instruction
  for (int it = 0; it < tiles; ++it) {
    const int buf = it & 1;
    if (it + 1 < tiles) {
      load_tile(it + 1, buf ^ 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const __nv_bfloat16* Kt = Ks + buf * kTile * L.ks;
    {  // S = Q K^T, the K dimension split between two warp quartets
      const int ct = warp & 3, half = warp >> 2;
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.f);
      const int k_begin = half * khalf, k_end = min(ksteps, k_begin + khalf);
      for (int k = k_begin; k < k_end; ++k) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> bf;
        wmma::load_matrix_sync(a, Qs + k * 16, L.qs);
        wmma::load_matrix_sync(bf, Kt + (ct * 16) * L.ks + k * 16, L.ks);
        wmma::mma_sync(acc, a, bf, acc);
      }
      wmma::store_matrix_sync(Ss + half * kHeads * L.ss + ct * 16, acc, L.ss, wmma::mem_row_major);
    }
    __syncthreads();
    // Online softmax: warp w owns rows 2w and 2w+1; each lane two columns.
    for (int rr = 0; rr < 2; ++rr) {
      const int r = warp * 2 + rr;
      float s[2];
      for (int j = 0; j < 2; ++j) {
        const int c = lane + 32 * j;
        const bool valid = t0 + it * kTile + c < t1;
        s[j] = valid ? (Ss[r * L.ss + c] + Ss[kHeads * L.ss + r * L.ss + c]) * scale2 : -INFINITY;
      }
      const float m_old = m_s[r];
      const float m_new = fmaxf(m_old, warp_max(fmaxf(s[0], s[1])));
      const float alpha = exp2f(m_old - m_new);
      const float p0 = exp2f(s[0] - m_new), p1 = exp2f(s[1] - m_new);
      const float psum = warp_sum(p0 + p1);
      Ps[r * L.ps + lane] = __float2bfloat16(p0);
      Ps[r * L.ps + lane + 32] = __float2bfloat16(p1);
      if (lane == 0) {
        m_s[r] = m_new;
        l_s[r] = l_s[r] * alpha + psum;
        a_s[r] = alpha;
      }
    }
    __syncthreads();
    for (int i = tid; i < kHeads * p.kv_lora; i += blockDim.x) {
      const int r = i >> lshift, c = i & (p.kv_lora - 1);
      Os[r * L.os + c] *= a_s[r];
    }
    __syncthreads();
    for (int nt = warp; nt < p.kv_lora / 16; nt += kWarps) {  // O += P V
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::load_matrix_sync(acc, Os + nt * 16, L.os, wmma::mem_row_major);
#pragma unroll
      for (int k = 0; k < kTile / 16; ++k) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> bf;
        wmma::load_matrix_sync(a, Ps + k * 16, L.ps);
        wmma::load_matrix_sync(bf, Kt + (k * 16) * L.ks + nt * 16, L.ks);
        wmma::mma_sync(acc, a, bf, acc);
      }
      wmma::store_matrix_sync(Os + nt * 16, acc, L.os, wmma::mem_row_major);
    }
    __syncthreads();
  }
  for (int i = tid; i < kHeads * p.kv_lora; i += blockDim.x) {
    const int r = i >> lshift, c = i & (p.kv_lora - 1);
    if (h0 + r < p.heads)
      p.part_o[(part + static_cast<int64_t>(h0 + r) * p.splits) * p.kv_lora + c] = Os[r * L.os + c] / l_s[r];
  }
  for (int r = tid; r < kHeads; r += blockDim.x)
    if (h0 + r < p.heads) p.part_lse[part + static_cast<int64_t>(h0 + r) * p.splits] = m_s[r] + log2f(l_s[r]);
}

// Merges the splits of one (sequence, head): weights 2^(lse_s - max) renormalise the partials.
// The split weights go through shared memory once; the column loop then issues independent loads.
__device__ __forceinline__ void mla_decode_wmma_combine_block(const MlaDecodeParams& p, int b, int h) {
  __shared__ float wts[64];
  __shared__ float scratch[32];
  const int64_t base = (static_cast<int64_t>(b) * p.heads + h) * p.splits;
  const float lse = threadIdx.x < p.splits ? p.part_lse[base + threadIdx.x] : -INFINITY;
  const float mx = block_max(lse, scratch);
  const float e = lse == -INFINITY ? 0.f : exp2f(lse - mx);
  const float wsum = block_sum(e, scratch);
  if (threadIdx.x < p.splits) wts[threadIdx.x] = e / wsum;
  __syncthreads();
  const int64_t qrow = p.q_rows ? p.q_rows[b] : b;
  for (int c = threadIdx.x; c < p.kv_lora; c += blockDim.x) {
    float acc = 0.f;
#pragma unroll 8
    for (int s = 0; s < p.splits; ++s)
      if (wts[s] != 0.f) acc += wts[s] * p.part_o[(base + s) * p.kv_lora + c];
    p.out[(qrow * p.heads + h) * p.kv_lora + c] = __float2bfloat16(acc);
  }
}

}  // namespace rs::cuda
