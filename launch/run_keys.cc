#include "launch/run_keys.h"

#include <string>

#include "core/zmq_transport.h"

namespace laminar::launch {

Status SecureRunTransport(const Config& recipe) {
  const std::string path = recipe.GetString("run.keys");
  if (path.empty()) {
    if (recipe.GetInt("cluster.nodes") > 1 && !recipe.GetBool("run.insecure")) {
      return InvalidArgumentError(
          "recipe run.keys: a multi-machine run (cluster.nodes = " +
          std::to_string(recipe.GetInt("cluster.nodes")) +
          ") authenticates its roles: make keys with `laminar keys FILE` on a file system every "
          "node reads and set run.keys: FILE (scripts/launch_slurm.sh does both), or set "
          "run.insecure: true");
    }
    return OkStatus();
  }
  LAMINAR_ASSIGN_OR_RETURN(CurveKeys keys, ReadCurveKeys(path), "recipe run.keys");
  return EnableCurve(keys);
}

}  // namespace laminar::launch
