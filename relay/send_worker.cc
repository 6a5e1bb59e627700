// Ordered background sends for the relay tier.
#include "relay/send_worker.h"

#include <chrono>

#include "core/logging.h"

namespace laminar::relay {

SendWorker::SendWorker(std::string name, BulkTransport* transport, std::mutex* send_mu,
                       int timeout_ms)
    : name_(std::move(name)),
      transport_(transport),
      send_mu_(send_mu),
      timeout_ms_(timeout_ms),
      thread_([this] { Loop(); }) {}

SendWorker::~SendWorker() { Stop(); }

void SendWorker::Push(SendItem item) {
  std::lock_guard<std::mutex> lock(mu_);
  if (item.generation < min_generation_ || stop_) return;
  queue_.push_back(std::move(item));
  cv_.notify_all();
}

void SendWorker::Supersede(uint64_t generation) {
  std::lock_guard<std::mutex> lock(mu_);
  min_generation_ = std::max(min_generation_, generation);
  std::erase_if(queue_, [&](const SendItem& i) { return i.generation < min_generation_; });
  std::erase_if(failed_, [&](const auto& f) { return f.second < min_generation_; });
}

bool SendWorker::WaitIdle(int timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                      [&] { return (queue_.empty() && !busy_) || stop_; });
}

void SendWorker::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    queue_.clear();
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

size_t SendWorker::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

uint64_t SendWorker::failures() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failures_;
}

void SendWorker::Loop() {
  while (true) {
    SendItem item;
    {
      std::unique_lock<std::mutex> lock(mu_);
      busy_ = false;
      cv_.notify_all();
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      item = std::move(queue_.front());
      queue_.pop_front();
      if (auto f = failed_.find(item.dest); f != failed_.end() && f->second == item.generation) {
        continue;
      }
      busy_ = true;
    }
    std::span<const uint8_t> bytes =
        item.keep_alive
            ? item.view
            : std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(item.owned.data()),
                                       item.owned.size());
    Status s;
    {
      std::lock_guard<std::mutex> lock(*send_mu_);
      s = transport_->Send(item.dest, item.tag, bytes, timeout_ms_);
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (!s.ok()) {
      ++failures_;
      failed_[item.dest] = item.generation;
      LAMINAR_LOG(WARN, RELAY) << name_ << ": send to " << item.dest << " failed (" << s
                               << "); skipping it for the rest of this broadcast";
    }
  }
}

}  // namespace laminar::relay
