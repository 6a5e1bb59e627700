// Runs the real `laminar` binary as a process for CLI tests.
#pragma once

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/test_util.h"

namespace laminar::testing {

struct CliResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

inline std::string Slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Runs `laminar <args>` (a shell-quoted string) with `input` on stdin.
inline CliResult RunLaminar(const std::string& args, const std::string& input = "") {
  auto dir = TempDir("cli_run");
  std::ofstream(dir / "in", std::ios::binary) << input;
  std::string cmd = std::string(LAMINAR_BINARY) + " " + args + " < " + (dir / "in").string() +
                    " > " + (dir / "out").string() + " 2> " + (dir / "err").string();
  int status = std::system(cmd.c_str());
  CliResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = Slurp(dir / "out");
  r.err = Slurp(dir / "err");
  return r;
}

// One JSON value per line of `text` (a command's JSON Lines output).
inline std::vector<nlohmann::json> JsonLines(const std::string& text) {
  std::vector<nlohmann::json> rows;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

}  // namespace laminar::testing
