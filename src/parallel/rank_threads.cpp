#include "parallel/rank_threads.h"

#include <cuda_runtime.h>

#include <exception>
#include <thread>
#include <vector>

#include "common/error.h"
#include "parallel/cuda_check.h"

namespace rs::parallel {

void HostBarrier::arrive_and_wait() {
  std::unique_lock<std::mutex> lock(mu_);
  if (aborted_) throw Error("rank barrier aborted: another rank failed");
  const unsigned long gen = generation_;
  if (++waiting_ == parties_) {
    waiting_ = 0;
    ++generation_;
    cv_.notify_all();
    return;
  }
  cv_.wait(lock, [&] { return generation_ != gen || aborted_; });
  if (generation_ == gen) throw Error("rank barrier aborted: another rank failed");
}

void HostBarrier::abort() {
  std::lock_guard<std::mutex> lock(mu_);
  aborted_ = true;
  cv_.notify_all();
}

void run_rank_threads(const Topology& topo, const std::function<void(int rank)>& fn,
                      HostBarrier* barrier) {
  // The first failure in time is the cause; later ones are usually "barrier aborted".
  std::mutex mu;
  std::exception_ptr first;
  std::vector<std::thread> threads;
  for (int r = 0; r < topo.size(); ++r) {
    threads.emplace_back([&, r] {
      try {
        cuda_check(cudaSetDevice(topo.device_of(r)), "cudaSetDevice for rank " + std::to_string(r));
        fn(r);
      } catch (...) {
        {
          std::lock_guard<std::mutex> lock(mu);
          if (!first) first = std::current_exception();
        }
        if (barrier) barrier->abort();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace rs::parallel
