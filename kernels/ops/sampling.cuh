#pragma once
// One block per sequence. Each thread owns a contiguous range of token ids, so "lower id first"
// tie rules and the id-order inverse CDF are prefix sums over threads.
#include "kernels/common/reduce.cuh"
#include "kernels/ops/sampling_params.h"

namespace rs::cuda {

namespace sampling {

struct Scratch {
  double d[32];
  float f[32];
  int i[32];
  float best_v[32];
  int best_i[32];
};

// Sum over the block (double for probability mass, int for counts); slots: one per warp.
template <typename T>
__device__ __forceinline__ T block_total(T v, T* slots) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (lane == 0) slots[warp] = v;
  __syncthreads();
  T t = 0;
  for (int k = 0; k < nw; ++k) t += slots[k];
  __syncthreads();
  return t;
}

// Exclusive prefix over threads in thread order.
template <typename T>
__device__ __forceinline__ T block_exclusive_scan(T v, T* shared /* [blockDim] */) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int off = 1; off < blockDim.x; off <<= 1) {
    T add = threadIdx.x >= off ? shared[threadIdx.x - off] : T(0);
    __syncthreads();
    shared[threadIdx.x] += add;
    __syncthreads();
  }
  T incl = shared[threadIdx.x];
  __syncthreads();
  return incl - v;
}

// Highest value, lowest index on ties, over the block (every thread gets both). A thread starts
// its idx at kNoId, which loses every tie; where no thread saw a value above -inf (a row of -inf,
// or of NaN from broken weights) the result is `none`, an index inside the caller's row, never the
// sentinel (which the callers would use to index the row).
constexpr int kNoId = 0x7fffffff;
struct BlockBest {
  float v;
  int i;
};
__device__ __forceinline__ BlockBest block_argmax(float v, int idx, Scratch& s, int none) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
    if (ov > v || (ov == v && oi < idx)) { v = ov; idx = oi; }
  }
  if (lane == 0) { s.best_v[warp] = v; s.best_i[warp] = idx; }
  __syncthreads();
  float bv = s.best_v[0];
  int bi = s.best_i[0];
  for (int k = 1; k < nw; ++k)
    if (s.best_v[k] > bv || (s.best_v[k] == bv && s.best_i[k] < bi)) { bv = s.best_v[k]; bi = s.best_i[k]; }
  __syncthreads();
  return {bv, bi == kNoId ? none : bi};
}

// One segment of one row's raw logits: its max (lowest id on ties; the segment's first id when
// every entry is -inf, so a row of -inf still yields a valid id), then the sum of
// exp(x - max). Terms in fp32 (expf: ~1 ulp), summed in double: the same arithmetic the
// one-block pass used, with the segment's max instead of the row's, which the combine rescales.
__device__ __forceinline__ void logit_stats_segment(const SamplingParamsDev& p, int b, int seg) {
  __shared__ Scratch S;
  const int V = p.vocab, nseg = logit_stats_segments(V);
  const int len = (V + nseg - 1) / nseg;
  const int s0 = seg * len, s1 = min(V, s0 + len);
  const float* raw = p.logits + static_cast<int64_t>(p.rows[b].logits_row) * V;
  float bv = -INFINITY;
  int bi = kNoId;
  for (int i = s0 + threadIdx.x; i < s1; i += blockDim.x) {
    const float v = raw[i];
    if (v > bv) { bv = v; bi = i; }
  }
  const BlockBest best = block_argmax(bv, bi, S, s0);
  const int arg = best.i;
  const float mx = best.v;
  double sum = 0;
  if (mx != -INFINITY)
    for (int i = s0 + threadIdx.x; i < s1; i += blockDim.x) sum += static_cast<double>(expf(raw[i] - mx));
  sum = block_total(sum, S.d);
  if (threadIdx.x == 0) p.stats[static_cast<int64_t>(b) * nseg + seg] = LogitStats{sum, mx, arg};
}

// The row's max, its lowest id and log-sum-exp from the segment summaries (every thread gets them).
struct RowStats {
  float max, lse;
  int argmax;
};
__device__ __forceinline__ RowStats combine_logit_stats(const SamplingParamsDev& p, int b, Scratch& S) {
  const int nseg = logit_stats_segments(p.vocab);
  const LogitStats* st = p.stats + static_cast<int64_t>(b) * nseg;
  LogitStats mine{0.0, -INFINITY, kNoId};
  if (threadIdx.x < nseg) mine = st[threadIdx.x];  // nseg <= kLogitStatsMaxSegments <= blockDim.x
  RowStats r;
  const BlockBest best = block_argmax(mine.max, mine.argmax, S, 0);
  r.argmax = best.i;
  r.max = best.v;
  const double part = mine.max != -INFINITY ? mine.sumexp * exp(static_cast<double>(mine.max) - r.max) : 0.0;
  const double sum = block_total(part, S.d);
  r.lse = r.max + static_cast<float>(log(sum));
  return r;
}

}  // namespace sampling

__device__ void sample_row(const SamplingParamsDev& p, int b) {
  using namespace sampling;
  __shared__ Scratch S;
  __shared__ double scan_d[kSamplingThreads];
  __shared__ int scan_i[kSamplingThreads];
  __shared__ int chosen_s;
  const SampleRow r = p.rows[b];
  const RowStats row_stats = combine_logit_stats(p, b, S);
  const int V = p.vocab;
  const float* raw = p.logits + static_cast<int64_t>(r.logits_row) * V;
  float* w = p.work + static_cast<int64_t>(b) * V;
  int32_t* flag = p.flags + static_cast<int64_t>(b) * V;
  int32_t* cnt = p.counts + static_cast<int64_t>(b) * V;
  const int per = (V + blockDim.x - 1) / blockDim.x;
  const int i0 = threadIdx.x * per, i1 = min(V, i0 + per);

  // Plain greedy (no penalties, no logit bias) reads the raw logits in place with coalesced, thread-strided
  // loads; every other mode needs the contiguous per-thread ranges (id-order prefix sums) and a
  // working copy.
  const bool plain_greedy = r.temperature < 1e-5f && r.repetition == 1.0f && r.presence == 0.0f && r.frequency == 0.0f &&
                            r.bias_len == 0 && r.mask_off < 0;
  if (!plain_greedy)
    for (int i = i0; i < i1; ++i) w[i] = raw[i];
  if (r.mask_off >= 0) {  // guided decoding: tokens outside the grammar at -inf (same thread's range)
    const int32_t* mask = p.tokens + r.mask_off;
    for (int i = i0; i < i1; ++i)
      if (!(static_cast<uint32_t>(mask[i >> 5]) >> (i & 31) & 1u)) w[i] = -INFINITY;
  }
  __syncthreads();
  // Bias ids are unique (the server refuses duplicates), so the adds cannot race.
  for (int j = threadIdx.x; j < r.bias_len; j += blockDim.x) {
    const int t = p.tokens[r.bias_off + 2 * j];
    if (t >= 0 && t < V) w[t] += __int_as_float(p.tokens[r.bias_off + 2 * j + 1]);
  }
  __syncthreads();
  const int32_t* prompt = p.tokens + r.prompt_off;
  const int32_t* output = p.tokens + r.output_off;
  // A chained step's newest output token was sampled on the device after this row was packed.
  const int out_n = r.output_len + (r.pending_row >= 0 ? 1 : 0);
  auto output_token = [&](int j) { return j < r.output_len ? output[j] : p.resolved[r.pending_row]; };
  if (r.repetition != 1.0f) {  // every token seen in prompt or output, once
    for (int j = threadIdx.x; j < r.prompt_len + out_n; j += blockDim.x) {
      const int t = j < r.prompt_len ? prompt[j] : output_token(j - r.prompt_len);
      if (t >= 0 && t < V) flag[t] = 1;
    }
    __syncthreads();
    for (int j = threadIdx.x; j < r.prompt_len + out_n; j += blockDim.x) {
      const int t = j < r.prompt_len ? prompt[j] : output_token(j - r.prompt_len);
      if (t >= 0 && t < V && atomicExch(&flag[t], 0))
        w[t] = w[t] > 0 ? w[t] / r.repetition : w[t] * r.repetition;
    }
    __syncthreads();
  }
  if (r.presence != 0.0f || r.frequency != 0.0f) {
    for (int j = threadIdx.x; j < out_n; j += blockDim.x) {
      const int t = output_token(j);
      if (t >= 0 && t < V) atomicAdd(&cnt[t], 1);
    }
    __syncthreads();
    for (int j = threadIdx.x; j < out_n; j += blockDim.x) {
      const int t = output_token(j);
      if (t < 0 || t >= V) continue;
      const int c = atomicExch(&cnt[t], 0);
      if (c) w[t] -= r.frequency * static_cast<float>(c) + r.presence;
    }
    __syncthreads();
  }

  if (r.temperature < 1e-5f) {  // greedy, the first maximum (each thread keeps its lowest id; so does the block)
    float bv = -INFINITY;
    int bi = kNoId;
    if (plain_greedy) {  // the raw logits' argmax: the pre-pass found it
      if (threadIdx.x == 0) chosen_s = row_stats.argmax;
    } else {
      for (int i = i0; i < i1; ++i)
        if (w[i] > bv) { bv = w[i]; bi = i; }
      // No value above -inf (a NaN row): the first id, as the host sampler's argmax.
      const int c = block_argmax(bv, bi, S, 0).i;
      if (threadIdx.x == 0) chosen_s = c;
    }
  } else {
    float mx = -INFINITY;
    for (int i = i0; i < i1; ++i) { w[i] /= r.temperature; mx = fmaxf(mx, w[i]); }
    mx = block_max(mx, S.f);
    double sum = 0;
    for (int i = i0; i < i1; ++i) { const float e = expf(w[i] - mx); w[i] = e; sum += e; }
    sum = block_total(sum, S.d);
    float pmax = 0.f;
    for (int i = i0; i < i1; ++i) { w[i] = static_cast<float>(w[i] / sum); pmax = fmaxf(pmax, w[i]); }
    pmax = block_max(pmax, S.f);
    // The kept set is always a prefix of the ranking: min_p keeps every token at or above a
    // threshold, top_k the first k, top_p the first ones reaching its mass.
    const float minp_thr = r.min_p > 0.f ? r.min_p * pmax : 0.f;
    int local = 0;
    for (int i = i0; i < i1; ++i) local += w[i] >= minp_thr;
    int K = block_total(local, S.i);
    if (r.top_k > 0 && r.top_k < K) K = r.top_k;
    // tau: the K-th largest probability (largest bit pattern with count(>= tau) >= K;
    // positive floats order like their bits). Ties at tau are kept lowest id first.
    auto count_ge = [&](unsigned bits) {
      int c = 0;
      for (int i = i0; i < i1; ++i) c += __float_as_uint(w[i]) >= bits;
      return block_total(c, S.i);
    };
    // Nothing truncated (K == V: no min_p, no top_k below V): tau = 0 keeps every token, which
    // is what the search would find; skipping it saves ~31 passes over the vocabulary.
    unsigned lo = 0, hi = K >= V ? 0u : 0x7f800000u;
    while (lo < hi) {
      const unsigned mid = lo + (hi - lo + 1) / 2;
      if (count_ge(mid) >= K) lo = mid; else hi = mid - 1;
    }
    const float tau = __uint_as_float(lo);
    int gt = 0, ties = 0;
    for (int i = i0; i < i1; ++i) { gt += w[i] > tau; ties += w[i] == tau; }
    const int need_ties = K - block_total(gt, S.i);
    int tie_rank = block_exclusive_scan(ties, scan_i);
    // keep1 marks: 1 kept; encoded in flag scratch? keep in-register by recomputation instead.
    auto kept1 = [&](int i, int& rank) {
      if (w[i] > tau) return true;
      if (w[i] == tau) return rank++ < need_ties;
      return false;
    };
    if (r.top_p < 1.0f) {
      double mass = 0;
      { int rk = tie_rank; for (int i = i0; i < i1; ++i) if (kept1(i, rk)) mass += w[i]; }
      const double kept_mass = block_total(mass, S.d);
      const double target = static_cast<double>(r.top_p) * kept_mass;
      // tau2: largest bit pattern whose kept mass at or above it still reaches target.
      auto mass_ge = [&](unsigned bits) {
        double m = 0;
        int rk = tie_rank;
        for (int i = i0; i < i1; ++i) {
          const bool k = kept1(i, rk);
          if (k && __float_as_uint(w[i]) >= bits) m += w[i];
        }
        return block_total(m, S.d);
      };
      unsigned lo2 = lo, hi2 = 0x7f800000u;
      while (lo2 < hi2) {
        const unsigned mid = lo2 + (hi2 - lo2 + 1) / 2;
        if (mass_ge(mid) >= target) lo2 = mid; else hi2 = mid - 1;
      }
      const float tau2 = __uint_as_float(lo2);
      double m_gt = 0;
      int ties2 = 0;
      { int rk = tie_rank;
        for (int i = i0; i < i1; ++i) {
          const bool k = kept1(i, rk);
          if (k && w[i] > tau2) m_gt += w[i];
          if (k && w[i] == tau2) ++ties2;
        } }
      m_gt = block_total(m_gt, S.d);
      const int need2 = tau2 > 0.f ? static_cast<int>(ceil((target - m_gt) / tau2 - 1e-9)) : 0;
      const int tie2_rank = block_exclusive_scan(ties2, scan_i);
      // Final kept set: drop ranks past the top_p prefix by zeroing their probability.
      { int rk = tie_rank, rk2 = tie2_rank;
        for (int i = i0; i < i1; ++i) {
          const bool k = kept1(i, rk);
          bool keep = k && (w[i] > tau2 || (w[i] == tau2 && rk2++ < max(need2, 1)));
          if (!k || !keep) w[i] = -w[i] - 1.f;  // negative: dropped (restorable, unused later)
        } }
    } else {
      int rk = tie_rank;
      for (int i = i0; i < i1; ++i) if (!kept1(i, rk)) w[i] = -w[i] - 1.f;
    }
    __syncthreads();
    // Inverse CDF in token-id order over the kept probabilities.
    double local_mass = 0;
    int last_kept = -1;
    for (int i = i0; i < i1; ++i) if (w[i] >= 0.f) { local_mass += w[i]; last_kept = i; }
    const double total = block_total(local_mass, S.d);
    const double target = static_cast<double>(r.uniform) * total;
    const double before = block_exclusive_scan(local_mass, scan_d);
    if (threadIdx.x == 0) chosen_s = -1;
    __syncthreads();
    if (before <= target && target < before + local_mass) {
      double cum = before;
      for (int i = i0; i < i1; ++i) {
        if (w[i] < 0.f) continue;
        cum += w[i];
        if (cum > target) { chosen_s = i; break; }
      }
    }
    __syncthreads();
    if (chosen_s < 0) {  // rounding pushed the target past the end: the last kept token
      int lk = last_kept;
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) lk = max(lk, __shfl_xor_sync(0xffffffffu, lk, o));
      if ((threadIdx.x & 31) == 0) S.i[threadIdx.x >> 5] = lk;
      __syncthreads();
      if (threadIdx.x == 0) {
        int m = -1;
        for (int k = 0; k < (int)(blockDim.x >> 5); ++k) m = max(m, S.i[k]);
        // Nothing kept (a NaN row): the raw argmax, as the CPU sampler falls back to its argmax.
        chosen_s = m >= 0 ? m : row_stats.argmax;
      }
    }
  }
  __syncthreads();
  const int chosen = chosen_s;
  // logprobs from the raw logits (log-sum-exp from the pre-pass)
  const float lse = row_stats.lse;
  SampleResult* out = p.out + b;
  if (threadIdx.x == 0) {
    out->id = chosen;
    out->logprob = raw[chosen] - lse;
    if (p.ids) p.ids[b] = chosen;  // on the device too, for a chained next step's embedding
  }
  const int ntop = min(r.logprobs, kMaxTopLogprobs);
  __shared__ int taken[kMaxTopLogprobs];
  for (int k = 0; k < ntop; ++k) {
    float bv = -INFINITY;
    int bi = kNoId;
    for (int i = i0; i < i1; ++i) {
      bool skip = false;
      for (int q = 0; q < k; ++q) skip |= taken[q] == i;
      if (!skip && raw[i] > bv) { bv = raw[i]; bi = i; }
    }
    const int c = block_argmax(bv, bi, S, k).i;  // a NaN row: some id inside it
    if (threadIdx.x == 0) {
      taken[k] = c;
      out->top_ids[k] = c;
      out->top_logprobs[k] = raw[c] - lse;
    }
    __syncthreads();
  }
}

}  // namespace rs::cuda
