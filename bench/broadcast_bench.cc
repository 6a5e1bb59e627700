// Broadcast and publish benchmarks of the relay tier, with real relay processes.
#include "bench/broadcast_bench.h"

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "core/logging.h"
#include "core/process.h"
#include "core/zmq_transport.h"
#include "proto/codec.h"
#include "relay/publisher.h"
#include "relay/relay.h"
#include "relay/relay_client.h"

namespace laminar::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Spawned {
  Process process;
  std::string control;
};

StatusOr<Spawned> SpawnRelay(const BroadcastConfig& c, const std::string& id,
                             const std::string& master, const std::string& topology) {
  std::vector<std::string> argv = {
      c.laminar_binary, "relay",     "--id",         id,
      "--transport",    c.transport, "--shm-prefix", "lb" + std::to_string(getpid()) + "-" + id};
  if (master.empty()) {
    argv.insert(argv.end(), {"--topology", topology});  // the master routes; relays follow
  } else {
    argv.insert(argv.end(), {"--master", master});
  }
  Spawned s;
  const std::string log =
      c.log_dir.empty() ? "/dev/null" : c.log_dir + "/" + topology + "-" + id + ".log";
  LAMINAR_ASSIGN_OR_RETURN(s.process, Process::Spawn(argv, log));
  LAMINAR_ASSIGN_OR_RETURN(std::string line, s.process.ReadLine(20000), "relay " + id);
  auto info = nlohmann::json::parse(line, nullptr, false);
  if (!info.is_object() || !info.contains("control")) {
    return InternalError("relay " + id + " printed '" + line + "'");
  }
  s.control = info["control"];
  return s;
}

// Relay id -> newest complete version, as the master knows it.
std::map<std::string, int64_t> Completions(ZmqRequestClient& master) {
  proto::RelayRequest q;
  q.mutable_chain();
  std::map<std::string, int64_t> out;
  auto bytes = master.Call(proto::Encode(q), 2000);
  if (!bytes.ok()) return out;
  auto reply = proto::Decode<proto::RelayReply>(*bytes, "master");
  if (!reply.ok()) return out;
  for (const auto& c : reply->completions()) out[c.relay_id()] = c.version();
  return out;
}

// Polls the master every `poll` until each relay of `ids` holds `version`; false at `deadline`.
bool AllHold(ZmqRequestClient& master, const std::vector<std::string>& ids, int64_t version,
             Clock::time_point deadline, std::chrono::milliseconds poll) {
  while (true) {
    auto done = Completions(master);
    if (std::all_of(ids.begin(), ids.end(),
                    [&](const std::string& id) { return done.count(id) && done[id] == version; })) {
      return true;
    }
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(poll);
  }
}

struct Stats {
  double median = 0;
  double spread = 0;
  double cpu_s = 0;  // CPU seconds of every process involved, per repetition
};

// User + system CPU seconds of this process (RUSAGE_SELF) or its reaped children.
double CpuSeconds(int who) {
  rusage u{};
  getrusage(who, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

Stats Summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.back() - v.front()};
}

// The version a test publishes: `bytes` bytes, one byte in each page set (so a copy touches every
// page), named "weights".
std::vector<relay::TensorBytes> VersionOf(uint64_t bytes, std::vector<uint8_t>* data) {
  data->assign(bytes, 0);
  for (size_t i = 0; i < data->size(); i += 4096) (*data)[i] = static_cast<uint8_t>(i >> 12);
  return {{"weights", DType::kU8, {static_cast<int64_t>(bytes)}, *data}};
}

// Seconds on CLOCK_MONOTONIC (steady_clock), which all processes of the machine share.
double MonotonicSeconds() {
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

// The machine's busy and total jiffies so far, from /proc/stat's first line.
std::pair<double, double> CpuJiffies() {
  std::ifstream in("/proc/stat");
  std::string cpu;
  in >> cpu;
  // user nice system idle iowait irq softirq steal: busy is what ran here (not idle, iowait, or
  // steal, the time the hypervisor gave to other machines).
  double busy = 0, total = 0, v = 0;
  for (int field = 0; field < 8 && in >> v; ++field) {
    if (field == 7) continue;
    total += v;
    if (field != 3 && field != 4) busy += v;
  }
  return {busy, total};
}

// The relays in the master's chain (not the master itself); empty when it does not answer.
std::vector<std::string> ChainIds(ZmqRequestClient& master) {
  proto::RelayRequest q;
  q.mutable_chain();
  std::vector<std::string> ids;
  auto bytes = master.Call(proto::Encode(q), 2000);
  if (!bytes.ok()) return ids;
  auto reply = proto::Decode<proto::RelayReply>(*bytes, "master");
  if (!reply.ok()) return ids;
  for (const auto& r : reply->chain()) ids.push_back(r.id());
  return ids;
}

// Times `repeats` versions from publish to every relay (and the master) holding them.
StatusOr<Stats> TimeBroadcast(const BroadcastConfig& c, int relays, const std::string& topology,
                              const std::vector<relay::TensorBytes>& tensors) {
  const double cpu_start = CpuSeconds(RUSAGE_SELF) + CpuSeconds(RUSAGE_CHILDREN);
  LAMINAR_ASSIGN_OR_RETURN(Spawned master, SpawnRelay(c, "m", "", topology));
  std::vector<Spawned> spawned;
  std::vector<std::string> ids = {"m"};
  for (int i = 1; i <= relays; ++i) {
    ids.push_back("r" + std::to_string(i));
    LAMINAR_ASSIGN_OR_RETURN(Spawned r, SpawnRelay(c, ids.back(), master.control, topology));
    spawned.push_back(std::move(r));
  }
  relay::PublisherOptions po;
  po.master_endpoint = master.control;
  po.bulk_kind = c.transport;
  po.chunk_bytes = c.chunk_bytes;
  LAMINAR_ASSIGN_OR_RETURN(auto publisher, relay::Publisher::Create(std::move(po)));
  ZmqRequestClient query(master.control);
  std::vector<double> times;
  for (int rep = 1; rep <= c.repeats; ++rep) {
    LAMINAR_RETURN_IF_ERROR(publisher->Publish(rep, tensors).status());
    const auto start = Clock::now();
    if (!AllHold(query, ids, rep, start + std::chrono::seconds(60), std::chrono::milliseconds(2))) {
      return DeadlineExceededError("broadcast to " + std::to_string(relays) + " relays (" +
                                   topology + ") did not finish within 60 s");
    }
    times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  publisher.reset();
  for (auto& s : spawned) s.process.Signal(SIGTERM);
  master.process.Signal(SIGTERM);
  for (auto& s : spawned) s.process.Wait(10000).status().IgnoreError();
  master.process.Wait(10000).status().IgnoreError();
  Stats stats = Summarize(times);
  stats.cpu_s = (CpuSeconds(RUSAGE_SELF) + CpuSeconds(RUSAGE_CHILDREN) - cpu_start) / c.repeats;
  return stats;
}

}  // namespace

StatusOr<std::vector<BroadcastRow>> BenchBroadcast(const BroadcastConfig& c) {
  if (c.repeats < 1) return InvalidArgumentError("repeats must be at least 1");
  std::vector<uint8_t> data;
  const std::vector<relay::TensorBytes> tensors = VersionOf(c.bytes, &data);
  std::vector<BroadcastRow> rows;
  LAMINAR_ASSIGN_OR_RETURN(Stats p2p, TimeBroadcast(c, 0, "chain", tensors), "p2p");
  rows.push_back({c.transport, "p2p", 0, p2p.median, p2p.spread, 1.0, p2p.cpu_s});
  for (int n : c.relay_counts) {
    for (const char* topology : {"chain", "star"}) {
      LAMINAR_ASSIGN_OR_RETURN(Stats s, TimeBroadcast(c, n, topology, tensors),
                               std::string(topology) + " to " + std::to_string(n));
      rows.push_back(
          {c.transport, topology, n, s.median, s.spread, s.median / p2p.median, s.cpu_s});
    }
  }
  return rows;
}

StatusOr<HostsBroadcastRow> BenchBroadcastAcrossHosts(const HostsBroadcastConfig& c) {
  if (c.repeats < 1) return InvalidArgumentError("repeats must be at least 1");
  if (c.relays < 1) return InvalidArgumentError("relays must be at least 1");
  const auto deadline = std::chrono::seconds(c.timeout_s);
  ZmqRequestClient query(c.master);
  std::vector<std::string> ids;
  for (const auto start = Clock::now(); static_cast<int>(ids.size()) < c.relays;) {
    if (Clock::now() - start > deadline) {
      return DeadlineExceededError("the master relay at " + c.master + " has " +
                                   std::to_string(ids.size()) + " relays in its chain, not " +
                                   std::to_string(c.relays) + ", after " +
                                   std::to_string(c.timeout_s) + " s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ids = ChainIds(query);
  }
  relay::PublisherOptions po;
  po.master_endpoint = c.master;
  po.bulk_kind = c.transport;
  po.chunk_bytes = c.chunk_bytes;
  po.connect_timeout_ms = c.timeout_s * 1000;
  if (!c.host.empty()) po.host = c.host;
  LAMINAR_ASSIGN_OR_RETURN(auto publisher, relay::Publisher::Create(std::move(po)));
  std::vector<uint8_t> data;
  const std::vector<relay::TensorBytes> tensors = VersionOf(c.bytes, &data);
  std::vector<double> times, published_at, busy;
  for (int rep = 1; rep <= c.repeats; ++rep) {
    LAMINAR_RETURN_IF_ERROR(publisher->Publish(rep, tensors).status());
    const auto start = Clock::now();
    published_at.push_back(MonotonicSeconds());
    const auto [busy0, total0] = CpuJiffies();
    if (!AllHold(query, ids, rep, start + deadline, std::chrono::milliseconds(10))) {
      return DeadlineExceededError("version " + std::to_string(rep) + " did not reach all " +
                                   std::to_string(c.relays) + " relays within " +
                                   std::to_string(c.timeout_s) + " s");
    }
    times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    const auto [busy1, total1] = CpuJiffies();
    if (total1 > total0) {
      busy.push_back((busy1 - busy0) / (total1 - total0) * std::thread::hardware_concurrency());
    }
  }
  HostsBroadcastRow row;
  row.relays = c.relays;
  const Stats t = Summarize(times);
  row.median_s = t.median;
  row.spread_s = t.spread;
  if (c.link_bits_per_s > 0) {
    row.link_s = static_cast<double>(c.bytes) * 8 / c.link_bits_per_s;
    row.ratio_to_link = row.median_s / row.link_s;
  }
  if (!busy.empty()) row.busy_cores = Summarize(busy).median;
  // The rollouts' pulls: each log lists every version once its rollout holds it.
  std::vector<double> pulls;
  for (const std::string& log : c.pull_logs) {
    std::map<int64_t, nlohmann::json> seen;
    for (const auto start = Clock::now(); !seen.count(c.repeats);) {
      if (Clock::now() - start > deadline) {
        return DeadlineExceededError("the rollout's pull log " + log + " lists no version " +
                                     std::to_string(c.repeats) + " after " +
                                     std::to_string(c.timeout_s) + " s");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      std::ifstream in(log);
      for (std::string line; std::getline(in, line);) {
        auto j = nlohmann::json::parse(line, nullptr, false);
        if (j.is_object() && j.contains("version") && j["version"].is_number_integer()) {
          seen[j["version"].get<int64_t>()] = j;
        }
      }
    }
    for (const auto& [version, j] : seen) {
      if (version < 1 || version > c.repeats) continue;
      const double pulled = j.value("pulled_s", 0.0);
      pulls.push_back(pulled - j.value("seen_s", 0.0));
      row.held_max_s = std::max(row.held_max_s, pulled - published_at[version - 1]);
    }
  }
  row.pulls = static_cast<int>(pulls.size());
  if (!pulls.empty()) {
    row.pull_median_s = Summarize(pulls).median;
    row.pull_max_s = *std::max_element(pulls.begin(), pulls.end());
  }
  return row;
}

Status RunPuller(const PullConfig& c) {
  relay::RelayClientOptions o;
  o.id = "bench-pull";
  o.relays = {c.relay};
  o.bulk_kind = c.transport;
  if (!c.host.empty()) o.host = c.host;
  LAMINAR_ASSIGN_OR_RETURN(auto client, relay::RelayClient::Create(std::move(o)));
  std::ofstream out(c.out, std::ios::app);
  if (!out) return InvalidArgumentError("cannot write the pull log " + c.out);
  const auto start = Clock::now();
  int64_t have = -1;
  while (have < c.versions) {
    if (Clock::now() - start > std::chrono::seconds(c.timeout_s)) {
      return DeadlineExceededError("no version " + std::to_string(c.versions) + " from " + c.relay +
                                   " in " + std::to_string(c.timeout_s) +
                                   " s (the newest pulled: " + std::to_string(have) + ")");
    }
    auto latest = client->LatestVersion();
    if (!latest.ok() || *latest <= have) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    const double seen = MonotonicSeconds();
    auto version = client->PullLatest(have);
    if (!version.ok()) {
      // A relay that answered a moment ago and now refuses (busy, or gone): ask again.
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    const double held = MonotonicSeconds();
    have = (*version)->version();
    out << nlohmann::json({{"version", have},
                           {"seen_s", seen},
                           {"pulled_s", held},
                           {"source", (*version)->source()},
                           {"bytes", (*version)->data().size()}})
               .dump()
        << std::endl;
  }
  return OkStatus();
}

StatusOr<PublishStall> BenchPublishStall(const std::vector<relay::TensorBytes>& tensors,
                                         const std::string& transport, int repeats) {
  if (repeats < 1) return InvalidArgumentError("repeats must be at least 1");
  relay::RelayOptions mo;
  mo.id = "bench-master";
  mo.bulk_kind = transport;
  LAMINAR_ASSIGN_OR_RETURN(auto master, relay::Relay::Start(std::move(mo)));
  relay::PublisherOptions po;
  po.master_endpoint = master->info().control_endpoint();
  po.bulk_kind = transport;
  LAMINAR_ASSIGN_OR_RETURN(auto publisher, relay::Publisher::Create(std::move(po)));
  std::vector<double> stalls, sends;
  PublishStall out;
  for (int rep = 1; rep <= repeats; ++rep) {
    LAMINAR_ASSIGN_OR_RETURN(double stall, publisher->Publish(rep, tensors));
    const auto start = Clock::now();
    while (master->latest_complete_version() != rep) {
      if (Clock::now() - start > std::chrono::seconds(60)) {
        return DeadlineExceededError("publish did not reach the master within 60 s");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    sends.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    stalls.push_back(stall);
  }
  for (const auto& t : tensors) out.bytes += t.bytes.size();
  Stats s = Summarize(stalls);
  out.median_stall_s = s.median;
  out.spread_s = s.spread;
  out.send_s = Summarize(sends).median;
  return out;
}

}  // namespace laminar::bench
