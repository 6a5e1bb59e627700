// The actor's options from a recipe's actor.* keys.
#pragma once

#include "actor/actor.h"
#include "core/config.h"
#include "core/status.h"
#include "trainer/trainer.h"

namespace laminar::actor {

// The trainer's configuration from actor.* keys. Errors: InvalidArgument naming the key for
// values the trainer refuses (an unknown loss, optimizer, schedule or estimator).
StatusOr<trainer::TrainerConfig> TrainerConfigOf(const Config& recipe);

// The actor's options from actor.* keys (trainer included). Endpoints are left for the caller.
StatusOr<ActorOptions> ActorOptionsOf(const Config& recipe);

}  // namespace laminar::actor
