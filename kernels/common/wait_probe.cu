// The wait probe's registry of per-unit setters (wait_probe.cuh) and its host API.
#include <cuda_runtime.h>

#include <mutex>
#include <vector>

#include "kernels/common/wait_probe.h"

namespace rs::kern {
namespace probe {

using Setter = void (*)(WaitProbeRecord*, uint32_t);

namespace {
std::vector<Setter>& setters() {
  static std::vector<Setter> s;
  return s;
}
std::mutex& setters_mutex() {
  static std::mutex m;
  return m;
}
}  // namespace

int register_setter(Setter s) {
  std::lock_guard<std::mutex> lock(setters_mutex());
  setters().push_back(s);
  return static_cast<int>(setters().size());
}

}  // namespace probe

bool wait_probe_built() {
#ifdef RS_WAIT_PROBE
  return true;
#else
  return false;
#endif
}

void wait_probe_arm(WaitProbeRecord* records, uint32_t capacity) {
  std::lock_guard<std::mutex> lock(probe::setters_mutex());
  for (probe::Setter s : probe::setters()) s(records, records ? capacity : 0u);
}

}  // namespace rs::kern
