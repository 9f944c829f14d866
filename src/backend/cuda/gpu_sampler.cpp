#include "backend/cuda/gpu_sampler.h"

#include <algorithm>
#include <cstring>

namespace rs::cuda {

GpuSampler::GpuSampler(int vocab) : vocab_(vocab) {
  RS_CUDA(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking));
  RS_CUDA(cudaEventCreateWithFlags(&uploaded_, cudaEventDisableTiming));
}

GpuSampler::~GpuSampler() {
  if (side_) cudaStreamSynchronize(side_);
  if (uploaded_) cudaEventDestroy(uploaded_);
  if (side_) cudaStreamDestroy(side_);
  if (rows_h_) cudaFreeHost(rows_h_);
  if (results_h_) cudaFreeHost(results_h_);
  if (tokens_h_) cudaFreeHost(tokens_h_);
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

void GpuSampler::prepare(const std::vector<Request>& reqs, cudaStream_t stream) {
  const int n = static_cast<int>(reqs.size());
  logprobs_wanted_.assign(n, -1);
  if (n == 0) return;
  if (n > cap_rows_) {
    RS_CUDA(cudaStreamSynchronize(stream));
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
    rows_d_.reset(sizeof(SampleRow) * c, "sampler rows");
    if (rows_h_) cudaFreeHost(rows_h_);
    if (results_h_) cudaFreeHost(results_h_);
    RS_CUDA(cudaMallocHost(reinterpret_cast<void**>(&rows_h_), sizeof(SampleRow) * c));
    RS_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&results_h_), sizeof(SampleResult) * c, cudaHostAllocMapped));
    RS_CUDA(cudaHostGetDevicePointer(reinterpret_cast<void**>(&results_dev_), results_h_, 0));
    cap_rows_ = c;
  }
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
    rows_h_[i] = r;
    logprobs_wanted_[i] = p.logprobs;
  }
  if (pool.size() > tokens_cap_) {
    RS_CUDA(cudaStreamSynchronize(stream));
    tokens_cap_ = std::max(pool.size(), 2 * tokens_cap_);
    tokens_d_.reset(tokens_cap_ * 4, "sampler tokens");
    if (tokens_h_) cudaFreeHost(tokens_h_);
    RS_CUDA(cudaMallocHost(reinterpret_cast<void**>(&tokens_h_), tokens_cap_ * 4));
  }
  // The previous step's sampling kernels, the last readers of these buffers, finished before its
  // sync, so the side stream may overwrite them now.
  if (!pool.empty()) {
    std::memcpy(tokens_h_, pool.data(), pool.size() * 4);
    RS_CUDA(cudaMemcpyAsync(tokens_d_.get(), tokens_h_, pool.size() * 4, cudaMemcpyHostToDevice, side_));
  }
  RS_CUDA(cudaMemcpyAsync(rows_d_.get(), rows_h_, sizeof(SampleRow) * n, cudaMemcpyHostToDevice, side_));
  RS_CUDA(cudaEventRecord(uploaded_, side_));
}

void GpuSampler::launch(const float* logits, cudaStream_t stream) {
  const int n = static_cast<int>(logprobs_wanted_.size());  // the requests of the last prepare()
  if (n == 0) return;
  SamplingParamsDev d;
  d.logits = logits;
  d.vocab = vocab_;
  d.n = n;
  d.rows = rows_d_.get<SampleRow>();
  d.tokens = tokens_d_.get<int32_t>();
  d.work = work_.get<float>();
  d.flags = flags_.get<int32_t>();
  d.counts = counts_.get<int32_t>();
  d.out = results_dev_;
  d.stats = stats_.get<LogitStats>();
  RS_CUDA(cudaStreamWaitEvent(stream, uploaded_, 0));
  launch_sampling(d, stream);
  RS_CUDA(cudaGetLastError());
}

std::vector<SampledToken> GpuSampler::collect() const {
  std::vector<SampledToken> out(logprobs_wanted_.size());
  for (size_t i = 0; i < out.size(); ++i) {
    const SampleResult& r = results_h_[i];
    out[i].id = r.id;
    out[i].logprob = r.logprob;
    const int ntop = std::min(logprobs_wanted_[i], kMaxTopLogprobs);
    for (int k = 0; k < ntop; ++k) out[i].top.push_back({r.top_ids[k], r.top_logprobs[k]});
  }
  return out;
}

}  // namespace rs::cuda
