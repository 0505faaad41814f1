// What a run reports beside its losses: the planner's step time and memory for its layout
// (predicted before the first step), memory by category, the pipeline's busy/wait/idle times,
// communication by axis, and the final predicted-vs-measured report of every rank.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "comm/communicator.h"
#include "comm/tracer.h"
#include "core/memory.h"
#include "engine/engine.h"
#include "plan/predict.h"
#include "plan/weft_memory.h"
#include "train/config.h"

namespace weft {

// The planner's view of this run: its layout, step time on the system file (if any) and the
// closed-form memory of this rank.
struct RunPrediction {
  std::string system_path;                 // empty: no system file, no step time
  std::optional<plan::Prediction> step;    // null if the planner cannot price the layout
  plan::MemoryBreakdown memory;            // this rank (stage, dp rank)
  std::string fp32_kernel;                 // the system file's [device] fp32_kernel ("": none)
  plan::MachineFingerprint calibrated;     // the system file's [machine] (empty: none)
};
// Prices the layout on cfg.system (or plan::implicit_system_path(): WEFT_SYSTEM, else
// systems/local.toml when it exists). InputError for a bad
// system file; a layout the planner cannot price is a warning.
// The step time only: the caller fills `memory` once the backend's products are set
// (run_memory_shape's native_products).
RunPrediction predict_run(const RunConfig& cfg, const EngineConfig& ec);
// The run as weft's memory model sees it (plan/weft_memory.h): what predict_run prices, also
// used before the engine exists (train/memory_fit.h).
plan::WeftRunShape run_memory_shape(const EngineConfig& ec, bool native_products);

// The set-up lines of the log: model, layout, pipeline, data, predicted memory and step time.
struct RunSetup {
  const RunConfig* cfg;
  Engine* engine;
  std::string data;  // RunData::describe
  int threads;
};
void log_run_setup(const RunSetup& s, const RunPrediction& pred);

// `memory` of a metrics line: this rank's bytes by category now and their peaks.
nlohmann::json memory_json(const DataParallelMemory& stores);
// `pipeline` of a metrics line: per stage busy, p2p wait and idle milliseconds, in-flight peaks
// (gathered over the pp axis: collective), the bubble measured and its closed form.
nlohmann::json pipeline_json(Engine& engine, const PipeStepStats& st, const std::string& schedule);
// `comm` of a metrics line: calls, bytes and seconds by axis.
nlohmann::json comm_json(const TraceSummary& ts);

// The last metrics line: measured memory (the training steps' peaks, `ms`) beside the
// prediction for every rank, and the step time measured (mean of `timed_steps`) beside the
// planner's. Collective over world; logs one memory table per pipeline stage (rank 0) and
// returns the line (rank 0; null elsewhere).
nlohmann::json final_report(Engine& engine, Communicator& world, const MemorySnapshot& ms, const RunPrediction& pred,
                            double time_sum, int64_t timed_steps, int64_t steps_done);

}  // namespace weft
