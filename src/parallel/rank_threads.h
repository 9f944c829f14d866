#pragma once
// In-process ranks: one host thread per rank, each with its rank's GPU current, and a host
// barrier the threads can meet at (between benchmark repetitions, before a capture). A rank
// that throws aborts the barrier, so the other threads stop instead of waiting forever.
#include <condition_variable>
#include <functional>
#include <mutex>

#include "parallel/topology.h"

namespace rs::parallel {

class HostBarrier {
 public:
  explicit HostBarrier(int parties) : parties_(parties) {}
  // Throws rs::Error once abort() was called (by a failed rank).
  void arrive_and_wait();
  void abort();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int parties_;
  int waiting_ = 0;
  unsigned long generation_ = 0;
  bool aborted_ = false;
};

// Runs fn(rank) on topo.size() threads (device set to topo.device_of(rank)) and joins them.
// Rethrows the first exception a rank threw, after aborting `barrier` (if given) so that no
// other rank stays blocked in it.
void run_rank_threads(const Topology& topo, const std::function<void(int rank)>& fn,
                      HostBarrier* barrier = nullptr);

}  // namespace rs::parallel
