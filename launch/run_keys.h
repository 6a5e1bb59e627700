// A run's roles authenticate each other with ZeroMQ CURVE when the recipe names a key file
// (run.keys, made by `laminar keys FILE` or by the Slurm launcher): every role process enables it
// before it makes a socket, so a client without the run's keys is refused by every role's server
// (core/zmq_transport.h). A multi-machine recipe (cluster.nodes > 1) needs keys unless it says
// run.insecure: true.
#pragma once

#include "core/config.h"
#include "core/status.h"

namespace laminar::launch {

// Reads run.keys and enables CURVE for this process; nothing when it is empty. Errors: the key
// file's (naming it and run.keys), or InvalidArgument for a multi-machine recipe without keys.
Status SecureRunTransport(const Config& recipe);

}  // namespace laminar::launch
