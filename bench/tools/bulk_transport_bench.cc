// bulk_transport_bench: point-to-point throughput of the BulkTransport implementations (UCX
// against ZeroMQ, measured in the same run), between two threads of one process or two processes.
//   bulk_transport_bench [--total_mb 500] [--chunk_mb 4] [--reps 3] [--procs] [--kinds ucx,zmq]
// Each round sends total_mb in chunk_mb messages and waits for the receiver's ack; one warm-up
// round, then `reps` timed ones. Prints a table row and a JSON line per kind (GB/s median, min,
// max) and, for UCX, the transports its endpoint uses. Run by hand; not a test.
// UCX_TLS=... restricts UCX's transports as usual.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/bulk_transport.h"
#include "core/ucx_transport.h"

namespace laminar {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kAckTag = ~uint64_t{0};
constexpr int kTimeoutMs = 60000;

struct Options {
  size_t total_bytes = size_t{500} << 20;
  size_t chunk_bytes = size_t{4} << 20;
  int reps = 3;
  bool procs = false;
  std::vector<std::string> kinds = {"ucx", "zmq"};
};

void Die(const Status& st, const char* what) {
  std::fprintf(stderr, "bulk_transport_bench: %s: %s\n", what, st.ToString().c_str());
  std::fflush(stdout);
  std::_Exit(1);  // no static destructors: a ZeroMQ context with open sockets would block
}

// Sends `reps` rounds of total_bytes in chunks to `peer`, each round ended by an ack from the
// receiver; returns seconds per round.
std::vector<double> SendRounds(BulkTransport& t, const std::string& peer, const Options& o,
                               const std::vector<uint8_t>& data) {
  std::vector<double> seconds;
  for (int r = 0; r <= o.reps; ++r) {  // round 0 warms up (connection, page faults)
    auto start = Clock::now();
    for (size_t off = 0; off < o.total_bytes; off += o.chunk_bytes) {
      size_t n = std::min(o.chunk_bytes, o.total_bytes - off);
      Status st = t.Send(peer, off, {data.data() + off, n}, kTimeoutMs);
      if (!st.ok()) Die(st, "send");
    }
    auto ack = t.Receive(kTimeoutMs);
    if (!ack.ok()) Die(ack.status(), "ack");
    if (r > 0) seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  return seconds;
}

// Receives reps+1 rounds, checks the first round's bytes, acks each round to `peer`.
void ReceiveRounds(BulkTransport& t, const std::string& peer, const Options& o,
                   const std::vector<uint8_t>& want) {
  for (int r = 0; r <= o.reps; ++r) {
    for (size_t off = 0; off < o.total_bytes; off += o.chunk_bytes) {
      auto m = t.Receive(kTimeoutMs);
      if (!m.ok()) Die(m.status(), "receive");
      size_t n = std::min(o.chunk_bytes, o.total_bytes - off);
      if (r == 0 && (m->tag != off || m->bytes.size() != n ||
                     std::memcmp(m->bytes.data(), want.data() + off, n) != 0)) {
        Die(DataLossError("chunk at offset " + std::to_string(off) + " differs"), "check");
      }
    }
    Status st = t.Send(peer, kAckTag, {}, kTimeoutMs);
    if (!st.ok()) Die(st, "send ack");
  }
}

std::vector<uint8_t> Data(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 131 + (i >> 13));
  return v;
}

void PrintEndpoint(BulkTransport& t, const std::string& peer) {
  if (auto* u = dynamic_cast<UcxBulkTransport*>(&t)) {
    std::fprintf(stderr, "%s", u->DescribeEndpoint(peer).c_str());
  }
}

std::vector<double> RunThreads(const std::string& kind, const Options& o,
                               const std::vector<uint8_t>& data) {
  auto a = CreateBulkTransport(kind);
  auto b = CreateBulkTransport(kind);
  if (!a.ok()) Die(a.status(), "create");
  if (!b.ok()) Die(b.status(), "create");
  std::thread receiver([&] { ReceiveRounds(**b, (*a)->address(), o, data); });
  auto seconds = SendRounds(**a, (*b)->address(), o, data);
  receiver.join();
  PrintEndpoint(**a, (*b)->address());
  return seconds;
}

// Two child processes, forked from this (still single-threaded, transport-free) process so that
// neither inherits UCX or ZeroMQ threads: one receives, one sends and reports its timings.
std::vector<double> RunProcs(const std::string& kind, const Options& o,
                             const std::vector<uint8_t>& data) {
  int to_sender[2], to_receiver[2], results[2], done[2];
  if (pipe(to_sender) != 0 || pipe(to_receiver) != 0 || pipe(results) != 0 || pipe(done) != 0)
    Die(ErrnoError("pipe", errno), "pipe");
  auto write_str = [](int fd, const std::string& s) {
    std::string line = s + "\n";
    if (write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size()))
      Die(ErrnoError("write", errno), "pipe");
  };
  auto read_str = [](int fd) {
    std::string s;
    char c;
    while (read(fd, &c, 1) == 1 && c != '\n') s += c;
    return s;
  };
  pid_t receiver = fork();
  if (receiver == 0) {
    auto t = CreateBulkTransport(kind);
    if (!t.ok()) Die(t.status(), "create (receiver)");
    write_str(to_sender[1], (*t)->address());
    ReceiveRounds(**t, read_str(to_receiver[0]), o, data);
    // Stay until the sender has its last ack: ZeroMQ drops queued messages when a socket closes.
    read_str(done[0]);
    std::_Exit(0);
  }
  pid_t sender = fork();
  if (sender == 0) {
    auto t = CreateBulkTransport(kind);
    if (!t.ok()) Die(t.status(), "create (sender)");
    std::string peer = read_str(to_sender[0]);
    write_str(to_receiver[1], (*t)->address());
    std::string line;
    for (double s : SendRounds(**t, peer, o, data)) line += std::to_string(s) + " ";
    PrintEndpoint(**t, peer);
    write_str(results[1], line);
    std::_Exit(0);
  }
  std::string line = read_str(results[0]);
  write_str(done[1], "done");
  for (pid_t pid : {sender, receiver}) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      Die(InternalError("a child failed"), kind.c_str());
  }
  for (int fd :
       {to_sender[0], to_sender[1], to_receiver[0], to_receiver[1], results[0], results[1]})
    close(fd);
  std::vector<double> seconds;
  for (size_t p = 0; p < line.size();) {
    size_t q = line.find(' ', p);
    if (q == std::string::npos) break;
    seconds.push_back(std::stod(line.substr(p, q - p)));
    p = q + 1;
  }
  return seconds;
}

int Main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (arg == "--total_mb") {
      o.total_bytes = std::stoull(next()) << 20;
    } else if (arg == "--chunk_mb") {
      o.chunk_bytes = std::stoull(next()) << 20;
    } else if (arg == "--reps") {
      o.reps = std::stoi(next());
    } else if (arg == "--procs") {
      o.procs = true;
    } else if (arg == "--kinds") {
      o.kinds.clear();
      std::string list = next();
      for (size_t p = 0; p <= list.size();) {
        size_t q = std::min(list.find(',', p), list.size());
        o.kinds.push_back(list.substr(p, q - p));
        p = q + 1;
      }
    } else {
      std::fprintf(stderr,
                   "usage: %s [--total_mb N] [--chunk_mb N] [--reps N] [--procs] "
                   "[--kinds ucx,zmq]\n",
                   argv[0]);
      return 2;
    }
  }
  auto data = Data(o.total_bytes);
  if (o.reps < 1) o.reps = 1;
  const char* mode = o.procs ? "processes" : "threads";
  std::printf("%-4s %-9s %10s %10s %8s %8s %8s\n", "kind", "mode", "total_MB", "chunk_MB",
              "GB/s_med", "GB/s_min", "GB/s_max");
  for (const auto& kind : o.kinds) {
    auto seconds = o.procs ? RunProcs(kind, o, data) : RunThreads(kind, o, data);
    std::vector<double> gbps;
    gbps.reserve(seconds.size());
    for (double s : seconds) gbps.push_back(static_cast<double>(o.total_bytes) / s / 1e9);
    std::sort(gbps.begin(), gbps.end());
    double med = gbps[gbps.size() / 2];
    std::printf("%-4s %-9s %10zu %10zu %8.2f %8.2f %8.2f\n", kind.c_str(), mode,
                o.total_bytes >> 20, o.chunk_bytes >> 20, med, gbps.front(), gbps.back());
    std::printf(
        "{\"bench\":\"bulk_transport\",\"kind\":\"%s\",\"mode\":\"%s\",\"total_bytes\":%zu,"
        "\"chunk_bytes\":%zu,\"reps\":%d,\"gbps_median\":%.3f,\"gbps_min\":%.3f,"
        "\"gbps_max\":%.3f}\n",
        kind.c_str(), mode, o.total_bytes, o.chunk_bytes, o.reps, med, gbps.front(), gbps.back());
  }
  return 0;
}

}  // namespace
}  // namespace laminar

int main(int argc, char** argv) { return laminar::Main(argc, argv); }
