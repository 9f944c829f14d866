#include "backend/cuda/gpu_sampler.h"

#include <algorithm>
#include <cstring>

namespace rs::cuda {

GpuSampler::GpuSampler(int vocab) : vocab_(vocab) {
  RS_CUDA(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking));
  for (Slot& sl : slots_) RS_CUDA(cudaEventCreateWithFlags(&sl.uploaded, cudaEventDisableTiming));
}

GpuSampler::~GpuSampler() {
  if (side_) cudaStreamSynchronize(side_);
  for (Slot& sl : slots_) {
    if (sl.uploaded) cudaEventDestroy(sl.uploaded);
    if (sl.rows_h) cudaFreeHost(sl.rows_h);
    if (sl.results_h) cudaFreeHost(sl.results_h);
    if (sl.tokens_h) cudaFreeHost(sl.tokens_h);
  }
  if (side_) cudaStreamDestroy(side_);
}

SampleRow sample_row_of(const SamplingParams& p, uint64_t draw_index, int logits_row) {
  SampleRow r;
  r.temperature = p.temperature;
  r.top_p = p.top_p;
  r.min_p = p.min_p;
  r.presence = p.presence_penalty;
  r.frequency = p.frequency_penalty;
  r.repetition = p.repetition_penalty;
  r.top_k = p.top_k;
  r.logprobs = std::min(p.logprobs, kMaxTopLogprobs);
  r.uniform = p.temperature < 1e-5f ? 0.f : sampling_uniform(p.seed, draw_index);
  r.logits_row = logits_row;
  return r;
}

void GpuSampler::grow_rows(int n, cudaStream_t stream) {
  // The caller has read every step in flight (holds()); none may still write these buffers.
  RS_CUDA(cudaStreamSynchronize(stream));
  RS_CUDA(cudaStreamSynchronize(side_));
  const int c = std::max(n, 2 * cap_rows_);
  const size_t per = size_t(c) * vocab_ * 4;
  work_.reset(per, "sampler work");
  flags_.reset(per, "sampler flags");
  counts_.reset(per, "sampler counts");
  stats_.reset(size_t(c) * logit_stats_segments(vocab_) * sizeof(LogitStats), "sampler logit stats");
  // On the step's stream: a plain cudaMemset runs on the legacy stream, which a non-blocking
  // stream's kernels are not ordered after. The kernel leaves them zero again.
  RS_CUDA(cudaMemsetAsync(flags_.get(), 0, per, stream));
  RS_CUDA(cudaMemsetAsync(counts_.get(), 0, per, stream));
  for (Slot& sl : slots_) {
    sl.rows_d.reset(sizeof(SampleRow) * c, "sampler rows");
    if (sl.rows_h) cudaFreeHost(sl.rows_h);
    if (sl.results_h) cudaFreeHost(sl.results_h);
    RS_CUDA(cudaMallocHost(reinterpret_cast<void**>(&sl.rows_h), sizeof(SampleRow) * c));
    RS_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&sl.results_h), sizeof(SampleResult) * c, cudaHostAllocMapped));
    RS_CUDA(cudaHostGetDevicePointer(reinterpret_cast<void**>(&sl.results_dev), sl.results_h, 0));
  }
  cap_rows_ = c;
}

int GpuSampler::prepare(const std::vector<Request>& reqs, cudaStream_t stream) {
  const int n = static_cast<int>(reqs.size());
  const int slot = next_;
  next_ ^= 1;
  Slot& sl = slots_[slot];
  if (n > cap_rows_) grow_rows(n, stream);
  sl.logprobs_wanted.assign(n, -1);
  if (n == 0) return slot;
  static const SamplingParams kGreedy = [] {
    SamplingParams p;
    p.temperature = 0.0f;
    return p;
  }();
  std::vector<int32_t> pool;
  for (int i = 0; i < n; ++i) {
    const SamplingState& st = *reqs[i].state;
    const SamplingParams& p = st.params ? *st.params : kGreedy;
    SampleRow r = sample_row_of(p, st.draw_index, reqs[i].logits_row);
    if (p.repetition_penalty != 1.0f) {
      r.prompt_off = static_cast<int>(pool.size());
      r.prompt_len = static_cast<int>(st.prompt_tokens.size());
      pool.insert(pool.end(), st.prompt_tokens.begin(), st.prompt_tokens.end());
    }
    if (p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
      r.pending_row = reqs[i].pending_row;
      r.output_off = static_cast<int>(pool.size());
      r.output_len = static_cast<int>(st.output_tokens.size());
      pool.insert(pool.end(), st.output_tokens.begin(), st.output_tokens.end());
    }
    if (!st.allowed.empty()) {
      r.mask_off = static_cast<int>(pool.size());
      const size_t words = (size_t(vocab_) + 31) / 32;
      for (size_t w = 0; w < words; ++w) pool.push_back(w < st.allowed.size() ? static_cast<int32_t>(st.allowed[w]) : 0);
    }
    if (!p.logit_bias.empty()) {
      r.bias_off = static_cast<int>(pool.size());
      r.bias_len = static_cast<int>(p.logit_bias.size());
      for (auto [t, b] : p.logit_bias) {
        pool.push_back(t);
        int32_t bits;
        std::memcpy(&bits, &b, 4);
        pool.push_back(bits);
      }
    }
    sl.rows_h[i] = r;
    sl.logprobs_wanted[i] = p.logprobs;
  }
  if (pool.size() > sl.tokens_cap) {
    RS_CUDA(cudaStreamSynchronize(stream));
    RS_CUDA(cudaStreamSynchronize(side_));
    sl.tokens_cap = std::max(pool.size(), 2 * sl.tokens_cap);
    sl.tokens_d.reset(sl.tokens_cap * 4, "sampler tokens");
    if (sl.tokens_h) cudaFreeHost(sl.tokens_h);
    RS_CUDA(cudaMallocHost(reinterpret_cast<void**>(&sl.tokens_h), sl.tokens_cap * 4));
  }
  // This slot's last step was collected before this prepare (two steps in flight at most), so its
  // kernels, the last readers of these buffers, have finished: the side stream may refill them.
  if (!pool.empty()) {
    std::memcpy(sl.tokens_h, pool.data(), pool.size() * 4);
    RS_CUDA(cudaMemcpyAsync(sl.tokens_d.get(), sl.tokens_h, pool.size() * 4, cudaMemcpyHostToDevice, side_));
  }
  RS_CUDA(cudaMemcpyAsync(sl.rows_d.get(), sl.rows_h, sizeof(SampleRow) * n, cudaMemcpyHostToDevice, side_));
  RS_CUDA(cudaEventRecord(sl.uploaded, side_));
  return slot;
}

void GpuSampler::launch(int slot, const float* logits, int32_t* ids, const int32_t* resolved, cudaStream_t stream) {
  Slot& sl = slots_[slot];
  const int n = static_cast<int>(sl.logprobs_wanted.size());  // the requests of its prepare()
  if (n == 0) return;
  SamplingParamsDev d;
  d.logits = logits;
  d.vocab = vocab_;
  d.n = n;
  d.rows = sl.rows_d.get<SampleRow>();
  d.tokens = sl.tokens_d.get<int32_t>();
  d.resolved = resolved;
  d.work = work_.get<float>();
  d.flags = flags_.get<int32_t>();
  d.counts = counts_.get<int32_t>();
  d.out = sl.results_dev;
  d.ids = ids;
  d.stats = stats_.get<LogitStats>();
  RS_CUDA(cudaStreamWaitEvent(stream, sl.uploaded, 0));
  launch_sampling(d, stream);
  RS_CUDA(cudaGetLastError());
}

std::vector<SampledToken> GpuSampler::collect(int slot) const {
  const Slot& sl = slots_[slot];
  std::vector<SampledToken> out(sl.logprobs_wanted.size());
  for (size_t i = 0; i < out.size(); ++i) {
    const SampleResult& r = sl.results_h[i];
    out[i].id = r.id;
    out[i].logprob = r.logprob;
    const int ntop = std::min(sl.logprobs_wanted[i], kMaxTopLogprobs);
    for (int k = 0; k < ntop; ++k) out[i].top.push_back({r.top_ids[k], r.top_logprobs[k]});
  }
  return out;
}

}  // namespace rs::cuda
