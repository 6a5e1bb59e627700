// Helpers shared by the tests: locating ../shared/data, temporary folders, polling.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>

namespace laminar::testing {

// Root of the shared test data: $LAMINAR_SHARED_DATA, else <repo>/../shared/data.
inline std::filesystem::path SharedDataDir() {
  if (const char* env = std::getenv("LAMINAR_SHARED_DATA")) return env;
  return std::filesystem::path(LAMINAR_SOURCE_DIR) / ".." / "shared" / "data";
}

// Full path of `relative` under the shared data; empty if it does not exist.
inline std::string SharedData(const std::string& relative) {
  auto p = SharedDataDir() / relative;
  return std::filesystem::exists(p) ? p.string() : std::string();
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

}  // namespace laminar::testing

// Declares `var` as the path of a shared data file, or skips the test when it is absent.
#define LAMINAR_SHARED_OR_SKIP(var, relative)                       \
  const std::string var = ::laminar::testing::SharedData(relative); \
  if (var.empty()) GTEST_SKIP() << "shared test data absent: " << (relative)
