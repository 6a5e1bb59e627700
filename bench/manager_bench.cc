#include "bench/manager_bench.h"

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/zmq_transport.h"
#include "proto/codec.h"
#include "proto/control.pb.h"
#include "rollout/manager/manager_server.h"

namespace laminar::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

Percentiles PercentilesOf(std::vector<double> v) {
  Percentiles p;
  if (v.empty()) return p;
  std::ranges::sort(v);
  auto at = [&](double q) {
    return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
  };
  p.p50_ms = at(0.5);
  p.p99_ms = at(0.99);
  p.max_ms = v.back();
  return p;
}

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

// One simulated rollout: the group it holds (if any) and its heartbeats since it took it.
struct SimRollout {
  std::string id;
  std::string host;
  std::optional<proto::PromptGroup> group;
  int heartbeats_on_group = 0;
  double tokens = 0;  // rollout/tokens_forwarded
};

// What one client thread measured.
struct ClientLog {
  std::vector<double> heartbeat_ms, echo_ms, late_ms;
  int64_t work_requests = 0, trajectories = 0;
  Status error = OkStatus();
};

class Client {
 public:
  Client(const ManagerLoadConfig& config, const std::string& manager, const std::string& echo)
      : config_(config), manager_(manager), echo_(echo) {}

  StatusOr<proto::ManagerReply> Call(const std::string& sender, proto::ManagerRequest request,
                                     double* ms = nullptr) {
    request.mutable_header()->set_sender(sender);
    const std::string bytes = proto::Encode(request);
    const auto start = Clock::now();
    LAMINAR_ASSIGN_OR_RETURN(std::string reply_bytes, manager_.Call(bytes, 10000, 1));
    if (ms) *ms = Ms(Clock::now() - start);
    LAMINAR_ASSIGN_OR_RETURN(proto::ManagerReply reply,
                             proto::Decode<proto::ManagerReply>(reply_bytes, "manager"));
    if (!reply.error().empty()) {
      return InternalError("the manager refused a request from " + sender + ": " + reply.error());
    }
    return reply;
  }

  Status TakeWork(SimRollout& r, ClientLog& log) {
    proto::ManagerRequest req;
    proto::WorkRequest* w = req.mutable_work();
    w->set_rollout_id(r.id);
    w->set_version(0);
    w->set_max_groups(1);
    LAMINAR_ASSIGN_OR_RETURN(proto::ManagerReply reply, Call(r.id, std::move(req)));
    ++log.work_requests;
    r.heartbeats_on_group = 0;
    r.group.reset();
    if (reply.work().groups_size() > 0) r.group = reply.work().groups(0);
    return OkStatus();
  }

  Status Finish(SimRollout& r, ClientLog& log) {
    proto::ManagerRequest req;
    const proto::PromptGroup& g = *r.group;
    for (int i = 0; i < g.num_samples(); ++i) {
      proto::Trajectory* t = req.mutable_trajectories()->add_trajectories();
      t->set_prompt_id(g.prompt_id());
      t->set_sample_index(i);
      *t->mutable_prompt_ids() = g.prompt_ids();
      for (int32_t id : {5, 6 + i, 7}) t->add_response_ids(id);
      for (int k = 0; k < 3; ++k) t->add_logprobs(-2.0f);
      t->set_version(0);
      t->set_finish_reason(proto::FINISH_REASON_STOP);
      t->set_reward(static_cast<float>(i % 2));
      t->set_rollout_id(r.id);
    }
    LAMINAR_RETURN_IF_ERROR(Call(r.id, std::move(req)).status());
    log.trajectories += g.num_samples();
    return OkStatus();
  }

  Status Heartbeat(SimRollout& r, ClientLog& log) {
    proto::ManagerRequest req;
    proto::Heartbeat* h = req.mutable_heartbeat();
    h->set_role("rollout");
    h->set_id(r.id);
    h->set_version(0);
    h->set_host(r.host);
    const int n = r.group ? r.group->num_samples() : 0;
    r.tokens += 16.0 * n;
    (*h->mutable_counters())["rollout/tokens_forwarded"] = r.tokens;
    h->set_running(n);
    h->set_kv_block_size(16);
    h->set_kv_blocks_capacity(64);
    h->set_kv_blocks_used(2 * n);
    h->set_kv_blocks_used_previous(2 * n);
    for (int i = 0; i < n; ++i) {
      proto::RunningSample* s = h->add_running_samples();
      s->set_prompt_id(r.group->prompt_id());
      s->set_sample_index(i);
      s->set_kv_tokens(32);
    }
    double ms = 0;
    LAMINAR_RETURN_IF_ERROR(Call(r.id, std::move(req), &ms).status());
    log.heartbeat_ms.push_back(ms);
    ++r.heartbeats_on_group;
    return OkStatus();
  }

  Status Echo(ClientLog& log) {
    const auto start = Clock::now();
    LAMINAR_RETURN_IF_ERROR(echo_.Call("echo", 10000, 1).status());
    log.echo_ms.push_back(Ms(Clock::now() - start));
    return OkStatus();
  }

  // Drives `rollouts` until `end`: each heartbeats every interval (staggered over it), finishing
  // its group after heartbeats_per_group heartbeats and taking the next.
  ClientLog Drive(std::vector<SimRollout>& rollouts, Clock::time_point start,
                  Clock::time_point end) {
    ClientLog log;
    auto fail = [&](Status s) {
      log.error = std::move(s);
      return log;
    };
    for (SimRollout& r : rollouts) {
      if (Status s = TakeWork(r, log); !s.ok()) return fail(s);
    }
    const auto interval = std::chrono::milliseconds(config_.heartbeat_interval_ms);
    const auto n = static_cast<int64_t>(rollouts.size());
    for (int64_t k = 0;; ++k) {
      const int64_t cycle = k / n, j = k % n;
      const Clock::time_point due = start + cycle * interval + interval * j / n;
      if (due >= end || Clock::now() >= end) break;  // a manager that fell behind: stop at end
      std::this_thread::sleep_until(due);
      log.late_ms.push_back(std::max(0.0, Ms(Clock::now() - due)));
      SimRollout& r = rollouts[static_cast<size_t>(j)];
      if (r.group && r.heartbeats_on_group >= config_.heartbeats_per_group) {
        if (Status s = Finish(r, log); !s.ok()) return fail(s);
      }
      if (!r.group || r.heartbeats_on_group >= config_.heartbeats_per_group) {
        if (Status s = TakeWork(r, log); !s.ok()) return fail(s);
      }
      if (Status s = Heartbeat(r, log); !s.ok()) return fail(s);
      if (k % 10 == 0) {
        if (Status s = Echo(log); !s.ok()) return fail(s);
      }
    }
    return log;
  }

 private:
  const ManagerLoadConfig& config_;
  ZmqRequestClient manager_;
  ZmqRequestClient echo_;
};

Status Validate(const ManagerLoadConfig& c) {
  if (c.rollouts < 1) return InvalidArgumentError("manager load: rollouts must be >= 1");
  if (c.client_threads < 1 || c.client_threads > c.rollouts) {
    return InvalidArgumentError("manager load: client_threads must be in [1, rollouts], got " +
                                std::to_string(c.client_threads) + " for " +
                                std::to_string(c.rollouts) + " rollouts");
  }
  if (c.seconds <= 0) return InvalidArgumentError("manager load: seconds must be > 0");
  if (c.heartbeat_interval_ms < 1) {
    return InvalidArgumentError("manager load: heartbeat_interval_ms must be >= 1");
  }
  if (c.samples < 1 || c.heartbeats_per_group < 1) {
    return InvalidArgumentError("manager load: samples and heartbeats_per_group must be >= 1");
  }
  return OkStatus();
}

}  // namespace

StatusOr<ManagerLoadResult> BenchManagerLoad(const ManagerLoadConfig& config) {
  LAMINAR_RETURN_IF_ERROR(Validate(config));
  std::vector<manager::PromptRow> rows;
  for (int i = 0; i < std::max(64, 2 * config.rollouts); ++i) {
    rows.push_back({.id = std::to_string(i),
                    .prompt_ids = {1, 10 + i % 100, 20},
                    .ground_truth = "",
                    .data_source = "load",
                    .extra_info_json = "",
                    .source = "row " + std::to_string(i)});
  }
  LAMINAR_ASSIGN_OR_RETURN(manager::PromptDataset dataset,
                           manager::MakePromptDataset("load", std::move(rows)));
  manager::ManagerConfig mc;
  mc.num_samples = config.samples;
  mc.sampling.set_max_tokens(16);
  manager::ManagerServerOptions so;
  so.heartbeat_timeout_s = config.heartbeat_timeout_s;
  so.repack.enabled = config.repack;
  LAMINAR_ASSIGN_OR_RETURN(
      std::unique_ptr<manager::ManagerServer> server,
      manager::ManagerServer::Start(
          std::make_shared<const manager::PromptDataset>(std::move(dataset)), mc, so));
  LAMINAR_ASSIGN_OR_RETURN(
      std::unique_ptr<ZmqReplyServer> echo,
      ZmqReplyServer::Start("tcp://127.0.0.1:*", [](std::string_view request, std::string_view) {
        return std::string(request);
      }));

  std::vector<std::vector<SimRollout>> shares(static_cast<size_t>(config.client_threads));
  for (int i = 0; i < config.rollouts; ++i) {
    SimRollout r;
    r.id = "rollout/" + std::to_string(i);
    r.host = "sim-" + std::to_string(i / 8);  // 8 rollouts a host
    shares[static_cast<size_t>(i % config.client_threads)].push_back(std::move(r));
  }
  std::vector<ClientLog> logs(shares.size());
  // Every client takes its rollouts' first groups before the measured window starts.
  const auto start = Clock::now() + std::chrono::milliseconds(500 + config.rollouts / 2);
  const auto end = start + std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double>(config.seconds));
  const double cpu0 = CpuSeconds();
  std::vector<std::thread> threads;
  for (size_t k = 0; k < shares.size(); ++k) {
    threads.emplace_back([&, k] {
      Client client(config, server->endpoint(), echo->endpoint());
      logs[k] = client.Drive(shares[k], start, end);
    });
  }
  for (auto& t : threads) t.join();
  const double cpu_s = CpuSeconds() - cpu0;
  const std::map<std::string, double> m = server->Metrics();
  server->Stop();
  echo->Stop();

  ManagerLoadResult out;
  std::vector<double> hb, ec, late;
  for (const ClientLog& log : logs) {
    LAMINAR_RETURN_IF_ERROR(log.error);
    hb.insert(hb.end(), log.heartbeat_ms.begin(), log.heartbeat_ms.end());
    ec.insert(ec.end(), log.echo_ms.begin(), log.echo_ms.end());
    late.insert(late.end(), log.late_ms.begin(), log.late_ms.end());
    out.work_requests += log.work_requests;
    out.trajectories += log.trajectories;
  }
  out.heartbeats = static_cast<int64_t>(hb.size());
  out.seconds = config.seconds;
  out.offered_heartbeats_per_s = config.rollouts * 1000.0 / config.heartbeat_interval_ms;
  out.heartbeats_per_s = static_cast<double>(out.heartbeats) / config.seconds;
  out.heartbeat = PercentilesOf(std::move(hb));
  out.echo = PercentilesOf(std::move(ec));
  out.lateness = PercentilesOf(std::move(late));
  out.manager_cpu_s = cpu_s;
  auto metric = [&](const std::string& name) {
    auto it = m.find(name);
    return it == m.end() ? int64_t{0} : static_cast<int64_t>(it->second);
  };
  out.rollouts_alive = metric("manager/rollouts_alive");
  out.rollouts_dead = metric("manager/rollouts_dead");
  out.groups_completed = metric("manager/completed");
  out.groups_reissued = metric("manager/reissued");
  out.repack_rounds = metric("repack/rounds");
  for (const auto& [name, value] : m) {
    if (name.starts_with("manager/dropped/"))
      out.trajectories_dropped += static_cast<int64_t>(value);
  }
  return out;
}

}  // namespace laminar::bench
