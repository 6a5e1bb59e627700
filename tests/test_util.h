// Helpers shared by the tests: locating ../shared/data, temporary folders, polling, and the one
// source of random tensors and raw GGML blocks.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/dtype.h"
#include "model/ggml_quants.h"

namespace laminar::testing {

// `n` values drawn from N(0, stddev²), the same for the same seed: every test's random tensor.
inline std::vector<float> RandomNormal(size_t n, uint64_t seed, float stddev = 1.f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// `n` values drawn uniformly from [-scale, scale], the same for the same seed: the inputs of
// finite-difference gradient checks (bounded, so no value lands far out on a nonlinearity).
inline std::vector<double> RandomUniform(size_t n, uint32_t seed, double scale = 1.0) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(-scale, scale);
  std::vector<double> v(n);
  for (double& x : v) x = dist(rng);
  return v;
}

// Random raw GGML blocks of `type` (2: Q4_0, 3: Q4_1, 8: Q8_0; 32 elements each) for an [n, k]
// tensor, k a multiple of 32, with f16 scales of a realistic size (and Q4_1's minimum), the same
// for the same seed.
inline std::vector<uint8_t> RandomGgmlBlocks(uint32_t type, int64_t n, int64_t k, uint64_t seed) {
  const size_t block_bytes = type == 2   ? model::kQ4_0BlockBytes
                             : type == 3 ? model::kQ4_1BlockBytes
                                         : model::kQ8_0BlockBytes;
  std::vector<uint8_t> out(static_cast<size_t>(n * k / 32) * block_bytes);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> scale(0.001f, 0.02f), min(-0.1f, 0.f);
  for (size_t b = 0; b < out.size() / block_bytes; ++b) {
    uint8_t* p = out.data() + b * block_bytes;
    const uint16_t d = FloatToHalf(scale(rng)), m = FloatToHalf(min(rng));
    std::memcpy(p, &d, 2);
    size_t header = 2;
    if (type == 3) {
      std::memcpy(p + 2, &m, 2);
      header = 4;
    }
    for (size_t i = header; i < block_bytes; ++i) p[i] = static_cast<uint8_t>(rng());
  }
  return out;
}

// The state letter of /proc/<pid>/stat ('S', 'R', 'Z' for a zombie, ...), or 0 when the process
// is gone.
inline char ProcessState(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  const std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  return paren == std::string::npos || paren + 2 >= text.size() ? 0 : text[paren + 2];
}

// Root of the outside goldens: $LAMINAR_SHARED_DATA, else <repo>/../shared/data. Only fidelity
// checks against outside references read it (stories260K's llama2.c goldens, official samples);
// their tests skip, naming the file, where it is absent.
inline std::filesystem::path SharedDataDir() {
  if (const char* env = std::getenv("LAMINAR_SHARED_DATA")) return env;
  return std::filesystem::path(LAMINAR_SOURCE_DIR) / ".." / "shared" / "data";
}

// Full path of `relative` under the shared data; empty if it does not exist.
inline std::string SharedData(const std::string& relative) {
  auto p = SharedDataDir() / relative;
  return std::filesystem::exists(p) ? p.string() : std::string();
}

// Root of the data scripts/fetch_test_data.sh fetches (pinned files from PyPI packages):
// $LAMINAR_TEST_DATA, else ~/.cache/laminar/test-data.
inline std::filesystem::path FetchedDataDir() {
  if (const char* env = std::getenv("LAMINAR_TEST_DATA")) return env;
  const char* home = std::getenv("HOME");
  return std::filesystem::path(home != nullptr ? home : "/root") / ".cache" / "laminar" /
         "test-data";
}

// Full path of `relative` under the fetched data; empty if it does not exist.
inline std::string FetchedData(const std::string& relative) {
  auto p = FetchedDataDir() / relative;
  return std::filesystem::exists(p) ? p.string() : std::string();
}

// The synthetic model the build makes for the tests (`laminar make-model --preset tiny-llama
// --seed 1`, target tiny_model): a GGUF file with its tokenizer and chat template inside, and the
// same model as a Hugging Face folder.
inline std::string TinyModel() {
  return (std::filesystem::path(LAMINAR_BINARY_DIR) / "test_models/tiny-llama/model.gguf").string();
}
inline std::string TinyModelHf() {
  return (std::filesystem::path(LAMINAR_BINARY_DIR) / "test_models/tiny-llama/hf").string();
}

// A fresh folder under the build tree, private to the running test (CTest runs tests in
// parallel processes): test_tmp/<Suite.Test>/<name>, removed and recreated on each call.
inline std::filesystem::path TempDir(const std::string& name) {
  std::string owner = "no_test";
  if (const auto* info = ::testing::UnitTest::GetInstance()->current_test_info()) {
    owner = std::string(info->test_suite_name()) + "." + info->name();
    for (char& c : owner) {
      if (c == '/') c = '_';  // parameterized names
    }
  }
  auto p = std::filesystem::path(LAMINAR_BINARY_DIR) / "test_tmp" / owner / name;
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p;
}

// Polls `done` every `poll_ms` until it holds or `timeout_ms` passes; its last value.
inline bool WaitFor(const std::function<bool()>& done, int timeout_ms, int poll_ms = 5) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(poll_ms));
  }
  return done();
}

// A loopback TCP port no one listens on now: bound to port 0, read back, released. Another process
// may take it before the caller does; callers retry on "Address already in use".
inline int FreeTcpPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  close(fd);
  return ntohs(addr.sin_port);
}

// A socket listening on a loopback port chosen by the kernel (connections wait in its backlog;
// nothing accepts them): its descriptor, or -1, and the port in `*port`. The caller closes it.
inline int ListenOnLoopback(int* port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(fd, 4) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    return -1;
  }
  *port = ntohs(addr.sin_port);
  return fd;
}

}  // namespace laminar::testing

// The skip message of a test whose outside golden is absent; scripts/test.sh counts them.
#define LAMINAR_OUTSIDE_GOLDEN_SKIP "outside golden not present: "

// Declares `var` as the path of an outside golden, or skips the test when it is absent.
#define LAMINAR_SHARED_OR_SKIP(var, relative)                       \
  const std::string var = ::laminar::testing::SharedData(relative); \
  if (var.empty()) GTEST_SKIP() << LAMINAR_OUTSIDE_GOLDEN_SKIP << (relative)

// Declares `var` as the path of a fetched file (scripts/fetch_test_data.sh, which setup and
// scripts/test.sh run). Absent, the test fails: a user's run has it.
#define LAMINAR_FETCHED(var, relative)                                     \
  const std::string var = ::laminar::testing::FetchedData(relative);       \
  ASSERT_FALSE(var.empty()) << "fetched test data missing: " << (relative) \
                            << " (run scripts/fetch_test_data.sh)"
