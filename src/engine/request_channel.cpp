#include "engine/request_channel.h"

namespace rs {

std::optional<RequestEvent> RequestChannel::next(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait_for(lk, timeout, [&] { return !events_.empty() || finished_choices_ >= num_choices_; });
  if (events_.empty()) return std::nullopt;
  RequestEvent ev = std::move(events_.front());
  events_.pop_front();
  return ev;
}

bool RequestChannel::done() const {
  std::lock_guard<std::mutex> lk(mu_);
  return finished_choices_ >= num_choices_ && events_.empty();
}

void RequestChannel::cancel() {
  if (cancel_.exchange(true, std::memory_order_acq_rel)) return;
  inbox_->wake_for_cancel();
}

void RequestChannel::push(RequestEvent ev) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (ev.finish != FinishReason::None) ++finished_choices_;
    events_.push_back(std::move(ev));
  }
  cv_.notify_all();
}

}  // namespace rs
