// `laminar keys FILE`: makes a run's ZeroMQ CURVE key pair and writes it to FILE (readable by its
// owner only; an existing file is never overwritten). A recipe names it as run.keys, and every
// role of the run then authenticates and encrypts its connections with it (launch/run_keys.h).
#include <cstdio>
#include <memory>
#include <string>

#include "cli/command.h"
#include "core/zmq_transport.h"

namespace laminar::cli {
namespace {

std::function<int()> SetupKeys(CLI::App* app) {
  auto path = std::make_shared<std::string>();
  app->add_option("file", *path, "where to write the key file")->required();
  return [path] {
    auto keys = GenerateCurveKeys();
    if (!keys.ok()) return CommandFail("keys", keys.status().message());
    if (Status s = WriteCurveKeys(*keys, *path); !s.ok()) return CommandFail("keys", s.message());
    std::printf("%s\n", keys->public_key.c_str());
    std::fprintf(stderr,
                 "wrote %s (public key above); set run.keys: %s in the recipe, on a file system "
                 "every node of the run reads\n",
                 path->c_str(), path->c_str());
    return 0;
  };
}

}  // namespace

LAMINAR_REGISTER_COMMAND("keys",
                         "make a run's CURVE key file (run.keys) that authenticates its roles",
                         SetupKeys);

}  // namespace laminar::cli
