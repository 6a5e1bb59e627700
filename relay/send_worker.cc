// Ordered background sends for the relay tier.
#include "relay/send_worker.h"

#include <chrono>

#include "core/logging.h"

namespace laminar::relay {

SendWorker::SendWorker(std::string name, BulkTransport* transport, Mutex* send_mu, int timeout_ms)
    : name_(std::move(name)),
      transport_(transport),
      send_mu_(send_mu),
      timeout_ms_(timeout_ms),
      thread_([this] { Loop(); }) {}

SendWorker::~SendWorker() { Stop(); }

void SendWorker::Push(SendItem item) {
  MutexLock lock(&mu_);
  if (item.generation < min_generation_ || stop_) return;
  queue_.push_back(std::move(item));
  cv_.NotifyAll();
}

void SendWorker::Supersede(uint64_t generation) {
  MutexLock lock(&mu_);
  min_generation_ = std::max(min_generation_, generation);
  const uint64_t oldest = min_generation_;  // a copy: the analysis does not follow into lambdas
  std::erase_if(queue_, [oldest](const SendItem& i) { return i.generation < oldest; });
  std::erase_if(failed_, [oldest](const auto& f) { return f.second < oldest; });
}

bool SendWorker::WaitIdle(int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  MutexLock lock(&mu_);
  while (!((queue_.empty() && !busy_) || stop_)) {
    if (!cv_.WaitUntil(&mu_, deadline)) return (queue_.empty() && !busy_) || stop_;
  }
  return true;
}

void SendWorker::Stop() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
    queue_.clear();
    cv_.NotifyAll();
  }
  if (thread_.joinable()) thread_.join();
}

size_t SendWorker::queued() const {
  MutexLock lock(&mu_);
  return queue_.size();
}

uint64_t SendWorker::failures() const {
  MutexLock lock(&mu_);
  return failures_;
}

void SendWorker::Loop() {
  while (true) {
    SendItem item;
    {
      MutexLock lock(&mu_);
      busy_ = false;
      cv_.NotifyAll();
      while (!stop_ && queue_.empty()) cv_.Wait(&mu_);
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
      MutexLock lock(send_mu_);
      s = transport_->Send(item.dest, item.tag, bytes, timeout_ms_);
    }
    MutexLock lock(&mu_);
    if (!s.ok()) {
      ++failures_;
      failed_[item.dest] = item.generation;
      LAMINAR_LOG(WARN, RELAY) << name_ << ": send to " << item.dest << " failed (" << s
                               << "); skipping it for the rest of this broadcast";
    }
  }
}

}  // namespace laminar::relay
