#pragma once
// The per-request event channel (the RequestHandle the server holds) and the engine's inbox.
// HTTP threads read events and set the cancel flag; the engine thread writes events. Every
// member is safe to call from any thread.
#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>

#include "engine/engine.h"

namespace rs {

// Where the engine thread sleeps when it has nothing to run; woken by submits and cancels.
struct EngineInbox {
  std::mutex mu;
  std::condition_variable cv;
  bool cancel_pending = false;
  void wake_for_cancel() {
    {
      std::lock_guard<std::mutex> lk(mu);
      cancel_pending = true;
    }
    cv.notify_all();
  }
};

class RequestChannel : public RequestHandle {
 public:
  RequestChannel(uint64_t id, int num_choices, std::shared_ptr<EngineInbox> inbox)
      : id_(id), num_choices_(num_choices), inbox_(std::move(inbox)) {}

  std::optional<RequestEvent> next(std::chrono::milliseconds timeout) override;
  // True once every choice has finished and every event has been taken.
  bool done() const override;
  void cancel() override;
  uint64_t id() const override { return id_; }

  // Engine side.
  void push(RequestEvent ev);
  bool cancel_requested() const { return cancel_.load(std::memory_order_acquire); }

 private:
  const uint64_t id_;
  const int num_choices_;
  std::shared_ptr<EngineInbox> inbox_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestEvent> events_;
  int finished_choices_ = 0;
  std::atomic<bool> cancel_{false};
};

}  // namespace rs
