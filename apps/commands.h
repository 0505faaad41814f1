// The subcommands of the `weft` command line, one file each (apps/<name>_cmd.cc). main() in
// weft.cc picks one by name and turns what it throws into one line on stderr and an exit code.
#pragma once
#include <CLI/CLI.hpp>

#include "comm/communicator.h"

namespace weft {

// Every subcommand has this form: it parses argv[1..] ("<name>" and its options) with `app`
// (named "weft <name>") and runs on the ranks of `world`. It returns the exit code and throws
// CLI::ParseError (--help, a bad option), InputError for bad input (exit 2) or anything else
// for a runtime failure (exit 1).
using CommandFn = int (*)(CLI::App& app, int argc, char** argv, Communicator& world);

// train_cmd.cc: parses its own arguments (every config key is an option), not with `app`.
int cmd_train(CLI::App& app, int argc, char** argv, Communicator& world);
int cmd_prepare(CLI::App& app, int argc, char** argv, Communicator& world);    // prepare_cmd.cc
int cmd_eval(CLI::App& app, int argc, char** argv, Communicator& world);       // eval_cmd.cc
int cmd_generate(CLI::App& app, int argc, char** argv, Communicator& world);   // generate_cmd.cc
int cmd_bench(CLI::App& app, int argc, char** argv, Communicator& world);      // bench_cmd.cc
int cmd_plan(CLI::App& app, int argc, char** argv, Communicator& world);       // plan_cmd.cc
int cmd_calibrate(CLI::App& app, int argc, char** argv, Communicator& world);  // calibrate_cmd.cc
int cmd_report(CLI::App& app, int argc, char** argv, Communicator& world);     // report_cmd.cc
int cmd_tune(CLI::App& app, int argc, char** argv, Communicator& world);       // tune_cmd.cc
int cmd_export(CLI::App& app, int argc, char** argv, Communicator& world);     // export_cmd.cc
int cmd_ensemble(CLI::App& app, int argc, char** argv, Communicator& world);   // ensemble_cmd.cc

}  // namespace weft
