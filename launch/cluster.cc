// The cluster plan and the coordinator; see cluster.h.
#include "launch/cluster.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include "core/host.h"
#include "core/logging.h"

namespace laminar::launch {
namespace {

constexpr int kProtocol = 1;
constexpr int kRetryMs = 100;         // between tries while waiting
constexpr int kCallTimeoutMs = 1000;  // one request's wait for a reply

std::string Key(const std::string& role, int rank) { return role + "/" + std::to_string(rank); }

}  // namespace

nlohmann::json ClusterPlan::ToJson() const {
  nlohmann::json roles_json = nlohmann::json::array();
  for (const ClusterRole& r : roles) {
    roles_json.push_back({{"role", r.role}, {"rank", r.rank}, {"node", r.node}});
  }
  return {{"nodes", num_nodes},
          {"coordinator_port", coordinator_port},
          {"connect_timeout_s", connect_timeout_s},
          {"roles", roles_json}};
}

std::string ClusterPlan::Fingerprint() const {
  // FNV-1a over the roles' layout: the same in every build, unlike std::hash.
  uint64_t h = 14695981039346656037ull;
  for (char c : ToJson()["roles"].dump()) {
    h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016" PRIx64, h);
  return buf;
}

StatusOr<ClusterPlan> ClusterPlanOf(const Config& r) {
  ClusterPlan p;
  p.num_nodes = static_cast<int>(r.GetInt("cluster.nodes"));
  p.coordinator_port = static_cast<int>(r.GetInt("cluster.coordinator_port"));
  p.connect_timeout_s = r.GetFloat("cluster.connect_timeout_s");
  p.stop_grace_s = r.GetFloat("cluster.stop_grace_s");
  const int64_t rollout_nodes_key = r.GetInt("cluster.rollout_nodes");
  if (rollout_nodes_key > p.num_nodes) {
    return InvalidArgumentError(
        "recipe cluster.rollout_nodes: " + std::to_string(rollout_nodes_key) +
        " is more than cluster.nodes " + std::to_string(p.num_nodes));
  }
  const int num_rollout_nodes = rollout_nodes_key == 0 ? p.num_nodes : int(rollout_nodes_key);
  const int64_t num_rollouts = r.GetInt("rollout.num_workers");
  if (num_rollouts < num_rollout_nodes) {
    return InvalidArgumentError(
        "recipe rollout.num_workers: " + std::to_string(num_rollouts) + " rollouts for " +
        std::to_string(num_rollout_nodes) +
        " rollout nodes; each rollout node runs at least one (raise rollout.num_workers or lower "
        "cluster.rollout_nodes)");
  }
  const int first_rollout_node = p.num_nodes - num_rollout_nodes;
  p.relay_of_node.assign(static_cast<size_t>(p.num_nodes), -1);
  p.relay_node.push_back(0);  // the master, beside the actor
  p.relay_of_node[0] = 0;
  for (int node = std::max(first_rollout_node, 1); node < p.num_nodes; ++node) {
    p.relay_of_node[static_cast<size_t>(node)] = static_cast<int>(p.relay_node.size());
    p.relay_node.push_back(node);
  }
  for (int64_t i = 0; i < num_rollouts; ++i) {
    p.rollout_node.push_back(first_rollout_node +
                             static_cast<int>(i * num_rollout_nodes / num_rollouts));
  }
  const int actor_ranks = static_cast<int>(r.GetInt("actor.world_size"));
  const int trainer_nodes = first_rollout_node > 0 ? first_rollout_node : p.num_nodes;
  for (int k = 0; k < actor_ranks; ++k) {
    p.actor_node.push_back(static_cast<int>(int64_t{k} * trainer_nodes / actor_ranks));
  }
  p.roles.push_back({"manager", 0, 0});
  p.roles.push_back({"relay", 0, 0});
  for (int k = 0; k < actor_ranks; ++k) {
    p.roles.push_back({"actor", k, p.actor_node[static_cast<size_t>(k)]});
  }
  for (size_t k = 1; k < p.relay_node.size(); ++k) {
    p.roles.push_back({"relay", static_cast<int>(k), p.relay_node[k]});
  }
  for (size_t i = 0; i < p.rollout_node.size(); ++i) {
    p.roles.push_back({"rollout", static_cast<int>(i), p.rollout_node[i]});
  }
  return p;
}

StatusOr<TcpAddress> ParseTcpAddress(std::string_view text) {
  auto bad = [&](const std::string& why) {
    return InvalidArgumentError("'" + std::string(text) + "': " + why +
                                " (expected tcp://HOST:PORT)");
  };
  constexpr std::string_view kScheme = "tcp://";
  if (text.substr(0, kScheme.size()) != kScheme) return bad("not a tcp:// endpoint");
  const std::string_view rest = text.substr(kScheme.size());
  const size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return bad("no host");
  TcpAddress a;
  a.host = std::string(rest.substr(0, colon));
  if (a.host == "*" || a.host.find_first_of("[]:/") != std::string::npos) {
    return bad("the host must be an IPv4 address or a name");
  }
  const std::string_view port = rest.substr(colon + 1);
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), a.port);
  if (ec != std::errc() || end != port.data() + port.size() || a.port < 1 || a.port > 65535) {
    return bad("the port must be a number in [1, 65535]");
  }
  return a;
}

bool IsLoopbackHost(std::string_view host) {
  return host == "localhost" || host.substr(0, 4) == "127.";
}

StatusOr<std::string> RouteAddress(const TcpAddress& to) {
  if (IsLoopbackHost(to.host)) return std::string("127.0.0.1");
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(to.host.c_str(), std::to_string(to.port).c_str(), &hints, &found);
  if (rc != 0 || found == nullptr) {
    return UnavailableError("cannot resolve " + to.host + ": " + gai_strerror(rc));
  }
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  Status st;
  sockaddr_in local{};
  socklen_t len = sizeof(local);
  if (fd < 0) {
    st = ErrnoError("socket", errno);
  } else if (connect(fd, found->ai_addr, found->ai_addrlen) != 0) {
    st = ErrnoError("no route to " + to.host, errno);
  } else if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) {
    st = ErrnoError("getsockname", errno);
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(found);
  LAMINAR_RETURN_IF_ERROR(st);
  char ip[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &local.sin_addr, ip, sizeof(ip));
  return std::string(ip);
}

std::string AdvertisedEndpoint(const std::string& bound, const std::string& host) {
  for (const std::string wildcard : {"tcp://0.0.0.0:", "tcp://*:"}) {
    if (bound.rfind(wildcard, 0) == 0) return "tcp://" + host + ":" + bound.substr(wildcard.size());
  }
  return bound;
}

// ---- CoordinatorServer ----

StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Start(
    const TcpAddress& address, std::string plan_fingerprint) {
  std::unique_ptr<CoordinatorServer> s(new CoordinatorServer());
  s->fingerprint_ = std::move(plan_fingerprint);
  const std::string bind = std::string("tcp://") +
                           (IsLoopbackHost(address.host) ? "127.0.0.1" : "0.0.0.0") + ":" +
                           std::to_string(address.port);
  CoordinatorServer* self = s.get();
  LAMINAR_ASSIGN_OR_RETURN(
      s->server_,
      ZmqReplyServer::Start(bind, [self](std::string_view request,
                                         std::string_view) { return self->Handle(request); }),
      "coordinator " + address.ToString());
  return s;
}

CoordinatorServer::~CoordinatorServer() {
  if (server_) server_->Stop();
}

void CoordinatorServer::Register(const std::string& role, int rank, nlohmann::json info) {
  std::lock_guard<std::mutex> lock(mu_);
  registry_[{role, rank}] = std::move(info);
}

std::optional<nlohmann::json> CoordinatorServer::Find(const std::string& role, int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = registry_.find({role, rank});
  if (it == registry_.end()) return std::nullopt;
  return it->second;
}

std::string CoordinatorServer::Handle(std::string_view request) {
  auto refuse = [](const std::string& error) {
    return nlohmann::json{{"ok", false}, {"error", error}}.dump();
  };
  const nlohmann::json q = nlohmann::json::parse(request, nullptr, false);
  if (!q.is_object() || !q.contains("op") || !q["op"].is_string()) {
    return refuse("the coordinator takes one JSON object with an \"op\"");
  }
  const std::string from = q.value("from", std::string("?"));
  if (q.value("protocol", 0) != kProtocol) {
    return refuse(from + " speaks coordinator protocol " + std::to_string(q.value("protocol", 0)) +
                  ", this coordinator " + std::to_string(kProtocol));
  }
  if (q.value("plan", std::string()) != fingerprint_) {
    return refuse(from + " has another cluster layout (plan " + q.value("plan", std::string()) +
                  ") than the manager serving this coordinator (plan " + fingerprint_ +
                  "): give every role the same recipe and overrides");
  }
  const std::string op = q["op"];
  const std::string role = q.value("role", std::string());
  const int rank = q.value("rank", -1);
  std::lock_guard<std::mutex> lock(mu_);
  nlohmann::json reply = {{"ok", true}, {"found", false}};
  if (op == "register") {
    if (role.empty() || rank < 0 || !q.contains("info") || !q["info"].is_object()) {
      return refuse(from + ": register needs a role, a rank >= 0 and an info object");
    }
    registry_[{role, rank}] = q["info"];
    reply["found"] = true;
  } else if (op == "lookup") {
    auto it = registry_.find({role, rank});
    if (it != registry_.end()) {
      reply["found"] = true;
      reply["info"] = it->second;
    }
  } else if (op != "ping") {
    return refuse(from + ": unknown op '" + op + "'");
  }
  nlohmann::json registered = nlohmann::json::array();
  for (const auto& [key, info] : registry_) registered.push_back(Key(key.first, key.second));
  reply["registered"] = registered;
  return reply.dump();
}

// ---- CoordinatorClient ----

CoordinatorClient::CoordinatorClient(TcpAddress coordinator, std::string plan_fingerprint,
                                     std::string from, double timeout_s,
                                     std::function<bool()> stopped)
    : coordinator_(std::move(coordinator)),
      fingerprint_(std::move(plan_fingerprint)),
      from_(std::move(from)),
      timeout_s_(timeout_s),
      stopped_(std::move(stopped)),
      client_(std::make_unique<ZmqRequestClient>(coordinator_.ToString())) {}

CoordinatorClient::~CoordinatorClient() = default;

StatusOr<nlohmann::json> CoordinatorClient::CallUntil(
    nlohmann::json request, const std::string& what,
    const std::function<bool(const nlohmann::json&)>& done) {
  request["protocol"] = kProtocol;
  request["plan"] = fingerprint_;
  request["from"] = from_;
  const std::string bytes = request.dump();
  const int64_t deadline_ms = SteadyNowMs() + static_cast<int64_t>(timeout_s_ * 1000);
  std::string last;  // why the last try did not succeed
  bool answered = false;
  while (true) {
    if (stopped_ && stopped_()) {
      return AbortedError("stopped by a signal while waiting for " + what);
    }
    const int64_t left_ms = deadline_ms - SteadyNowMs();
    if (left_ms <= 0) break;
    auto reply_bytes =
        client_->Call(bytes, static_cast<int>(std::clamp<int64_t>(left_ms, 1, kCallTimeoutMs)));
    if (reply_bytes.ok()) {
      answered = true;
      const nlohmann::json reply = nlohmann::json::parse(*reply_bytes, nullptr, false);
      if (!reply.is_object()) {
        return UnavailableError("the coordinator at " + coordinator_.ToString() +
                                " sent a reply that is not JSON");
      }
      if (!reply.value("ok", false)) {
        return FailedPreconditionError("the coordinator at " + coordinator_.ToString() +
                                       " refused " + from_ + ": " +
                                       reply.value("error", std::string("no reason given")));
      }
      if (done(reply)) return reply;
      std::string registered;
      for (const auto& r : reply.value("registered", nlohmann::json::array())) {
        registered += (registered.empty() ? "" : ", ") + r.get<std::string>();
      }
      last = "it has " + (registered.empty() ? std::string("nothing registered yet") : registered);
    } else {
      last = std::string(reply_bytes.status().message());
    }
    const int64_t left_after = deadline_ms - SteadyNowMs();
    if (left_after <= 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min<int64_t>(kRetryMs, left_after)));
  }
  char seconds[32];
  std::snprintf(seconds, sizeof(seconds), "%g", timeout_s_);
  if (!answered) {
    return UnavailableError(
        "no coordinator answered at " + coordinator_.ToString() + " within " + seconds +
        " s (cluster.connect_timeout_s) while " + from_ + " waited for " + what +
        "; is `laminar manager --coordinator` running there? (last error: " + last + ")");
  }
  return UnavailableError("the coordinator at " + coordinator_.ToString() + " gave " + from_ +
                          " no " + what + " within " + seconds +
                          " s (cluster.connect_timeout_s); " + last);
}

Status CoordinatorClient::WaitReady() {
  return CallUntil({{"op", "ping"}}, "the coordinator", [](const nlohmann::json&) { return true; })
      .status();
}

Status CoordinatorClient::Register(const std::string& role, int rank, nlohmann::json info) {
  return CallUntil({{"op", "register"}, {"role", role}, {"rank", rank}, {"info", std::move(info)}},
                   "its registration as " + Key(role, rank),
                   [](const nlohmann::json&) { return true; })
      .status();
}

StatusOr<nlohmann::json> CoordinatorClient::Lookup(const std::string& role, int rank) {
  LAMINAR_ASSIGN_OR_RETURN(
      nlohmann::json reply,
      CallUntil({{"op", "lookup"}, {"role", role}, {"rank", rank}}, Key(role, rank),
                [](const nlohmann::json& r) { return r.value("found", false); }));
  return reply["info"];
}

std::optional<nlohmann::json> CoordinatorClient::Peek(const std::string& role, int rank) {
  const nlohmann::json request = {{"op", "lookup"},        {"role", role},         {"rank", rank},
                                  {"protocol", kProtocol}, {"plan", fingerprint_}, {"from", from_}};
  auto reply_bytes = client_->Call(request.dump(), kCallTimeoutMs);
  if (!reply_bytes.ok()) return std::nullopt;
  const nlohmann::json reply = nlohmann::json::parse(*reply_bytes, nullptr, false);
  if (!reply.is_object() || !reply.value("ok", false) || !reply.value("found", false) ||
      !reply.contains("info")) {
    return std::nullopt;
  }
  return reply["info"];
}

namespace {

// The pid namespace's inode of process `pid` ("self" for this one); 0 when unknown.
uint64_t PidNamespace(const std::string& pid) {
  struct stat st {};
  if (stat(("/proc/" + pid + "/ns/pid").c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_ino);
}

// Process `pid`'s state letter and start time in clock ticks (fields 3 and 22 of
// /proc/PID/stat); nullopt when it does not exist.
std::optional<std::pair<char, uint64_t>> ProcessStat(const std::string& pid) {
  std::ifstream in("/proc/" + pid + "/stat");
  if (!in.is_open()) return std::nullopt;
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');  // the command name may hold spaces and parentheses
  if (paren == std::string::npos) return std::nullopt;
  std::istringstream rest(text.substr(paren + 1));
  char state = '?';
  rest >> state;
  std::string field;
  for (int i = 4; i < 22; ++i) rest >> field;  // up to the start time
  uint64_t start = 0;
  if (!(rest >> start)) return std::nullopt;
  return std::make_pair(state, start);
}

}  // namespace

nlohmann::json ProcessIdentity() {
  const auto stat = ProcessStat("self");
  return {{"host", Hostname()},
          {"pid", getpid()},
          {"pid_ns", PidNamespace("self")},
          {"start_ticks", stat ? stat->second : 0}};
}

void OutliveActor(const std::optional<nlohmann::json>& actor, double grace_s,
                  const std::string& who) {
  if (!actor || !actor->is_object() || grace_s <= 0) return;
  const nlohmann::json& info = *actor;
  auto number = [&info](const char* key) {
    return info.contains(key) && info[key].is_number_unsigned() ? info[key].get<uint64_t>() : 0;
  };
  const bool same_host =
      info.contains("host") && info["host"].is_string() && info["host"] == Hostname();
  if (!info.contains("pid") || !info["pid"].is_number_integer() || !same_host ||
      number("pid_ns") == 0 || number("pid_ns") != PidNamespace("self")) {
    return;  // not a process this one can see
  }
  const std::string pid = std::to_string(info["pid"].get<int64_t>());
  const uint64_t start = number("start_ticks");
  auto alive = [&] {
    const auto st = ProcessStat(pid);
    return st && st->second == start && st->first != 'Z' && st->first != 'X';
  };
  if (!alive()) return;
  LAMINAR_LOG(INFO, CLI) << who << ": stopping after the actor (pid " << pid
                         << "), which may be saving its checkpoint; waiting up to " << grace_s
                         << " s (cluster.stop_grace_s)";
  const int64_t deadline_ms = SteadyNowMs() + static_cast<int64_t>(grace_s * 1000);
  while (alive() && SteadyNowMs() < deadline_ms) {
    std::this_thread::sleep_for(std::chrono::milliseconds(kRetryMs));
  }
  if (alive()) {
    LAMINAR_LOG(WARN, CLI) << who << ": the actor (pid " << pid << ") still runs after " << grace_s
                           << " s (cluster.stop_grace_s); stopping anyway";
  }
}

StatusOr<std::unique_ptr<CoordinatorClient>> JoinCluster(const ClusterPlan& plan,
                                                         const std::string& role, int rank,
                                                         const std::string& coordinator,
                                                         std::function<bool()> stopped) {
  const auto ranks = std::count_if(plan.roles.begin(), plan.roles.end(),
                                   [&](const ClusterRole& r) { return r.role == role; });
  if (rank < 0 || rank >= ranks) {
    std::string why = role == "rollout" ? " (rollout.num_workers)"
                      : role == "relay" ? " (one per rollout node besides the head: cluster.*)"
                                        : "";
    return InvalidArgumentError(
        "--rank " + std::to_string(rank) + ": the recipe's cluster plan has " +
        std::to_string(ranks) + " " + role + " rank" +
        (ranks == 1 ? " (0)" : "s (0-" + std::to_string(ranks - 1) + ")") + why);
  }
  LAMINAR_ASSIGN_OR_RETURN(TcpAddress address, ParseTcpAddress(coordinator), "--coordinator");
  return std::make_unique<CoordinatorClient>(address, plan.Fingerprint(), Key(role, rank),
                                             plan.connect_timeout_s, std::move(stopped));
}

std::function<bool()> StopSignalPending(sigset_t signals) {
  return [signals] {
    const timespec zero = {.tv_sec = 0, .tv_nsec = 0};
    return sigtimedwait(&signals, nullptr, &zero) > 0;
  };
}

}  // namespace laminar::launch
