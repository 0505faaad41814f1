// `weft plan`: predicts memory and step time of layouts and ranks them (see docs/planner.md).
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "cli_util.h"
#include "commands.h"
#include "core/error.h"
#include "core/log.h"
#include "data/text_util.h"
#include "model/config.h"
#include "model/family.h"
#include "plan/compression.h"
#include "plan/predict.h"
#include "plan/search.h"
#include "plan_explain.h"

namespace weft {

using namespace plan;

namespace {

nlohmann::json to_json(const Prediction& p) {
  const Layout& l = p.layout;
  const MemoryBreakdown& m = p.memory;
  return nlohmann::json{
      {"layout",
       {{"tp", l.tp},
        {"pp", l.pp},
        {"dp", l.dp},
        {"dp_shard", l.dp_shard()},
        {"dp_replicate", l.dp_replicate},
        {"micro_batch", l.micro_batch},
        {"zero", l.zero},
        {"recompute", recompute_name(l.recompute)},
        {"sequence_parallel", l.sequence_parallel},
        {"schedule", schedule_name(l.schedule)},
        {"virtual_stages", l.virtual_stages}}},
      // Beside `layout`, whose keys are the trainer's config keys (weft train does not run
      // ZeRO++ yet): the ZeRO++ knobs the prediction priced.
      {"zeropp",
       {{"preset", zeropp_name(l.zeropp)},
        {"qwz", l.qwz},
        {"hpz", l.hpz},
        {"qgz", l.qgz},
        {"hierarchy", l.hierarchy},
        {"quant_block", l.quant_block}}},
      // Compressed collectives (plan/compression.h): the policy priced, and the codecs' seconds
      // in the step (inside time_s's tp_comm, pp_bubble and dp_exposed).
      {"compression",
       {{"preset", l.compression_name},
        {"dp", l.compression.dp.name()},
        {"params", l.compression.params.name()},
        {"tp", l.compression.tp.name()},
        {"pp", l.compression.pp.name()},
        {"error_feedback", l.compression.error_feedback},
        {"codec_s", p.traffic.codec_s()}}},
      {"micro_batches", p.micro_batches},
      {"step_time_s", p.step_time_s},
      {"tokens_per_s", p.tokens_per_s},
      {"mfu", p.mfu},
      {"hfu", p.hfu},
      {"time_s",
       {{"compute", p.time.compute},
        {"tp_comm", p.time.tp_comm},
        {"pp_bubble", p.time.pp_bubble},
        {"dp_exposed", p.time.dp_exposed},
        {"optimizer", p.time.optimizer},
        {"stragglers", p.time.stragglers},
        {"overhead", p.time.overhead}}},
      {"memory_bytes",
       {{"params", m.params},
        {"grads", m.grads},
        {"optimizer", m.optimizer},
        {"activations", m.activations},
        {"workspace", m.workspace},
        {"comm", m.comm},
        {"total", m.total},
        {"hpz_secondary", m.hpz_secondary},
        {"stage", m.stage}}},
      {"fits", p.fits}};
}

std::string gb(double b) { return fmt::format("{:.2f}", b / 1e9); }

void print_table(const std::vector<Prediction>& ps, double capacity) {
  fmt::print("{:>3}  {:<44} {:>10} {:>11} {:>6} {:>6}  {:>9} {:>9} {:>9} {:>9}  {:>7} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6}\n",
             "#", "layout", "step s", "tokens/s", "MFU%", "HFU%", "compute", "tp comm", "pp+bubble", "dp expo", "mem GB",
             "param", "grad", "optim", "activ", "work", "comm");
  int i = 0;
  for (const auto& p : ps) {
    const auto& m = p.memory;
    fmt::print("{:>3}  {:<44} {:>10.4g} {:>11.5g} {:>6.2f} {:>6.2f}  {:>9.4g} {:>9.4g} {:>9.4g} {:>9.4g}  {:>7} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6}{}\n",
               ++i, p.layout.describe(), p.step_time_s, p.tokens_per_s, 100 * p.mfu, 100 * p.hfu, p.time.compute,
               p.time.tp_comm, p.time.pp_bubble, p.time.dp_exposed, gb(m.total), gb(m.params), gb(m.grads),
               gb(m.optimizer), gb(m.activations), gb(m.workspace), gb(m.comm),
               p.fits ? "" : fmt::format("  DOES NOT FIT ({} GB per device)", gb(capacity)));
  }
}

// The most devices a search takes: 2^24, far above any machine built (Frontier: 37,888 GCDs).
constexpr int64_t kMaxPlanDevices = int64_t{1} << 24;

std::vector<int64_t> parse_counts(const std::string& s, const char* option = "--scaling-gpus",
                                  const char* example = "128,256,512") {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string tok;
  while (std::getline(ss, tok, ',')) {
    try {
      size_t pos = 0;
      const long long v = std::stoll(tok, &pos);
      if (pos != tok.size() || v <= 0) throw std::invalid_argument(tok);
      out.push_back(v);
    } catch (const std::exception&) {
      throw_input("{}: '{}' is not a positive integer (expected a comma-separated list, e.g. {})", option, tok, example);
    }
  }
  return out;
}

// The options of `weft plan`, with the options whose presence pins a choice or overrides the
// system's defaults.
struct PlanArgs {
  // The family's settings (--model.NAME VALUE: a graph network's layer, data statistics, ...).
  std::map<std::string, std::string> settings;
  // "" : bf16, or fp32 for a family that trains in fp32 only.
  std::string model = "", system_path, precision = "", format = "text", recompute, schedule, order = "tp-dp-pp";
  std::string matmul = "fast";  // how 16-bit products are priced (plan::Options::matmul)
  double time_limit = 20;       // seconds a search walks (plan::Options::search_seconds; 0: none)
  int64_t layers = 0, hidden = 0, heads = 0, seq = 0, vocab = 0, ffn = 0, gpus = 0, global_batch = 0, top = 5;
  int tp = 0, pp = 0, dp = 0, dp_shard = 0, dp_replicate = 1, zero = 0, vstages = 0, recompute_layers = -1;
  int64_t micro_batch = 0;
  bool sp = false, flash = false, dropout = false, overlap = false, explain = false, fp32_grads = false;
  std::string zeropp, hierarchy, compression;
  bool qwz = false, qgz = false, allow_lossy = false;
  int hpz = 1, quant_block = 2048;
  CLI::Option *o_zeropp = nullptr, *o_qwz = nullptr, *o_qgz = nullptr, *o_hpz = nullptr, *o_hier = nullptr,
              *o_block = nullptr, *o_fp32g = nullptr, *o_compression = nullptr;
  std::string scaling, scaling_gpus, csv, plot;
  CLI::Option *o_gpus = nullptr, *o_tp = nullptr, *o_pp = nullptr, *o_dp = nullptr, *o_mb = nullptr, *o_zero = nullptr;
  CLI::Option *o_dp_shard = nullptr, *o_dp_replicate = nullptr;
  CLI::Option *o_rc = nullptr, *o_rcl = nullptr, *o_sp = nullptr, *o_sch = nullptr, *o_v = nullptr;
  CLI::Option *o_flash = nullptr, *o_drop = nullptr, *o_ov = nullptr, *o_scaling = nullptr;
};

void add_plan_options(CLI::App& app, PlanArgs& a) {
  app.add_option("--model", a.model,
                 "model preset (gpt2-124m, gpt-22b, gpt-175b, gpt-1t, ..., climax-tiny, orbit-113b, ..., gnn-lj, "
                 "hydragnn-gfm-egnn); --model.NAME VALUE sets a family setting as weft train does (a graph network's "
                 "layer, mean_atoms, mean_in_degree: docs/model-gnn.md)");
  app.add_option("--layers", a.layers, "layers (with --hidden --heads: a custom model, or override the preset)");
  app.add_option("--hidden", a.hidden, "hidden size");
  app.add_option("--heads", a.heads, "attention heads");
  app.add_option("--seq", a.seq, "sequence length (default: the model context)");
  app.add_option("--vocab", a.vocab, "vocabulary (padded to a multiple of 128)");
  app.add_option("--ffn", a.ffn, "MLP size (default 4 x hidden)");
  app.add_option("--system", a.system_path, "system file (systems/frontier.toml, systems/local.toml from weft calibrate)")
      ->required();
  a.o_gpus = app.add_option("--gpus", a.gpus, "devices (default: tp x pp x dp when all three are pinned)");
  app.add_option("--global-batch", a.global_batch, "sequences per optimizer step")->required();
  app.add_option("--precision", a.precision, "bf16, fp16 or fp32 (default bf16; fp32 for a family that trains in fp32 only)");
  app.add_option("--matmul", a.matmul,
                 "16-bit products priced at the 16-bit rate (fast: native products, as the published stacks and "
                 "weft's --matmul fast run them) or the fp32 rate (exact: weft's default, 16-bit operands widened)")
      ->check(CLI::IsMember({"fast", "exact"}));
  a.o_tp = app.add_option("--tp", a.tp, "pin the tensor-parallel size");
  a.o_pp = app.add_option("--pp", a.pp, "pin the pipeline stages");
  a.o_dp = app.add_option("--dp", a.dp, "pin the data-parallel size (= dp_shard x dp_replicate)");
  a.o_dp_shard = app.add_option("--dp-shard", a.dp_shard, "pin HSDP's dp_shard: the ranks ZeRO shards over inside dp");
  a.o_dp_replicate = app.add_option("--dp-replicate", a.dp_replicate,
                                    "pin HSDP's dp_replicate: replicas of the dp_shard groups (1: plain dp; unpinned: "
                                    "searched with ZeRO 1-3)");
  a.o_mb = app.add_option("--micro-batch", a.micro_batch, "pin the micro-batch size (sequences)");
  a.o_zero = app.add_option("--zero", a.zero, "pin the ZeRO stage 0..3");
  a.o_rc = app.add_option("--recompute", a.recompute, "pin recompute: none, selective, full");
  a.o_rcl = app.add_option("--recompute-layers", a.recompute_layers, "full recompute: layers per stage (default all)");
  a.o_sp = app.add_flag("--sequence-parallel,!--no-sequence-parallel", a.sp, "pin sequence parallelism on (or off)");
  a.o_sch = app.add_option("--schedule", a.schedule, "pin the pipeline schedule: gpipe, 1f1b, interleaved");
  a.o_v = app.add_option("--virtual-stages", a.vstages, "pin the virtual stages (interleaved schedule)");
  a.o_zeropp = app.add_option("--zeropp", a.zeropp,
                              "pin ZeRO++ (zero 3): none, zero++ (qwz + hpz over the node + qgz over [node]), "
                              "3-level (qwz + hpz over the innermost level + qgz over [pair, node])");
  a.o_qwz = app.add_flag("--qwz,!--no-qwz", a.qwz, "pin ZeRO++ quantized weight gathers (int8) on (or off)");
  a.o_hpz = app.add_option("--hpz", a.hpz, "pin the ZeRO++ secondary partition size in dp ranks (1: off)");
  a.o_qgz = app.add_flag("--qgz,!--no-qgz", a.qgz, "pin ZeRO++ quantized gradients (int4 all-to-all hops) on (or off)");
  a.o_hier = app.add_option("--hierarchy", a.hierarchy,
                            "qgz hops: the dp group's inner levels as cumulative dp ranks, innermost first (e.g. 2,8)");
  a.o_block = app.add_option("--quant-block", a.quant_block, "ZeRO++ quantization block (elements per fp32 scale, 2048)");
  a.o_compression = app.add_option(
      "--compression", a.compression,
      "pin compressed collectives: none, hybrid (dp int4, params bf16, tp bf16), hybrid-zfp (dp zfp:8; CPU systems), "
      "uniform-CODEC (e.g. uniform-int8), or dp=..,params=..,tp=..,pp=..,ef=on|off; any: let the search try lossy "
      "presets too (unpinned it tries none and lossless ones only)");
  app.add_flag("--allow-lossy", a.allow_lossy,
               "let the search try lossy compression presets (hybrid, uniform-int8, ...): they change the numbers the "
               "model trains on (same as --compression any)");
  app.add_option("--order", a.order, "rank order, first axis fastest (tp-dp-pp)");
  a.o_flash = app.add_flag("--flash-attention,!--no-flash-attention", a.flash, "override the system's [defaults]");
  a.o_drop = app.add_flag("--dropout,!--no-dropout", a.dropout, "override the system's [defaults]");
  a.o_ov = app.add_flag("--overlap-dp,!--no-overlap-dp", a.overlap, "override the system's [defaults]");
  a.o_fp32g = app.add_flag("--fp32-grad-accumulation,!--no-fp32-grad-accumulation", a.fp32_grads,
                           "override the system's [defaults] (off: 16-bit gradients, as DeepSpeed's ZeRO-3 keeps them)");
  app.add_option("--top", a.top, "layouts to print");
  app.add_option("--time-limit", a.time_limit,
                 "seconds after which the search stops and ranks the layouts it priced, saying so (default 20; 0: none)");
  app.add_flag("--explain", a.explain, "take the best (or pinned) layout's step apart: compute per op class, each collective per axis and level, bubble, stragglers, overheads");
  add_format_option(app, a.format);
  a.o_scaling = app.add_option("--scaling", a.scaling, "strong, weak or both: scaling efficiency vs device count")
                    ->check(CLI::IsMember({"strong", "weak", "both"}))
                    ->expected(0, 1)
                    ->default_str("both");
  app.add_option("--scaling-gpus", a.scaling_gpus, "device counts for --scaling (default: gpus/8, gpus/4, gpus/2, gpus)");
  app.add_option("--csv", a.csv, "--scaling: also write the curves as CSV to this file");
  app.add_option("--plot", a.plot, "--scaling: also write a PNG plot (needs gnuplot on the PATH)");
}

// The model: a preset or --layers, --hidden and --heads, with any size option overriding it.
ModelShape plan_model(const PlanArgs& a) {
  ModelConfig mc;
  if (!a.model.empty()) {
    mc = model_preset(a.model);
  } else {
    if (a.layers <= 0 || a.hidden <= 0 || a.heads <= 0) {
      throw_input("give --model PRESET or --layers, --hidden and --heads (got layers {}, hidden {}, heads {})", a.layers,
                  a.hidden, a.heads);
    }
    mc.name = "custom";
    mc.n_ctx = 1024;
  }
  for (auto [v, what] : {std::pair{a.layers, "--layers"}, {a.hidden, "--hidden"}, {a.heads, "--heads"}, {a.seq, "--seq"},
                         {a.vocab, "--vocab"}, {a.ffn, "--ffn"}}) {
    if (v < 0) throw_input("{} must be positive, got {}", what, v);
    // A model's sizes are 32-bit (ModelConfig): a larger one would print as a negative number.
    if (v > std::numeric_limits<int32_t>::max()) {
      throw_input("{} {} is too large (at most {})", what, v, std::numeric_limits<int32_t>::max());
    }
  }
  // A family that fixes a sample's positions (ClimaX: its patches) takes no --seq; the others
  // grow their context to a longer --seq.
  if (const int64_t fixed = fixed_positions(mc); fixed > 0 && a.seq > 0 && a.seq != fixed) {
    throw_input("--seq {} does not apply to the {} model '{}': its samples have {} positions", a.seq,
                mc.capabilities().family, mc.name, fixed);
  }
  mc = mc.family->with_overrides(mc, {.n_layer = a.layers, .n_head = a.heads, .n_embd = a.hidden,
                                      .n_ctx = a.seq > mc.n_ctx ? a.seq : 0, .vocab_size = a.vocab, .ffn = a.ffn});
  if (!a.settings.empty()) mc = mc.family->with_settings(mc, a.settings);
  const ModelShape shape = ModelShape::from_config(mc, a.seq);
  shape.validate();
  return shape;
}

// The system's defaults, with the rank order and the switches given on the command line.
Options plan_options(const PlanArgs& a, const System& sys, Precision prec) {
  Options opt = Options::from_system(sys, prec, a.global_batch);
  opt.matmul = parse_matmul_mode(a.matmul);
  opt.search_seconds = a.time_limit;
  if (a.o_flash->count()) opt.flash_attention = a.flash;
  if (a.o_drop->count()) opt.dropout = a.dropout;
  if (a.o_ov->count()) opt.overlap_dp = a.overlap;
  if (a.o_fp32g->count()) opt.fp32_grad_accumulation = a.fp32_grads;
  return opt;
}

Pins plan_pins(const PlanArgs& a) {
  Pins pins;
  pins.order = a.order;
  if (a.o_tp->count()) pins.tp = a.tp;
  if (a.o_pp->count()) pins.pp = a.pp;
  if (a.o_dp->count()) pins.dp = a.dp;
  if (a.o_dp_shard->count()) pins.dp_shard = a.dp_shard;
  if (a.o_dp_replicate->count()) pins.dp_replicate = a.dp_replicate;
  if (a.o_mb->count()) pins.micro_batch = a.micro_batch;
  if (a.o_zero->count()) pins.zero = a.zero;
  if (a.o_rc->count()) pins.recompute = parse_recompute(a.recompute);
  if (a.o_rcl->count()) pins.recompute_layers = a.recompute_layers;
  if (a.o_sp->count()) pins.sequence_parallel = a.sp;
  if (a.o_sch->count()) pins.schedule = parse_schedule(a.schedule);
  if (a.o_v->count()) pins.virtual_stages = a.vstages;
  if (a.o_zeropp->count()) pins.zeropp = parse_zeropp(a.zeropp);
  if (pins.zeropp == ZeroPP::kCustom) throw_input("--zeropp custom: give the knobs (--qwz, --hpz, --qgz, --hierarchy) instead");
  if (a.o_qwz->count()) pins.qwz = a.qwz;
  if (a.o_qgz->count()) pins.qgz = a.qgz;
  if (a.o_hpz->count()) pins.hpz = a.hpz;
  if (a.o_block->count()) pins.quant_block = a.quant_block;
  if (a.o_hier->count()) {
    std::vector<int> h;
    for (int64_t v : parse_counts(a.hierarchy, "--hierarchy", "2,8")) h.push_back(static_cast<int>(v));
    pins.hierarchy = h;
  }
  pins.allow_lossy = a.allow_lossy;
  if (a.o_compression->count()) {
    if (a.compression == "any") {
      pins.allow_lossy = true;
    } else {
      if (a.allow_lossy) {
        throw_input("--allow-lossy lets the search choose a policy; it does not combine with the pinned --compression {}",
                    a.compression);
      }
      pins.compression = parse_compression(a.compression);
    }
  }
  return pins;
}

// The devices: --gpus, or tp x pp x dp when all three are pinned (dp as --dp, or as
// --dp-shard x --dp-replicate).
int64_t plan_gpus(const PlanArgs& a, const Pins& pins) {
  int64_t gpus = a.gpus;
  if (!a.o_gpus->count()) {
    const bool dp_known = pins.dp || (pins.dp_shard && pins.dp_replicate);
    if (!(pins.tp && pins.pp && dp_known)) {
      throw_input("--gpus is required unless --tp, --pp and --dp (or --dp-shard and --dp-replicate) are all given");
    }
    const int64_t dp = pins.dp ? int64_t{a.dp} : int64_t{a.dp_shard} * a.dp_replicate;
    gpus = static_cast<int64_t>(a.tp) * a.pp * dp;
  }
  if (gpus <= 0) throw_input("--gpus must be positive, got {}", gpus);
  // Bounded work (issue 34 class 6): the search walks the divisors of the device count.
  if (gpus > kMaxPlanDevices) throw_input("--gpus {} is more than the {} devices weft plan searches", gpus, kMaxPlanDevices);
  return gpus;
}

// What the planner is asked: the model on the machine, the options and the pinned choices.
struct PlanQuery {
  ModelShape shape;
  System sys;
  Precision prec = Precision::kBf16;
  Options opt;
  Pins pins;
  int64_t gpus = 0;
};

// The query the options describe; InputError naming the values for any that cannot work.
PlanQuery make_query(const PlanArgs& a) {
  PlanQuery q;
  q.shape = plan_model(a);
  q.sys = load_system(a.system_path);
  // A file weft calibrate measured on another machine or with other libraries: said, with what
  // differs (the ranks and threads are the layout's to choose).
  if (!q.sys.machine.empty()) {
    for (const std::string& d : fingerprint_differences(q.sys.machine, this_machine(1, 1), false)) {
      fmt::print(stderr, "weft plan: note: {} was calibrated on another machine: {}\n", a.system_path, d);
    }
  }
  // The default: bf16 where the family trains in it; fp32 for weft's own CPU runs of the decoder
  // variants (model/config.h's BlockOptions), which have fp32 storage only so far.
  const bool fp32_only = !q.shape.family->capabilities().mixed_precision ||
                         (q.sys.defaults.memory_model == "weft" && !q.shape.base.block.is_default());
  q.prec = !a.precision.empty() ? parse_precision(a.precision) : fp32_only ? Precision::kFp32 : Precision::kBf16;
  if (a.global_batch <= 0) throw_input("--global-batch must be positive, got {}", a.global_batch);
  if (a.global_batch > std::numeric_limits<int32_t>::max()) {
    throw_input("--global-batch {} is more than the {} sequences a step can hold (weft train's limit)", a.global_batch,
                std::numeric_limits<int32_t>::max());
  }
  if (a.top <= 0) throw_input("--top must be positive, got {}", a.top);
  if (!(a.time_limit >= 0) || !std::isfinite(a.time_limit)) {
    throw_input("--time-limit must be a finite number of seconds >= 0, got {}", a.time_limit);
  }
  // The outputs, tried before any search (issue 34 class 5).
  if (!a.csv.empty()) check_output_file(a.csv, "--csv");
  if (!a.plot.empty()) check_output_file(a.plot, "--plot");
  q.opt = plan_options(a, q.sys, q.prec);
  q.pins = plan_pins(a);
  if (q.pins.compression) {
    // Before any search (--scaling would report every point as unmatched instead).
    if (std::string e = compression_system_error(q.pins.compression->policy, q.sys); !e.empty()) {
      throw_input("--compression {}: {}", a.compression, e);
    }
  }
  q.gpus = plan_gpus(a, q.pins);
  // Pins that no valid layout matches are refused by the search with the layout rule that
  // refused them (parallel/layout_rules.h, the trainer's rules).
  return q;
}

// The device counts of --scaling: --scaling-gpus, or gpus/8, gpus/4, gpus/2 and gpus.
std::vector<int64_t> scaling_counts(const PlanArgs& a, int64_t gpus) {
  if (!a.scaling_gpus.empty()) {
    std::vector<int64_t> counts = parse_counts(a.scaling_gpus);
    for (int64_t g : counts) {
      if (g > kMaxPlanDevices) throw_input("--scaling-gpus: {} is more than the {} devices weft plan searches", g, kMaxPlanDevices);
    }
    return counts;
  }
  std::vector<int64_t> counts;
  for (int64_t d : {8, 4, 2, 1}) {
    if (gpus % d == 0) counts.push_back(gpus / d);
  }
  return counts;
}

void print_scaling_header(const PlanQuery& q, const PlanArgs& a, const std::vector<int64_t>& counts, bool weak) {
  fmt::print("{} scaling of {} on {} ({}; efficiency per device vs the first count with a layout):\n",
             weak ? "weak" : "strong", q.shape.name, q.sys.name,
             weak ? fmt::format("global batch {} per {} devices", a.global_batch, counts.front())
                  : fmt::format("global batch {}", a.global_batch));
  fmt::print("  {:>7} {:>8}  {:<44} {:>10} {:>11} {:>6} {:>10}  {}\n", "devices", "batch", "best layout", "step s",
             "tokens/s", "MFU%", "efficiency", "largest loss (share of step)");
}

// The largest term of a step beside the compute: what the scale costs at this point.
std::string largest_loss(const StepTime& t) {
  const std::pair<const char*, double> terms[] = {{"tp comm", t.tp_comm},   {"pp bubble+p2p", t.pp_bubble},
                                                  {"dp exposed", t.dp_exposed}, {"optimizer", t.optimizer},
                                                  {"stragglers", t.stragglers}, {"overhead", t.overhead}};
  const auto* best = &terms[0];
  for (const auto& e : terms) {
    if (e.second > best->second) best = &e;
  }
  return fmt::format("{} {:.1f}%", best->first, t.total > 0 ? 100 * best->second / t.total : 0.0);
}

void print_scaling_point(const ScalingPoint& p) {
  if (p.found) {
    fmt::print("  {:>7} {:>8}  {:<44} {:>10.4g} {:>11.5g} {:>6.2f} {:>9.2f}%  {}\n", p.gpus, p.global_batch,
               p.best.layout.describe(), p.best.step_time_s, p.best.tokens_per_s, 100 * p.best.mfu, 100 * p.efficiency,
               largest_loss(p.best.time));
  } else {
    fmt::print("  {:>7} {:>8}  {}\n", p.gpus, p.global_batch, p.note);
  }
}

// One scaling curve (strong, or weak: the global batch grows with the devices): printed as a
// table in text format and appended to `csv_text`; returns its points as JSON.
nlohmann::json scaling_curve(const PlanQuery& q, const PlanArgs& a, const std::vector<int64_t>& counts, bool weak,
                             std::string& csv_text) {
  const auto pts = plan::scaling(q.shape, q.sys, counts, q.opt, q.pins, weak);
  const char* kind = weak ? "weak" : "strong";
  nlohmann::json arr = nlohmann::json::array();
  if (a.format == "text") print_scaling_header(q, a, counts, weak);
  for (const auto& p : pts) {
    if (a.format == "text") print_scaling_point(p);
    nlohmann::json e = {{"gpus", p.gpus}, {"global_batch", p.global_batch}, {"found", p.found}};
    if (p.found) {
      e["best"] = to_json(p.best);
      e["efficiency"] = p.efficiency;
      csv_text += fmt::format("{},{},{},{},{},{},{},{}\n", kind, p.gpus, p.global_batch, p.best.layout.describe(),
                              p.best.step_time_s, p.best.tokens_per_s, p.best.mfu, p.efficiency);
    }
    arr.push_back(e);
  }
  return arr;
}

// --plot: the curves of `csv_text` as a PNG through gnuplot when it is installed; otherwise
// says so (the CSV has the numbers).
void write_scaling_plot(const std::string& plot, const std::string& csv_text, const PlanQuery& q) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    throw_input("--plot {}: gnuplot is not installed (apt-get install gnuplot-nox), use --csv for the numbers", plot);
  }
  // Written whole through a fresh temporary file renamed into place: never through a link
  // planted at the name, and a full disk names the file (data/text_util.h).
  const std::string data = plot + ".csv";
  write_file_atomic(data, csv_text);
  const std::string script = fmt::format(
      "set terminal png size 900,600; set output '{}'; set datafile separator ','; set logscale x 2; "
      "set xlabel 'devices'; set ylabel 'scaling efficiency (%)'; set yrange [0:110]; set key bottom left; "
      "set title '{} on {}'; plot '{}' using ($2):(stringcolumn(1) eq 'strong' ? 100*$8 : 1/0) with linespoints "
      "title 'strong', '' using ($2):(stringcolumn(1) eq 'weak' ? 100*$8 : 1/0) with linespoints title 'weak'",
      plot, q.shape.name, q.sys.name, data);
  // The script goes through a file: its $2, $8 must not meet a shell.
  const std::string script_file = plot + ".gp";
  write_file_atomic(script_file, script + "\n");
  const std::string cmd = "gnuplot '" + script_file + "'";
  if (std::system(cmd.c_str()) != 0) throw_runtime("gnuplot failed to write {} (script {})", plot, script_file);
  std::error_code ec;
  if (std::filesystem::file_size(plot, ec) == 0 || ec) throw_runtime("gnuplot wrote nothing to {} (script {})", plot, script_file);
  std::remove(script_file.c_str());
}

// --scaling: strong and/or weak scaling efficiency over the device counts.
int run_scaling(const PlanQuery& q, const PlanArgs& a) {
  const std::vector<int64_t> counts = scaling_counts(a, q.gpus);
  const bool do_strong = a.scaling != "weak", do_weak = a.scaling != "strong";
  nlohmann::json j = nlohmann::json::object();
  std::string csv_text = "kind,gpus,global_batch,layout,step_time_s,tokens_per_s,mfu,efficiency\n";
  for (int pass = 0; pass < 2; ++pass) {
    const bool weak = pass == 1;
    if ((weak && !do_weak) || (!weak && !do_strong)) continue;
    j[weak ? "weak" : "strong"] = scaling_curve(q, a, counts, weak, csv_text);
  }
  if (a.format == "json") fmt::print("{}\n", j.dump());
  if (!a.csv.empty()) {
    write_file_atomic(a.csv, csv_text);
  }
  if (!a.plot.empty()) write_scaling_plot(a.plot, csv_text, q);
  return 0;
}

// The layouts to show: the fastest that fit, or a fully pinned layout even when it does not.
// InputError naming the smallest layout when nothing fits.
std::vector<Prediction> shown_layouts(const SearchResult& r, const PlanQuery& q) {
  if (!r.top.empty()) return r.top;
  if (r.evaluated == 1 && r.smallest) return {*r.smallest};
  const Prediction& s = *r.smallest;
  throw_input("no layout of {} on {} x {} fits in memory: of {} valid layouts the smallest, {}, needs {} GB on stage {} "
              "(params {}, grads {}, optimizer {}, activations {}, workspace {}, comm {}); a device has {} GB{}",
              q.shape.name, q.gpus, q.sys.device.name, r.evaluated, s.layout.describe(), gb(s.memory.total),
              s.memory.stage, gb(s.memory.params), gb(s.memory.grads), gb(s.memory.optimizer), gb(s.memory.activations),
              gb(s.memory.workspace), gb(s.memory.comm), gb(q.sys.device.memory_bytes),
              r.stopped ? fmt::format(" (the search stopped at its time limit of {:g} s before it saw every layout: pin --tp, "
                                      "--pp or --micro-batch, or raise --time-limit)", q.opt.search_seconds)
                        : "");
}

void print_ranking(const PlanQuery& q, const PlanArgs& a, const SearchResult& r, const std::vector<Prediction>& shown) {
  const System& sys = q.sys;
  const bool blocks = q.shape.family->capabilities().transformer_blocks;
  const double params = q.shape.total_params();
  fmt::print("{} ({}) on {} x {} ({}), global batch {}, {}\n", q.shape.name,
             blocks ? fmt::format("{:.4g}B parameters, seq {}", params / 1e9, q.shape.seq)
                    : fmt::format("{:.4g}M parameters; {}", params / 1e6, q.shape.family->describe_shape(q.shape.config())),
             q.gpus, sys.device.name, sys.name, a.global_batch,
             precision_name(q.prec));
  fmt::print("searched {} valid layouts in {:.3f} s; {} fit in {} GB per device\n\n", r.evaluated, r.seconds, r.fitting,
             gb(sys.device.memory_bytes));
  print_table(shown, sys.device.memory_bytes);
  fmt::print("\n{}\n", q.shape.family->capabilities().plan_legend);
  if (shown.size() >= 2) fmt::print("\n{}\n", explain(shown[0], shown[1]));
  if (shown.size() == 1 && !shown[0].fits) {
    fmt::print("\nthis layout needs {} GB per device on stage {}; the device has {} GB\n", gb(shown[0].memory.total),
               shown[0].memory.stage, gb(sys.device.memory_bytes));
  }
}

// The `top` fastest layouts, as a table or JSON.
int run_search(const PlanQuery& q, const PlanArgs& a) {
  const SearchResult r = search_layouts(q.shape, q.sys, q.gpus, q.opt, q.pins, static_cast<size_t>(a.top));
  if (r.stopped) {
    log_warn("the search stopped at its time limit of {:g} s after {} valid layouts: the ranking covers those only; pin "
             "--tp, --pp or --micro-batch, or raise --time-limit",
             a.time_limit, r.evaluated);
  }
  const std::vector<Prediction> shown = shown_layouts(r, q);
  if (q.pins.compression) {
    // A pinned codec on traffic the best layout does not have compresses nothing: say so.
    for (const std::string& w : compression_warnings(shown.front().layout.compression, shown.front().layout)) {
      log_warn("{} ({})", w, shown.front().layout.describe());
    }
  }
  std::optional<Prediction> explained;
  if (a.explain) {
    Options o = q.opt;
    o.explain = true;
    explained = predict_unchecked(q.shape, q.sys, shown.front().layout, o);
  }
  if (a.format == "json") {
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& p : shown) arr.push_back(to_json(p));
    if (explained) arr[0]["explain"] = explain_json(*explained);
    fmt::print("{}\n", arr.dump());
    return 0;
  }
  print_ranking(q, a, r, shown);
  if (explained) print_explain(*explained);
  return 0;
}

// The family settings `--model.NAME VALUE` (or `--model.NAME=VALUE`, as weft train takes them)
// taken out of the arguments; the rest are CLI11's.
std::vector<char*> take_model_settings(int argc, char** argv, std::map<std::string, std::string>& settings) {
  const std::vector<std::string> args(argv, argv + argc);
  std::vector<char*> rest;
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i].rfind("--model.", 0) != 0 || args[i].size() <= 8) {
      rest.push_back(argv[i]);
      continue;
    }
    const auto [key, value] = parse_override(args, i);  // model.NAME
    settings[key.substr(6)] = value;
  }
  return rest;
}

}  // namespace

int cmd_plan(CLI::App& app, int argc, char** argv, Communicator&) {
  PlanArgs a;
  add_plan_options(app, a);
  std::vector<char*> rest = take_model_settings(argc, argv, a.settings);
  std::vector<char*> args{argv[0]};
  args.insert(args.end(), rest.begin(), rest.end());
  app.parse(static_cast<int>(args.size()) - 1, args.data() + 1);
  const PlanQuery q = make_query(a);
  if (a.o_scaling->count()) {
    if (a.explain) throw_input("--explain takes one layout apart; it does not combine with --scaling {}", a.scaling);
    return run_scaling(q, a);
  }
  return run_search(q, a);
}

}  // namespace weft
