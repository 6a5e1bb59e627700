// The master relay's chain: routing a version down the chain (or star), and the monitor that pings
// every relay, drops dead ones, and sends the version again to whoever lacks it. See relay.h.
#include <algorithm>
#include <chrono>
#include <future>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/host.h"
#include "core/logging.h"
#include "proto/codec.h"
#include "relay/relay.h"
#include "relay/relay_internal.h"

namespace laminar::relay {

void Relay::RouteFromChainLocked(const std::shared_ptr<Slot>& slot,
                                 const std::set<std::string>& only_ids) {
  slot->epoch = ++epoch_;
  slot->targets.clear();
  MutexLock chain_lock(&chain_mu_);
  std::vector<std::string> route;
  for (const auto& m : chain_) {
    if (!only_ids.empty() && !only_ids.count(m->info.id())) continue;
    route.push_back(m->info.bulk_address());
    m->needs_version = false;
    m->last_progress_ms = SteadyNowMs();
  }
  if (options_.topology == Topology::kStar) {
    for (const auto& dest : route) slot->targets.push_back({dest, {}});
  } else if (!route.empty()) {
    slot->targets.push_back({route[0], {route.begin() + 1, route.end()}});
  }
}

void Relay::MonitorLoop() {
  std::map<std::string, std::unique_ptr<ZmqRequestClient>> clients;  // by relay id
  while (!stop_) {
    {
      MutexLock lock(&stop_mu_);
      if (!stop_) stop_cv_.WaitFor(&stop_mu_, std::chrono::milliseconds(options_.ping_interval_ms));
    }
    if (stop_) return;
    std::vector<proto::RelayInfo> members;
    {
      MutexLock lock(&chain_mu_);
      for (const auto& m : chain_) members.push_back(m->info);
    }
    const std::map<std::string, StatusOr<proto::RelayReply>> replies =
        PingMembers(members, clients);
    MutexLock lock(&mu_);
    std::shared_ptr<Slot> target = inflight_ ? inflight_ : newest_;
    std::set<std::string> route_ids;
    {
      MutexLock chain_lock(&chain_mu_);
      const bool removed = UpdateMembersLocked(replies, clients);
      if (!target) continue;
      route_ids = RerouteLocked(*target, removed);
    }
    if (route_ids.empty()) continue;
    RouteFromChainLocked(target, route_ids);
    StartForwardLocked(target);
  }
}

std::map<std::string, StatusOr<proto::RelayReply>> Relay::PingMembers(
    const std::vector<proto::RelayInfo>& members,
    std::map<std::string, std::unique_ptr<ZmqRequestClient>>& clients) {
  // Ping outside the locks and all at once (one socket each): a round costs one
  // ping_timeout_ms however many relays are slow or dead.
  proto::RelayRequest ping;
  ping.mutable_ping();
  ping.mutable_header()->set_sender("relay/" + options_.id);
  const std::string ping_bytes = proto::Encode(ping);
  std::vector<std::future<StatusOr<proto::RelayReply>>> pending;
  for (const auto& info : members) {
    auto& client = clients[info.id() + "@" + info.control_endpoint()];
    if (!client) client = std::make_unique<ZmqRequestClient>(info.control_endpoint());
    pending.push_back(
        std::async(std::launch::async,
                   [this, &ping_bytes, &info, c = client.get()]() -> StatusOr<proto::RelayReply> {
                     LAMINAR_ASSIGN_OR_RETURN(std::string bytes,
                                              c->Call(ping_bytes, options_.ping_timeout_ms, 1));
                     return proto::Decode<proto::RelayReply>(bytes, info.id());
                   }));
  }
  std::map<std::string, StatusOr<proto::RelayReply>> replies;
  for (size_t i = 0; i < members.size(); ++i) replies.emplace(members[i].id(), pending[i].get());
  return replies;
}

bool Relay::UpdateMembersLocked(const std::map<std::string, StatusOr<proto::RelayReply>>& replies,
                                std::map<std::string, std::unique_ptr<ZmqRequestClient>>& clients) {
  const int64_t now = SteadyNowMs();
  bool removed = false;
  for (auto& m : chain_) {
    auto it = replies.find(m->info.id());
    if (it == replies.end()) continue;  // joined during the pings
    if (!it->second.ok()) {
      ++m->failures;
      continue;
    }
    const proto::RelayReply& r = *it->second;
    m->failures = 0;
    if (r.latest_complete_version() > m->complete_version ||
        r.inflight_version() != m->inflight_version || r.inflight_chunks() != m->inflight_chunks) {
      m->last_progress_ms = now;
    }
    m->complete_version = std::max(m->complete_version, r.latest_complete_version());
    m->inflight_version = r.inflight_version();
    m->inflight_chunks = r.inflight_chunks();
  }
  for (auto it = chain_.begin(); it != chain_.end();) {
    if ((*it)->failures >= options_.dead_after_failures) {
      LAMINAR_LOG(WARN, RELAY) << "relay " << (*it)->info.id() << " missed " << (*it)->failures
                               << " pings; dropped from the chain";
      clients.erase((*it)->info.id() + "@" + (*it)->info.control_endpoint());
      completions_.erase((*it)->info.id());
      it = chain_.erase(it);
      ++chain_rebuilds_;
      removed = true;
    } else {
      ++it;
    }
  }
  return removed || std::exchange(chain_changed_, false);
}

std::set<std::string> Relay::RerouteLocked(const Slot& target, bool removed) {
  const int64_t now = SteadyNowMs();
  std::set<std::string> lagging, stalled, fresh;
  for (const auto& m : chain_) {
    if (m->complete_version >= target.version()) continue;
    lagging.insert(m->info.id());
    if (now - m->last_progress_ms > options_.rebroadcast_after_ms) stalled.insert(m->info.id());
    if (m->needs_version) fresh.insert(m->info.id());
  }
  // A dead relay starves everyone after it, a stalled one lost something on the way: every
  // relay still lacking the version gets it again along the rebuilt chain. A relay that just
  // joined gets the newest version alone, when nothing else is on its way.
  std::set<std::string> route_ids;
  const char* why = "";
  if ((removed || !stalled.empty()) && !lagging.empty()) {
    route_ids = lagging;
    why = removed ? "chain rebuilt" : "stalled relays";
  } else if (!fresh.empty() && !inflight_) {
    route_ids = fresh;
    why = "new relays";
  }
  if (route_ids.empty()) return route_ids;
  if (removed) {
    std::string order;
    for (const auto& m : chain_) order += (order.empty() ? "" : " -> ") + m->info.id();
    LAMINAR_LOG(WARN, RELAY) << "chain is now: master -> " << order;
  }
  LAMINAR_LOG(INFO, RELAY) << "sending version " << target.version() << " again to "
                           << route_ids.size() << " relay(s) (" << why << ")";
  return route_ids;
}

}  // namespace laminar::relay
