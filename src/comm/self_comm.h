// The communicator of a single process: size 1, rank 0. Collectives are no-ops (a copy where
// input and output differ), send/recv to oneself is an error (a bug in the caller: with one
// rank there is no peer), split() returns another self communicator. Calls are still traced,
// so a one-rank run writes a well-formed trace with the same events a multi-rank run would.
// Needs no MPI: single-process runs use it (make_world_communicator in comm/world.h).
#pragma once
#include <memory>
#include <string>

#include "comm/communicator.h"

namespace weft {

std::unique_ptr<Communicator> make_self_communicator(const std::string& axis = "world");

}  // namespace weft
