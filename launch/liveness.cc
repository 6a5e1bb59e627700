// Signs of life from the manager, the master relay and the actor; see liveness.h.
#include "launch/liveness.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>

#include "core/host.h"
#include "core/zmq_transport.h"
#include "proto/codec.h"
#include "proto/control.pb.h"
#include "proto/relay.pb.h"

namespace laminar::launch {

RoleProbe::RoleProbe(std::string manager_endpoint, std::string relay_endpoint)
    : endpoints_{std::move(manager_endpoint), std::move(relay_endpoint)},
      last_{SteadyNowMs(), SteadyNowMs()},
      thread_([this] { Loop(); }) {}

RoleProbe::~RoleProbe() {
  stop_ = true;
  thread_.join();
}

void RoleProbe::Loop() {
  proto::ManagerRequest manager_ping;
  manager_ping.mutable_ping();
  manager_ping.mutable_header()->set_sender("supervisor");
  proto::RelayRequest relay_ping;
  relay_ping.mutable_ping();
  relay_ping.mutable_header()->set_sender("supervisor");
  const std::string pings[2] = {proto::Encode(manager_ping), proto::Encode(relay_ping)};
  std::unique_ptr<ZmqRequestClient> clients[2];
  constexpr int kCallTimeoutMs = 1000, kIntervalMs = 500, kSliceMs = 50;
  while (!stop_) {
    for (int i = 0; i < 2 && !stop_; ++i) {
      if (endpoints_[i].empty()) continue;
      if (!clients[i]) clients[i] = std::make_unique<ZmqRequestClient>(endpoints_[i]);
      if (clients[i]->Call(pings[i], kCallTimeoutMs).ok()) last_[i] = SteadyNowMs();
    }
    for (int slept = 0; slept < kIntervalMs && !stop_; slept += kSliceMs) {
      std::this_thread::sleep_for(std::chrono::milliseconds(kSliceMs));
    }
  }
}

double HangTimeoutS(double heartbeat_timeout_s) {
  return std::clamp(2 * heartbeat_timeout_s, 4.0, 10.0);
}

bool ProcessStopped(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');  // the command name may hold spaces and parentheses
  if (paren == std::string::npos || paren + 2 >= text.size()) return false;
  const char state = text[paren + 2];
  return state == 'T' || state == 't';
}

}  // namespace laminar::launch
