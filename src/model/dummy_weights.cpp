// Weights::dummy: deterministic random weights from kernels/common/dummy_init.h, so a GPU can
// create the identical bytes in place (see that header for the exact formula and FP8 rule).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>

#include "common/error.h"
#include "kernels/common/dummy_init.h"
#include "model/numerics.h"
#include "model/weights.h"
#include "model/weights_builder.h"

namespace rs {

namespace {

size_t stored_bytes(const TensorInfo& t, const QuantSpec& q) {
  size_t n = 1;
  for (int64_t d : t.shape) n *= static_cast<size_t>(d);
  size_t bytes = n * dtype_size(t.dtype);
  if (t.block_scaled)
    bytes += static_cast<size_t>((t.shape[0] + q.block_rows - 1) / q.block_rows) *
             ((t.shape[1] + q.block_cols - 1) / q.block_cols) * 4;
  return bytes;
}

void fill(const TensorInfo& t, uint64_t seed, void* out, float* scales, const QuantSpec& q) {
  const uint64_t id = dummy::name_hash(t.name.c_str());
  const auto init = static_cast<uint8_t>(t.init);
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  if (t.dtype == DType::F8_E4M3) {
    const float scale_inv = dummy::fp8_block_scale_inv(init, t.fan_in);
    auto* o = static_cast<uint8_t*>(out);
    for (int64_t i = 0; i < n; ++i)
      o[i] = f32_to_e4m3(dummy::value(seed, id, i, init, t.fan_in) / scale_inv);
    int64_t sb = ((t.shape[0] + q.block_rows - 1) / q.block_rows) *
                 ((t.shape[1] + q.block_cols - 1) / q.block_cols);
    std::fill(scales, scales + sb, scale_inv);
  } else if (t.dtype == DType::BF16) {
    auto* o = static_cast<uint16_t*>(out);
    for (int64_t i = 0; i < n; ++i) o[i] = f32_to_bf16(dummy::value(seed, id, i, init, t.fan_in));
  } else if (t.dtype == DType::F32) {
    auto* o = static_cast<float*>(out);
    for (int64_t i = 0; i < n; ++i) o[i] = dummy::value(seed, id, i, init, t.fan_in);
  } else {
    throw Error("dummy weights: tensor '" + t.name + "': no dummy rule for dtype " +
                dtype_name(t.dtype));
  }
}

}  // namespace

std::unique_ptr<Weights> Weights::dummy(const ModelSpec& spec, uint64_t seed) {
  std::vector<TensorInfo> infos = expected_tensors(spec);
  std::vector<TensorInfo> mtp = expected_mtp_tensors(spec);
  infos.insert(infos.end(), mtp.begin(), mtp.end());
  // Layout: each tensor (then its scales) 16-byte aligned in one buffer.
  std::vector<size_t> offsets(infos.size());
  size_t total = 0;
  for (size_t i = 0; i < infos.size(); ++i) {
    offsets[i] = total;
    total += (stored_bytes(infos[i], spec.quant) + 4 + 15) & ~size_t(15);
  }
  const double ram = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
  if (static_cast<double>(total) > 0.8 * ram)
    throw Error("dummy weights: this config needs " + std::to_string(total >> 20) +
                " MiB of host memory, more than 80% of the " +
                std::to_string(static_cast<size_t>(ram) >> 20) +
                " MiB here (use a GPU backend, which creates them in device memory)");

  WeightsBuilder b;
  std::shared_ptr<uint8_t[]> buf(new uint8_t[total]);
  b.keep(std::shared_ptr<void>(buf, buf.get()));
  std::vector<std::pair<uint8_t*, float*>> where(infos.size());
  for (size_t i = 0; i < infos.size(); ++i) {
    const TensorInfo& t = infos[i];
    size_t n = 1;
    for (int64_t d : t.shape) n *= static_cast<size_t>(d);
    size_t wbytes = n * dtype_size(t.dtype);
    uint8_t* w = buf.get() + offsets[i];
    b.add(t.name, t.dtype, t.shape, w, wbytes);
    float* scales = nullptr;
    if (t.block_scaled) {
      int64_t r = (t.shape[0] + spec.quant.block_rows - 1) / spec.quant.block_rows;
      int64_t c = (t.shape[1] + spec.quant.block_cols - 1) / spec.quant.block_cols;
      scales = reinterpret_cast<float*>(w + ((wbytes + 3) & ~size_t(3)));
      b.add(t.name + "_scale_inv", DType::F32, {r, c}, scales, size_t(r * c) * 4);
    }
    where[i] = {w, scales};
  }
  // Fill in parallel: tensors are independent.
  std::atomic<size_t> next{0};
  unsigned nthreads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  std::exception_ptr err;
  std::mutex err_mu;
  for (unsigned k = 0; k < nthreads; ++k)
    pool.emplace_back([&] {
      for (size_t i; (i = next.fetch_add(1)) < infos.size();) {
        try {
          fill(infos[i], seed, where[i].first, where[i].second, spec.quant);
        } catch (...) {
          std::lock_guard<std::mutex> lk(err_mu);
          err = std::current_exception();
        }
      }
    });
  for (auto& t : pool) t.join();
  if (err) std::rethrow_exception(err);
  b.set_mtp(!mtp.empty());
  b.set_dummy(seed);
  b.link_scales(spec.quant.block_rows, spec.quant.block_cols);
  return std::move(b.w);
}

}  // namespace rs
