#include "backend/cuda/kernel_timeline.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/graph_ablation.h"
#include "backend/cuda/kernel_name.h"
#include "common/error.h"

#if __has_include(<cupti_activity.h>)
#include <cupti_activity.h>
#define RS_HAVE_CUPTI 1
#else
#define RS_HAVE_CUPTI 0
#endif

namespace rs::cuda {

#if RS_HAVE_CUPTI
namespace {

// The CUPTI entry points this file uses, resolved from the library loaded at run time.
struct Cupti {
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&cuptiActivityEnable) enable = nullptr;
  decltype(&cuptiActivityDisable) disable = nullptr;
  decltype(&cuptiActivityFlushAll) flush_all = nullptr;
  decltype(&cuptiActivityGetNextRecord) next_record = nullptr;
  decltype(&cuptiGetResultString) result_string = nullptr;
  std::string error;  // empty: usable
};

Cupti load_cupti() {
  Cupti c;
  std::vector<std::string> names;
  if (const char* v = std::getenv("RS_CUPTI_LIB"); v && *v) names.emplace_back(v);
  for (const char* n : {"libcupti.so.13", "libcupti.so", "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so",
                        "/usr/local/cuda/lib64/libcupti.so", "/usr/local/cuda/targets/x86_64-linux/lib/libcupti.so"})
    names.emplace_back(n);
  void* h = nullptr;
  for (const std::string& n : names)
    if ((h = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL))) break;
  if (!h) {
    c.error = "libcupti was not found (tried libcupti.so.13, libcupti.so and the CUDA toolkit's lib64 and "
              "extras/CUPTI/lib64; RS_CUPTI_LIB names another)";
    return c;
  }
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
    if (!fn && c.error.empty()) c.error = std::string("libcupti has no ") + name;
  };
  sym(c.register_callbacks, "cuptiActivityRegisterCallbacks");
  sym(c.enable, "cuptiActivityEnable");
  sym(c.disable, "cuptiActivityDisable");
  sym(c.flush_all, "cuptiActivityFlushAll");
  sym(c.next_record, "cuptiActivityGetNextRecord");
  sym(c.result_string, "cuptiGetResultString");
  return c;
}

const Cupti& cupti() {
  static const Cupti c = load_cupti();
  return c;
}

void check(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return;
  const char* s = nullptr;
  if (cupti().result_string) cupti().result_string(r, &s);
  throw Error(std::string("kernel timeline: ") + what + ": " + (s ? s : "CUPTI error " + std::to_string(int(r))));
}

// CUPTI hands completed record buffers to buffer_completed on its own thread.
std::mutex g_mutex;
std::vector<KernelSpan>* g_sink = nullptr;
constexpr size_t kBufferBytes = size_t(8) << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    CUpti_Activity* rec = nullptr;
    while (buffer && cupti().next_record(buffer, valid, &rec) == CUPTI_SUCCESS) {
      if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || !g_sink) continue;
      // The kernel record of this toolkit's CUPTI (the header the binary was built against).
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
      g_sink->push_back({short_kernel_name(k->name), k->start, k->end, uint32_t(k->gridX) * k->gridY * k->gridZ,
                         uint32_t(k->blockX) * k->blockY * k->blockZ});
    }
  }
  std::free(buffer);
}

}  // namespace

bool kernel_timeline_available(std::string* why) {
  if (why) *why = cupti().error;
  return cupti().error.empty();
}

std::vector<KernelSpan> trace_graph_replays(cudaGraph_t graph, cudaGraphExec_t exec, cudaStream_t stream, int replays) {
  const Cupti& c = cupti();
  if (!c.error.empty()) throw Error("kernel timeline: " + c.error);
  const int per_replay = static_cast<int>(graph_kernel_nodes(graph).size());
  std::vector<KernelSpan> spans;
  static std::once_flag registered;
  std::call_once(registered, [&] { check(c.register_callbacks(buffer_requested, buffer_completed), "register buffers"); });
  RS_CUDA(cudaStreamSynchronize(stream));
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_sink = &spans;
  }
  check(c.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enable kernel records");
  for (int i = 0; i < std::max(1, replays); ++i) RS_CUDA(cudaGraphLaunch(exec, stream));
  RS_CUDA(cudaStreamSynchronize(stream));
  check(c.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "flush records");
  check(c.disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "disable kernel records");
  check(c.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "flush records");
  std::vector<KernelSpan> out;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_sink = nullptr;
    out.swap(spans);
  }
  std::sort(out.begin(), out.end(), [](const KernelSpan& a, const KernelSpan& b) { return a.start_ns < b.start_ns; });
  if (static_cast<int>(out.size()) < per_replay)
    throw Error("kernel timeline: CUPTI recorded " + std::to_string(out.size()) + " kernels, below the " +
                std::to_string(per_replay) + " of one replay");
  out.erase(out.begin(), out.end() - per_replay);  // the last replay
  return out;
}

#else  // built without the CUPTI headers

bool kernel_timeline_available(std::string* why) {
  if (why) *why = "this binary was built without the CUPTI headers (cupti_activity.h)";
  return false;
}

std::vector<KernelSpan> trace_graph_replays(cudaGraph_t, cudaGraphExec_t, cudaStream_t, int) {
  throw Error("kernel timeline: this binary was built without the CUPTI headers (cupti_activity.h)");
}

#endif

}  // namespace rs::cuda
