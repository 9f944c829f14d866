#pragma once
// A fixed pool of std::threads for data-parallel loops: parallel_for splits [0, n) into chunks
// that the workers and the calling thread take from a shared counter.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace rs::cpu {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);  // total threads including the caller; <= 0: all cores
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  // fn(begin, end) over chunks of at least `grain` items. Not reentrant: fn must not call
  // parallel_for (nested loops run serially in the caller instead).
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain = 1);

 private:
  void worker_loop();
  void run_chunks();

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  uint64_t generation_ = 0;
  bool stop_ = false;
  int active_ = 0;  // workers still inside the current job
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0, chunk_ = 1;
  std::atomic<int64_t> next_{0};
  std::atomic<bool> in_job_{false};
};

}  // namespace rs::cpu
