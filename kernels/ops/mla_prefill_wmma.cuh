#pragma once
// TEMPORARY (A/B only, removed after measurement): the previous flash attention with WMMA bf16 tensor cores: a block owns 64 queries
// of one head and walks 64-key tiles up to the causal bound of its last query.
#include <mma.h>

#include "kernels/common/reduce.cuh"
#include "kernels/ops/mla_decode.cuh"  // cp.async helpers
#include "kernels/ops/mla_prefill_params.h"

namespace rs::cuda {

namespace mla_prefill_wmma {
constexpr int kRows = 64;  // queries per block
constexpr int kTile = 64;  // keys per tile
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr float kLog2e = 1.4426950408889634f;

struct Layout {
  int qs, vs, ss, ps, os;
  size_t q_off, k_off, v_off, s_off, p_off, o_off, stat_off, total;
  __host__ __device__ Layout(int nope, int rope, int vdim) {
    const int dk = nope + rope;
    qs = dk + 8; vs = vdim + 8; ss = kTile + 4; ps = kTile + 8; os = vdim + 4;
    q_off = 0;
    k_off = q_off + size_t(kRows) * qs * 2;
    v_off = k_off + 2 * size_t(kTile) * qs * 2;  // K and V double-buffered
    s_off = v_off + 2 * size_t(kTile) * vs * 2;
    p_off = s_off + size_t(kRows) * ss * 4;
    o_off = p_off + size_t(kRows) * ps * 2;
    stat_off = o_off + size_t(kRows) * os * 4;
    total = stat_off + 3 * kRows * 4;
  }
};
}  // namespace mla_prefill_wmma

__device__ __forceinline__ void mla_prefill_wmma_block(const MlaPrefillParams& p, int qtile, int h, char* smem) {
  using namespace nvcuda;
  using namespace mla_prefill_wmma;
  const int dk = p.nope + p.rope;
  const Layout L(p.nope, p.rope, p.vdim);
  __nv_bfloat16* Qs = reinterpret_cast<__nv_bfloat16*>(smem + L.q_off);
  __nv_bfloat16* Ks = reinterpret_cast<__nv_bfloat16*>(smem + L.k_off);
  __nv_bfloat16* Vs = reinterpret_cast<__nv_bfloat16*>(smem + L.v_off);
  float* Ss = reinterpret_cast<float*>(smem + L.s_off);
  __nv_bfloat16* Ps = reinterpret_cast<__nv_bfloat16*>(smem + L.p_off);
  float* Os = reinterpret_cast<float*>(smem + L.o_off);
  float* m_s = reinterpret_cast<float*>(smem + L.stat_off);
  float* l_s = m_s + kRows;
  float* a_s = l_s + kRows;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int q0 = qtile * kRows;
  const int total = p.start + p.T;
  const int key_end = min(total, p.start + q0 + kRows);  // causal bound of the last query
  const int kv_stride = p.heads * (p.nope + p.vdim);

  const int qvec = dk / 8;
  for (int i = tid; i < kRows * qvec; i += blockDim.x) {
    const int r = i / qvec, v = i % qvec;
    uint4 val = make_uint4(0, 0, 0, 0);
    if (q0 + r < p.T)
      val = *reinterpret_cast<const uint4*>(p.q + (static_cast<int64_t>(q0 + r) * p.heads + h) * dk + v * 8);
    *reinterpret_cast<uint4*>(Qs + r * L.qs + v * 8) = val;
  }
  const int vshift = __ffs(p.vdim) - 1;  // v_head_dim is a power of two (checked on the host)
  for (int i = tid; i < kRows * p.vdim; i += blockDim.x) Os[(i >> vshift) * L.os + (i & (p.vdim - 1))] = 0.f;
  if (tid < kRows) { m_s[tid] = -INFINITY; l_s[tid] = 0.f; }
  const float scale2 = p.scale * kLog2e;

  const int nvec = p.nope / 8, rvec = p.rope / 8, vvec = p.vdim / 8;
  // K = [k_nope | k_pe] and V rows of a 64-key tile, streamed with cp.async into buffer `buf`.
  auto load_tile = [&](int k0, int buf) {
    __nv_bfloat16* Kb = Ks + buf * kTile * L.qs;
    __nv_bfloat16* Vb = Vs + buf * kTile * L.vs;
    const int W = qvec + vvec;
    int r = tid / W, v = tid - (tid / W) * W;
    const int dr = kThreads / W, dv = kThreads - dr * W;
    for (; r < kTile; v += dv, r += dr) {  // (row, vector) walked without a division per copy
      if (v >= W) { v -= W; ++r; if (r >= kTile) break; }
      const int j = k0 + r;
      const bool valid = j < key_end;
      const int jj = valid ? j : 0;
      const __nv_bfloat16* kvrow = p.kv + static_cast<int64_t>(jj) * kv_stride + h * (p.nope + p.vdim);
      if (v < nvec) mla_decode::cp_async16(Kb + r * L.qs + v * 8, kvrow + v * 8, valid);
      else if (v < nvec + rvec)
        mla_decode::cp_async16(Kb + r * L.qs + v * 8, p.kpe + static_cast<int64_t>(jj) * p.rope + (v - nvec) * 8, valid);
      else mla_decode::cp_async16(Vb + r * L.vs + (v - qvec) * 8, kvrow + p.nope + (v - qvec) * 8, valid);
    }
    mla_decode::cp_async_commit();
  };
  load_tile(0, 0);
  for (int k0 = 0, it = 0; k0 < key_end; k0 += kTile, ++it) {
    const int buf = it & 1;
    __syncthreads();  // the other buffer's previous tile is fully consumed
    if (k0 + kTile < key_end) {
      load_tile(k0 + kTile, buf ^ 1);
      mla_decode::cp_async_wait<1>();
    } else {
      mla_decode::cp_async_wait<0>();
    }
    __syncthreads();
    const __nv_bfloat16* Kt = Ks + buf * kTile * L.qs;
    const __nv_bfloat16* Vt = Vs + buf * kTile * L.vs;
    {  // S = Q K^T: 16 tiles of 16x16, two per warp
      const int rt = warp >> 1;
      for (int cc = 0; cc < 2; ++cc) {
        const int ct = (warp & 1) * 2 + cc;
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        wmma::fill_fragment(acc, 0.f);
        for (int k = 0; k < dk / 16; ++k) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
          wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> bf;
          wmma::load_matrix_sync(a, Qs + (rt * 16) * L.qs + k * 16, L.qs);
          wmma::load_matrix_sync(bf, Kt + (ct * 16) * L.qs + k * 16, L.qs);
          wmma::mma_sync(acc, a, bf, acc);
        }
        wmma::store_matrix_sync(Ss + (rt * 16) * L.ss + ct * 16, acc, L.ss, wmma::mem_row_major);
      }
    }
    __syncthreads();
    for (int rr = 0; rr < kRows / kWarps; ++rr) {  // online softmax, 8 rows per warp
      const int r = warp * (kRows / kWarps) + rr;
      const int qpos = p.start + q0 + r;
      float s[2];
      for (int j = 0; j < 2; ++j) {
        const int c = lane + 32 * j, key = k0 + c;
        s[j] = (key <= qpos && key < key_end) ? Ss[r * L.ss + c] * scale2 : -INFINITY;
      }
      const float m_old = m_s[r];
      const float m_new = fmaxf(m_old, warp_max(fmaxf(s[0], s[1])));
      // A row with no valid key yet (only rows past T) keeps m = -inf; guard the NaN of inf-inf.
      const float alpha = m_new == -INFINITY ? 1.f : exp2f(m_old - m_new);
      const float p0 = m_new == -INFINITY ? 0.f : exp2f(s[0] - m_new);
      const float p1 = m_new == -INFINITY ? 0.f : exp2f(s[1] - m_new);
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
    for (int i = tid; i < kRows * p.vdim; i += blockDim.x) {
      const int r = i >> vshift, c = i & (p.vdim - 1);
      Os[r * L.os + c] *= a_s[r];
    }
    __syncthreads();
    const int vt = p.vdim / 16;
    for (int t = warp; t < (kRows / 16) * vt; t += kWarps) {  // O += P V
      const int rt = t / vt, ct = t % vt;
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::load_matrix_sync(acc, Os + (rt * 16) * L.os + ct * 16, L.os, wmma::mem_row_major);
#pragma unroll
      for (int k = 0; k < kTile / 16; ++k) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> bf;
        wmma::load_matrix_sync(a, Ps + (rt * 16) * L.ps + k * 16, L.ps);
        wmma::load_matrix_sync(bf, Vt + (k * 16) * L.vs + ct * 16, L.vs);
        wmma::mma_sync(acc, a, bf, acc);
      }
      wmma::store_matrix_sync(Os + (rt * 16) * L.os + ct * 16, acc, L.os, wmma::mem_row_major);
    }
  }
  __syncthreads();
  for (int i = tid; i < kRows * p.vdim; i += blockDim.x) {
    const int r = i >> vshift, c = i & (p.vdim - 1);
    if (q0 + r < p.T)
      p.out[(static_cast<int64_t>(q0 + r) * p.heads + h) * p.vdim + c] = __float2bfloat16(Os[r * L.os + c] / l_s[r]);
  }
}

}  // namespace rs::cuda
