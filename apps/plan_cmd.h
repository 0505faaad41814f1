// `weft plan` and `weft calibrate` (see docs/planner.md).
#pragma once
#include <CLI/CLI.hpp>

#include "comm/communicator.h"

namespace weft {

// Parses argv[1..] ("plan" and its options) with `app` and runs the planner. Returns the exit
// code; throws InputError for bad input (the caller prints one line and exits 2).
int cmd_plan(CLI::App& app, int argc, char** argv);
// Parses argv[1..] ("calibrate" and its options) and measures this machine on every rank.
int cmd_calibrate(CLI::App& app, int argc, char** argv, Communicator& world);

}  // namespace weft
