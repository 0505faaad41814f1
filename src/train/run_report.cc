#include "train/run_report.h"

#include <fmt/format.h>

#include <filesystem>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "plan/system.h"

namespace fs = std::filesystem;

namespace weft {

RunPrediction predict_run(const RunConfig& cfg, const EngineConfig& ec) {
  RunPrediction r;
  const plan::Layout& pl = ec.layout;
  r.system_path = cfg.system.empty() ? plan::implicit_system_path() : cfg.system;
  if (!r.system_path.empty()) {
    const plan::System sys = plan::load_system(r.system_path);  // InputError naming the file and key
    plan::Options po = plan::Options::from_system(sys, ec.precision, ec.global_batch);
    po.matmul = ec.matmul;
    r.fp32_kernel = sys.device.fp32_kernel;
    r.calibrated = sys.machine;
    try {
      r.step = plan::predict(plan::ModelShape::from_config(ec.model, ec.seq), sys, pl, po);
    } catch (const InputError& e) {
      log_warn("planner: cannot price this layout on {}: {}", r.system_path, e.what());
    }
  }
  return r;
}

plan::WeftRunShape run_memory_shape(const EngineConfig& ec, bool native_products) {
  plan::WeftRunShape shape;
  shape.model = ec.model;
  shape.seq = ec.seq;
  shape.micro_batches = ec.global_batch / ec.layout.dp / ec.layout.micro_batch;
  shape.head_chunk = ec.head_chunk;
  shape.prefetch = ec.data_parallel.prefetch;
  shape.layout = ec.layout;
  shape.master_weights = ec.precision != Precision::kFp32;
  shape.precision = ec.precision;
  shape.zeropp = ec.data_parallel.zeropp;
  shape.native_products = native_products;
  return shape;
}

void log_run_setup(const RunSetup& s, const RunPrediction& pred) {
  const RunConfig& cfg = *s.cfg;
  Engine& e = *s.engine;
  const EngineConfig& ec = e.config();
  const ModelConfig& mc = ec.model;
  if (pred.step) {
    const plan::StepTime& t = pred.step->time;
    log_info("planner ({}): predicted step {:.1f} ms = compute {:.1f} + tp comm {:.1f} + pipeline bubble/p2p {:.1f} + dp exposed {:.1f} + optimizer {:.1f}",
             pred.system_path, pred.step->step_time_s * 1e3, t.compute * 1e3, t.tp_comm * 1e3, t.pp_bubble * 1e3,
             t.dp_exposed * 1e3, t.optimizer * 1e3);
  } else if (pred.system_path.empty()) {
    log_info("planner: no system file (run `weft calibrate --out systems/local.toml` or pass --system) - step time not predicted");
  }
  if (!pred.calibrated.empty()) {
    // A system file measured on another machine, or with other threads or libraries, describes
    // another device: said before the run, with what differs.
    const std::vector<std::string> diff = plan::fingerprint_differences(
        pred.calibrated, plan::this_machine(ec.layout.tp * ec.layout.pp * ec.layout.dp, s.threads));
    if (!diff.empty()) {
      std::string what;
      for (const std::string& d : diff) what += (what.empty() ? "" : "; ") + d;
      log_warn("planner: {} was calibrated on another setup ({}): its step time may not hold here (check it: weft "
               "calibrate --check {}, or calibrate again)",
               pred.system_path, what, pred.system_path);
    }
    if (pred.calibrated.other_load > 0.25) {
      log_warn("planner: {} was calibrated while other processes kept {:.2f} hardware threads busy", pred.system_path,
               pred.calibrated.other_load);
    }
  }
  log_info("weft train: model {} ({}), {:.2f}M parameters on this rank ({:.2f}M without padding)", mc.name,
           mc.family->describe_shape(mc), e.num_params() / 1e6, e.num_unpadded() / 1e6);
  if (ec.layout.recompute != Recompute::kNone) {
    log_info("activation recompute: {}{}", recompute_name(ec.layout.recompute),
             cfg.recompute_layers > 0 ? fmt::format(" ({} layers per stage)", cfg.recompute_layers) : std::string());
  }
  log_info("layout: {}, zero {}; backend {}, {} threads per rank", e.grid().layout().describe(), ec.layout.zero,
           s.cfg->backend, s.threads);
  if (PipelineRuntime* rt = e.pipeline()) {
    log_info("pipeline: schedule {}, stage {} of {}, {} chunk(s): {}; {} (micro-batch, chunk) forwards in flight at most",
             schedule_name(ec.layout.schedule), e.stage(), ec.layout.pp, e.num_chunks(), e.describe_chunks(), rt->max_in_flight());
  }
  log_info("data: {}; global batch {} = dp {} x {} micro-batches of {}", s.data, ec.global_batch, ec.layout.dp,
           e.accumulation(), ec.layout.micro_batch);
  const plan::MemoryBreakdown& m = pred.memory;
  if (m.total <= 0) return;  // not priced
  log_info("memory predicted for this rank: params {:.1f} MiB, grads {:.1f} MiB, optimizer {:.1f} MiB, activations {:.1f} MiB, workspace {:.1f} MiB, comm {:.1f} MiB",
           m.params / 1048576.0, m.grads / 1048576.0, m.optimizer / 1048576.0, m.activations / 1048576.0,
           m.workspace / 1048576.0, m.comm / 1048576.0);
}

nlohmann::json memory_json(const DataParallelMemory& stores) {
  const MemorySnapshot ms = memory_tracker().snapshot();
  return nlohmann::json{{"params", ms[MemCategory::kParams]},
                        {"grads", ms[MemCategory::kGrads]},
                        {"optimizer", ms[MemCategory::kOptimizer]},
                        {"activations", ms[MemCategory::kActivations]},
                        {"activations_peak", ms.peak_of(MemCategory::kActivations)},
                        {"workspace_peak", ms.peak_of(MemCategory::kWorkspace)},
                        {"comm_peak", ms.peak_of(MemCategory::kComm)},
                        {"other_peak", ms.peak_of(MemCategory::kOther)},
                        {"total_peak", ms.total_peak},
                        {"params_transient", stores.params_transient},
                        {"grads_transient", stores.grads_transient},
                        {"hpz", stores.hpz},
                        {"qgz_residual", stores.residual}};
}

nlohmann::json pipeline_json(Engine& engine, const PipeStepStats& st, const std::string& schedule) {
  const int pp = engine.config().layout.pp, v = engine.num_chunks();
  double mine[5] = {st.busy_s, st.wait_s, st.span_s, static_cast<double>(st.in_flight_peak),
                    static_cast<double>(engine.pipeline()->max_in_flight())};
  std::vector<double> all(static_cast<size_t>(5 * pp));
  engine.comm(Axis::kPp).all_gather(mine, all.data(), 5, CommDType::kF64);
  nlohmann::json busy = nlohmann::json::array(), wait = nlohmann::json::array(), idle = nlohmann::json::array();
  nlohmann::json in_flight = nlohmann::json::array(), planned = nlohmann::json::array();
  double max_span = 0.0, sum_busy = 0.0;
  for (int s = 0; s < pp; ++s) {
    const double* a = all.data() + 5 * s;
    busy.push_back(a[0] * 1e3);
    wait.push_back(a[1] * 1e3);
    idle.push_back((a[2] - a[0]) * 1e3);
    in_flight.push_back(static_cast<int>(a[3]));
    planned.push_back(static_cast<int>(a[4]));
    max_span = std::max(max_span, a[2]);
    sum_busy += a[0];
  }
  const int64_t m = engine.accumulation();
  return {{"schedule", schedule}, {"stages", pp}, {"virtual_stages", v}, {"micro_batches", m},
          {"busy_ms", busy}, {"p2p_wait_ms", wait}, {"idle_ms", idle},
          {"bubble_fraction", sum_busy > 0 ? (pp * max_span - sum_busy) / sum_busy : 0.0},
          {"bubble_predicted", static_cast<double>(pp - 1) / static_cast<double>(v * m)},
          {"in_flight_peak", in_flight}, {"in_flight_planned", planned}};
}

nlohmann::json comm_json(const TraceSummary& ts) {
  nlohmann::json comm = nlohmann::json::object();
  for (const auto& [axis, a] : ts.by_axis) {
    comm[axis] = {{"calls", a.total.calls}, {"bytes", a.total.bytes}, {"time_s", a.total.time_s}};
  }
  return comm;
}

namespace {

constexpr int kReportFields = 17;  // stage, tp rank, dp rank, 7 measured, 7 predicted
const char* const kReportNames[7] = {"params", "grads", "optimizer", "activations", "workspace", "comm", "total"};

// One rank's memory table (MiB: predicted, measured, error) for the log.
std::string memory_table(int rank, const double* a) {
  std::string table = fmt::format("memory of rank {} (stage {}), MiB: category, predicted, measured (peak), error", rank,
                                  static_cast<int>(a[0]));
  const bool priced = a[16] > 0;  // a rank without a prediction: measured only
  for (int k = 0; k < 7; ++k) {
    const double p = a[10 + k], m = a[3 + k];
    table += fmt::format("\n  {:<12} {:>10} {:>10.2f} {:>8}", kReportNames[k],
                         priced ? fmt::format("{:.2f}", p / 1048576.0) : std::string("-"), m / 1048576.0,
                         priced && m > 0 ? fmt::format("{:+.1f}%", 100.0 * (p - m) / m) : std::string("-"));
  }
  return table;
}

// Every rank's measured and predicted memory (gathered: collective); rank 0 logs a table per
// pipeline stage and returns the report.
nlohmann::json memory_report(Engine& e, Communicator& world, const MemorySnapshot& ms, const plan::MemoryBreakdown& p) {
  const double mine[kReportFields] = {
      static_cast<double>(e.stage()), static_cast<double>(e.tp_rank()), static_cast<double>(e.dp_rank()),
      static_cast<double>(ms[MemCategory::kParams]), static_cast<double>(ms[MemCategory::kGrads]),
      static_cast<double>(ms[MemCategory::kOptimizer]), static_cast<double>(ms.peak_of(MemCategory::kActivations)),
      static_cast<double>(ms.peak_of(MemCategory::kWorkspace)), static_cast<double>(ms.peak_of(MemCategory::kComm)),
      static_cast<double>(ms.total_peak), p.params, p.grads, p.optimizer, p.activations, p.workspace, p.comm, p.total};
  std::vector<double> all(static_cast<size_t>(kReportFields * world.size()));
  world.all_gather(mine, all.data(), kReportFields, CommDType::kF64);
  nlohmann::json report = nlohmann::json::array();
  if (world.rank() != 0) return report;
  for (int r = 0; r < world.size(); ++r) {
    const double* a = all.data() + kReportFields * r;
    nlohmann::json meas, pred;
    for (int k = 0; k < 7; ++k) {
      meas[kReportNames[k]] = static_cast<int64_t>(a[3 + k]);
      pred[kReportNames[k]] = static_cast<int64_t>(a[10 + k]);
    }
    if (p.total <= 0) pred = nullptr;  // not priced
    report.push_back({{"rank", r}, {"stage", static_cast<int>(a[0])}, {"tp_rank", static_cast<int>(a[1])},
                      {"dp_rank", static_cast<int>(a[2])}, {"measured", meas}, {"predicted", pred}});
    if (a[1] == 0 && a[2] == 0) log_info("{}", memory_table(r, a));  // one table per pipeline stage
  }
  return report;
}

}  // namespace

nlohmann::json final_report(Engine& engine, Communicator& world, const MemorySnapshot& ms, const RunPrediction& pred,
                            double time_sum, int64_t timed_steps, int64_t steps_done) {
  nlohmann::json report = memory_report(engine, world, ms, pred.memory);
  if (world.rank() != 0) return nullptr;
  nlohmann::json line = {{"step", steps_done}, {"memory_report", report}};
  if (pred.step && timed_steps > 0) {
    const double measured = time_sum / static_cast<double>(timed_steps);
    const plan::StepTime& t = pred.step->time;
    line["step_time_report"] = {
        {"system", pred.system_path}, {"measured_s", measured}, {"predicted_s", pred.step->step_time_s},
        {"predicted", {{"compute", t.compute}, {"tp_comm", t.tp_comm}, {"pp_bubble", t.pp_bubble},
                       {"dp_exposed", t.dp_exposed}, {"optimizer", t.optimizer}}}};
    log_info("step time: predicted {:.1f} ms, measured {:.1f} ms (mean of {} steps), error {:+.1f}%",
             pred.step->step_time_s * 1e3, measured * 1e3, timed_steps,
             100.0 * (pred.step->step_time_s - measured) / measured);
  }
  return line;
}

}  // namespace weft
