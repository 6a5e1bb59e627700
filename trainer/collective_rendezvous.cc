// The rendezvous store: requests are [op | u32 key length | key | value], replies are
// 'K' (ok), 'V' + value, 'N' (no such key) or 'E' + message.
#include "trainer/collective_rendezvous.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <map>
#include <random>
#include <thread>

#include "core/host.h"

namespace laminar::trainer {
namespace {

constexpr char kHello = 'H';  // key: rank; value: "WORLD_SIZE TOKEN"
constexpr char kSet = 'S';
constexpr char kGet = 'G';
constexpr char kList = 'L';  // reply 'V' + "0,1,3"

constexpr char kOk = 'K';
constexpr char kValue = 'V';
constexpr char kMissing = 'N';
constexpr char kError = 'E';

constexpr int kPollMinMs = 2;   // WaitGet polls this often at first,
constexpr int kPollMaxMs = 50;  // backing off to this

std::string Encode(char op, std::string_view key, std::string_view value) {
  std::string out;
  out.reserve(1 + 4 + key.size() + value.size());
  out.push_back(op);
  const auto n = static_cast<uint32_t>(key.size());
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out.append(key);
  out.append(value);
  return out;
}

bool Decode(std::string_view request, char* op, std::string_view* key, std::string_view* value) {
  if (request.size() < 5) return false;
  *op = request[0];
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i)
    n |= static_cast<uint32_t>(static_cast<uint8_t>(request[1 + i])) << (8 * i);
  if (request.size() - 5 < n) return false;
  *key = request.substr(5, n);
  *value = request.substr(5 + n);
  return true;
}

bool ParseInt(std::string_view s, int* out) {
  if (s.empty()) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

std::string JoinInts(const std::vector<int>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(v[i]);
  }
  return out;
}

}  // namespace

StatusOr<RendezvousAddress> ParseRendezvousAddress(std::string_view address) {
  const std::string quoted = "rendezvous address '" + std::string(address) + "'";
  constexpr std::string_view kScheme = "tcp://";
  if (!address.starts_with(kScheme)) {
    return InvalidArgumentError(quoted + ": expected tcp://HOST:PORT");
  }
  std::string_view rest = address.substr(kScheme.size());
  const size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos) {
    return InvalidArgumentError(quoted + ": no port (expected tcp://HOST:PORT)");
  }
  RendezvousAddress out;
  out.host = std::string(rest.substr(0, colon));
  if (out.host.empty() || out.host == "*") {
    return InvalidArgumentError(quoted + ": HOST must name rank 0's machine (not empty, not '*')");
  }
  if (out.host.find_first_of("[]:/") != std::string::npos) {
    return InvalidArgumentError(quoted + ": HOST must be a name or an IPv4 address");
  }
  if (!ParseInt(rest.substr(colon + 1), &out.port) || out.port < 1 || out.port > 65535) {
    return InvalidArgumentError(quoted + ": PORT must be a number in [1, 65535]");
  }
  return out;
}

StatusOr<std::string> LocalAddressToward(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(host.c_str(), "9", &hints, &found); rc != 0) {
    return UnavailableError("cannot resolve host '" + host + "': " + gai_strerror(rc));
  }
  Status last = UnavailableError("no address for host '" + host + "'");
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    const int fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    // A UDP connect only picks the route and source address; nothing is sent.
    const bool ok = connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
                    getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0;
    const int err = errno;
    close(fd);
    if (!ok) {
      last = ErrnoError("no route to host '" + host + "'", err);
      continue;
    }
    char text[INET6_ADDRSTRLEN] = {};
    const void* raw =
        local.ss_family == AF_INET
            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr)
            : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr);
    if (inet_ntop(local.ss_family, raw, text, sizeof(text)) == nullptr) continue;
    freeaddrinfo(found);
    return std::string(text);
  }
  freeaddrinfo(found);
  return last;
}

// ---------------------------------------------------------------------------------------------
// Server

struct RendezvousServer::State {
  int world_size = 0;
  std::map<int, std::string> joined;  // rank -> token of the process that joined as it
  std::map<std::string, std::string, std::less<>> values;

  std::string Handle(std::string_view request) {
    char op = 0;
    std::string_view key, value;
    if (!Decode(request, &op, &key, &value)) return std::string(1, kError) + "malformed request";
    switch (op) {
      case kHello:
        return HandleHello(key, value);
      case kSet:
        values[std::string(key)] = std::string(value);
        return std::string(1, kOk);
      case kGet: {
        auto it = values.find(key);
        if (it == values.end()) return std::string(1, kMissing);
        return kValue + it->second;
      }
      case kList: {
        std::vector<int> ranks;
        for (const auto& [rank, token] : joined) ranks.push_back(rank);
        std::string out(1, kValue);
        for (size_t i = 0; i < ranks.size(); ++i) {
          if (i > 0) out += ',';
          out += std::to_string(ranks[i]);
        }
        return out;
      }
      default:
        return std::string(1, kError) + "unknown request '" + op + "'";
    }
  }

  std::string HandleHello(std::string_view key, std::string_view value) {
    int rank = -1, their_world = 0;
    const size_t space = value.find(' ');
    if (!ParseInt(key, &rank) || space == std::string_view::npos ||
        !ParseInt(value.substr(0, space), &their_world)) {
      return std::string(1, kError) + "malformed hello";
    }
    if (their_world != world_size) {
      return std::string(1, kError) + "rank 0 serves a group of " + std::to_string(world_size) +
             " ranks but rank " + std::to_string(rank) + " expects " + std::to_string(their_world);
    }
    if (rank < 0 || rank >= world_size) {
      return std::string(1, kError) + "rank " + std::to_string(rank) + " is outside [0, " +
             std::to_string(world_size) + ")";
    }
    const std::string token(value.substr(space + 1));
    auto [it, inserted] = joined.emplace(rank, token);
    if (!inserted && it->second != token) {
      return std::string(1, kError) + "two processes joined as rank " + std::to_string(rank);
    }
    return std::string(1, kOk);
  }
};

StatusOr<std::unique_ptr<RendezvousServer>> RendezvousServer::Start(const std::string& address,
                                                                    int world_size) {
  std::unique_ptr<RendezvousServer> s(new RendezvousServer());
  s->state_ = std::make_unique<State>();
  s->state_->world_size = world_size;
  State* state = s->state_.get();
  LAMINAR_ASSIGN_OR_RETURN(
      s->server_,
      ZmqReplyServer::Start(address, [state](std::string_view request,
                                             std::string_view) { return state->Handle(request); }),
      "rendezvous server");
  return s;
}

RendezvousServer::~RendezvousServer() {
  if (server_) server_->Stop();  // before state_ goes: the handler uses it
}

// ---------------------------------------------------------------------------------------------
// Client

RendezvousClient::RendezvousClient(std::string address, int rank, int world_size,
                                   int64_t deadline_ms)
    : address_(std::move(address)),
      rank_(rank),
      world_size_(world_size),
      deadline_ms_(deadline_ms),
      client_(address_) {
  std::random_device rd;
  token_ = std::to_string(getpid()) + "-" + std::to_string(rd()) + std::to_string(rd());
}

int RendezvousClient::RemainingMs() const {
  return static_cast<int>(std::max<int64_t>(0, deadline_ms_ - SteadyNowMs()));
}

StatusOr<std::string> RendezvousClient::Call(char op, std::string_view key, std::string_view value,
                                             int timeout_ms) {
  if (timeout_ms <= 0) return DeadlineExceededError("rendezvous deadline passed");
  StatusOr<std::string> reply = client_.Call(Encode(op, key, value), timeout_ms);
  if (!reply.ok()) return reply.status();
  const std::string_view bytes = *reply;
  if (bytes.empty()) return InternalError("empty reply from rendezvous server " + address_);
  if (bytes.front() == kError) return InvalidArgumentError(std::string(bytes.substr(1)));
  return reply;
}

Status RendezvousClient::Hello() {
  auto reply = Call(kHello, std::to_string(rank_), std::to_string(world_size_) + " " + token_,
                    RemainingMs());
  if (reply.status().code() == StatusCode::kDeadlineExceeded) {
    return DeadlineExceededError(
        "rank 0 never answered: not started, a wrong address, or its group formed without this "
        "rank (" +
        reply.status().message() + ")");
  }
  return reply.status();
}

Status RendezvousClient::Set(const std::string& key, std::string_view value) {
  return Call(kSet, key, value, RemainingMs()).status();
}

StatusOr<std::string> RendezvousClient::WaitGet(const std::string& key) {
  int sleep_ms = kPollMinMs;
  while (true) {
    const int left = RemainingMs();
    if (left <= 0) break;
    auto reply = Call(kGet, key, "", left);
    if (!reply.ok()) {
      if (reply.status().code() == StatusCode::kDeadlineExceeded) break;
      return reply.status();
    }
    if ((*reply)[0] == kValue) return reply->substr(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(sleep_ms, RemainingMs())));
    sleep_ms = std::min(2 * sleep_ms, kPollMaxMs);
  }
  return DeadlineExceededError("key '" + key + "' was not published before the deadline");
}

StatusOr<std::vector<int>> RendezvousClient::JoinedRanks(int timeout_ms) {
  LAMINAR_ASSIGN_OR_RETURN(std::string reply, Call(kList, "", "", timeout_ms));
  std::vector<int> ranks;
  std::string_view rest = std::string_view(reply).substr(1);
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    int r = 0;
    if (!ParseInt(rest.substr(0, comma), &r)) return InternalError("malformed rank list");
    ranks.push_back(r);
    rest = comma == std::string_view::npos ? "" : rest.substr(comma + 1);
  }
  return ranks;
}

std::string RendezvousClient::MissingRanksNote() {
  constexpr int kListTimeoutMs = 500;  // the server is up if Hello got through; else give up fast
  auto joined = JoinedRanks(kListTimeoutMs);
  if (!joined.ok()) return "";
  std::vector<int> missing;
  for (int r = 0; r < world_size_; ++r) {
    if (!std::binary_search(joined->begin(), joined->end(), r)) missing.push_back(r);
  }
  if (missing.empty()) return " (every rank joined; one failed or left while connecting)";
  return " (ranks not joined by the deadline: " + JoinInts(missing) + ")";
}

StatusOr<RendezvousSession> JoinRendezvous(const std::string& address, int rank, int world_size,
                                           int timeout_ms) {
  const int64_t deadline_ms = SteadyNowMs() + timeout_ms;
  RendezvousSession session;
  if (rank == 0) {
    LAMINAR_ASSIGN_OR_RETURN(session.server, RendezvousServer::Start(address, world_size));
  }
  session.client = std::make_unique<RendezvousClient>(address, rank, world_size, deadline_ms);
  LAMINAR_RETURN_IF_ERROR(session.client->Hello());
  return session;
}

}  // namespace laminar::trainer
