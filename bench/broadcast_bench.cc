// Broadcast and publish benchmarks of the relay tier, with real relay processes.
#include "bench/broadcast_bench.h"

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/logging.h"
#include "core/process.h"
#include "core/zmq_transport.h"
#include "proto/codec.h"
#include "relay/publisher.h"
#include "relay/relay.h"

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
    while (true) {
      auto done = Completions(query);
      if (std::all_of(ids.begin(), ids.end(),
                      [&](const std::string& id) { return done.count(id) && done[id] == rep; })) {
        break;
      }
      if (Clock::now() - start > std::chrono::seconds(60)) {
        return DeadlineExceededError("broadcast to " + std::to_string(relays) + " relays (" +
                                     topology + ") did not finish within 60 s");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
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
  std::vector<uint8_t> data(c.bytes);
  for (size_t i = 0; i < data.size(); i += 4096) data[i] = static_cast<uint8_t>(i >> 12);
  std::vector<relay::TensorBytes> tensors = {
      {"weights", DType::kU8, {static_cast<int64_t>(c.bytes)}, data}};
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
