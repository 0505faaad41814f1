// `weft plan`: predicts memory and step time of layouts and ranks them; `weft calibrate`:
// measures this machine and writes a system file.
#include "plan_cmd.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "model/config.h"
#include "plan/calibrate.h"
#include "plan/predict.h"
#include "plan/search.h"

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
        {"micro_batch", l.micro_batch},
        {"zero", l.zero},
        {"recompute", recompute_name(l.recompute)},
        {"sequence_parallel", l.sequence_parallel},
        {"schedule", schedule_name(l.schedule)},
        {"virtual_stages", l.virtual_stages}}},
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
        {"optimizer", p.time.optimizer}}},
      {"memory_bytes",
       {{"params", m.params},
        {"grads", m.grads},
        {"optimizer", m.optimizer},
        {"activations", m.activations},
        {"workspace", m.workspace},
        {"comm", m.comm},
        {"total", m.total},
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

std::vector<int64_t> parse_counts(const std::string& s) {
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
      throw_input("--scaling-gpus: '{}' is not a positive integer (expected a comma-separated list, e.g. 128,256,512)", tok);
    }
  }
  return out;
}

}  // namespace

int cmd_plan(CLI::App& app, int argc, char** argv) {
  std::string model = "", system_path, precision = "bf16", format = "text", recompute, schedule, order = "tp-dp-pp";
  int64_t layers = 0, hidden = 0, heads = 0, seq = 0, vocab = 0, ffn = 0, gpus = 0, global_batch = 0, top = 5;
  int tp = 0, pp = 0, dp = 0, zero = 0, vstages = 0, recompute_layers = -1;
  int64_t micro_batch = 0;
  bool sp = false, flash = false, dropout = false, overlap = false;
  std::string scaling, scaling_gpus, csv, plot;
  app.add_option("--model", model, "model preset (gpt2-124m, gpt-22b, gpt-175b, gpt-1t, ...)");
  app.add_option("--layers", layers, "layers (with --hidden --heads: a custom model, or override the preset)");
  app.add_option("--hidden", hidden, "hidden size");
  app.add_option("--heads", heads, "attention heads");
  app.add_option("--seq", seq, "sequence length (default: the model context)");
  app.add_option("--vocab", vocab, "vocabulary (padded to a multiple of 128)");
  app.add_option("--ffn", ffn, "MLP size (default 4 x hidden)");
  app.add_option("--system", system_path, "system file (systems/frontier.toml, systems/local.toml from weft calibrate)")
      ->required();
  auto* o_gpus = app.add_option("--gpus", gpus, "devices (default: tp x pp x dp when all three are pinned)");
  app.add_option("--global-batch", global_batch, "sequences per optimizer step")->required();
  app.add_option("--precision", precision, "bf16, fp16 or fp32");
  auto* o_tp = app.add_option("--tp", tp, "pin the tensor-parallel size");
  auto* o_pp = app.add_option("--pp", pp, "pin the pipeline stages");
  auto* o_dp = app.add_option("--dp", dp, "pin the data-parallel size");
  auto* o_mb = app.add_option("--micro-batch", micro_batch, "pin the micro-batch size (sequences)");
  auto* o_zero = app.add_option("--zero", zero, "pin the ZeRO stage 0..3");
  auto* o_rc = app.add_option("--recompute", recompute, "pin recompute: none, selective, full");
  auto* o_rcl = app.add_option("--recompute-layers", recompute_layers, "full recompute: layers per stage (default all)");
  auto* o_sp = app.add_flag("--sequence-parallel,!--no-sequence-parallel", sp, "pin sequence parallelism on (or off)");
  auto* o_sch = app.add_option("--schedule", schedule, "pin the pipeline schedule: gpipe, 1f1b, interleaved");
  auto* o_v = app.add_option("--virtual-stages", vstages, "pin the virtual stages (interleaved schedule)");
  app.add_option("--order", order, "rank order, first axis fastest (tp-dp-pp)");
  auto* o_flash = app.add_flag("--flash-attention,!--no-flash-attention", flash, "override the system's [defaults]");
  auto* o_drop = app.add_flag("--dropout,!--no-dropout", dropout, "override the system's [defaults]");
  auto* o_ov = app.add_flag("--overlap-dp,!--no-overlap-dp", overlap, "override the system's [defaults]");
  app.add_option("--top", top, "layouts to print");
  app.add_option("--format", format, "text or json")->check(CLI::IsMember({"text", "json"}));
  auto* o_scaling = app.add_option("--scaling", scaling, "strong, weak or both: scaling efficiency vs device count")
                        ->check(CLI::IsMember({"strong", "weak", "both"}))
                        ->expected(0, 1)
                        ->default_str("both");
  app.add_option("--scaling-gpus", scaling_gpus, "device counts for --scaling (default: gpus/8, gpus/4, gpus/2, gpus)");
  app.add_option("--csv", csv, "--scaling: also write the curves as CSV to this file");
  app.add_option("--plot", plot, "--scaling: also write a PNG plot (needs gnuplot on the PATH)");
  app.parse(argc - 1, argv + 1);

  // The model.
  ModelConfig mc;
  if (!model.empty()) {
    mc = model_preset(model);
  } else {
    if (layers <= 0 || hidden <= 0 || heads <= 0) {
      throw_input("give --model PRESET or --layers, --hidden and --heads (got layers {}, hidden {}, heads {})", layers,
                  hidden, heads);
    }
    mc.name = "custom";
    mc.n_ctx = 1024;
  }
  for (auto [v, what] : {std::pair{layers, "--layers"}, {hidden, "--hidden"}, {heads, "--heads"}, {seq, "--seq"},
                         {vocab, "--vocab"}, {ffn, "--ffn"}}) {
    if (v < 0) throw_input("{} must be positive, got {}", what, v);
  }
  if (layers > 0 || hidden > 0 || heads > 0 || vocab > 0 || ffn > 0 || seq > mc.n_ctx) {
    const int L = layers > 0 ? static_cast<int>(layers) : mc.n_layer;
    const int C = hidden > 0 ? static_cast<int>(hidden) : mc.n_embd;
    const int NH = heads > 0 ? static_cast<int>(heads) : mc.n_head;
    const int ctx = static_cast<int>(std::max<int64_t>(seq, mc.n_ctx));
    const int V = vocab > 0 ? static_cast<int>(vocab) : mc.vocab_size;
    const int F = ffn > 0 ? static_cast<int>(ffn) : (hidden > 0 ? 4 * C : mc.ffn);
    mc = make_model_config(mc.name, L, NH, C, ctx, V, F);
  }
  const ModelShape shape = ModelShape::from_config(mc, seq);
  shape.validate();

  const System sys = load_system(system_path);
  const Precision prec = parse_precision(precision);
  if (global_batch <= 0) throw_input("--global-batch must be positive, got {}", global_batch);
  if (top <= 0) throw_input("--top must be positive, got {}", top);
  Options opt = Options::from_system(sys, prec, global_batch);
  opt.rank_order = order;
  if (o_flash->count()) opt.flash_attention = flash;
  if (o_drop->count()) opt.dropout = dropout;
  if (o_ov->count()) opt.overlap_dp = overlap;

  Pins pins;
  if (o_tp->count()) pins.tp = tp;
  if (o_pp->count()) pins.pp = pp;
  if (o_dp->count()) pins.dp = dp;
  if (o_mb->count()) pins.micro_batch = micro_batch;
  if (o_zero->count()) pins.zero = zero;
  if (o_rc->count()) pins.recompute = parse_recompute(recompute);
  if (o_rcl->count()) pins.recompute_layers = recompute_layers;
  if (o_sp->count()) pins.sequence_parallel = sp;
  if (o_sch->count()) pins.schedule = parse_schedule(schedule);
  if (o_v->count()) pins.virtual_stages = vstages;
  if (!o_gpus->count()) {
    if (!(pins.tp && pins.pp && pins.dp)) throw_input("--gpus is required unless --tp, --pp and --dp are all given");
    gpus = static_cast<int64_t>(tp) * pp * dp;
  }
  if (gpus <= 0) throw_input("--gpus must be positive, got {}", gpus);
  // Pins that no valid layout matches are refused by the search with the layout rule that
  // refused them (parallel/layout_rules.h, the trainer's rules).

  if (o_scaling->count()) {
    std::vector<int64_t> counts;
    if (!scaling_gpus.empty()) {
      counts = parse_counts(scaling_gpus);
    } else {
      for (int64_t d : {8, 4, 2, 1}) {
        if (gpus % d == 0) counts.push_back(gpus / d);
      }
    }
    const bool do_strong = scaling != "weak", do_weak = scaling != "strong";
    nlohmann::json j = nlohmann::json::object();
    std::string csv_text = "kind,gpus,global_batch,layout,step_time_s,tokens_per_s,mfu,efficiency\n";
    for (int pass = 0; pass < 2; ++pass) {
      const bool weak = pass == 1;
      if ((weak && !do_weak) || (!weak && !do_strong)) continue;
      const auto pts = plan::scaling(shape, sys, counts, opt, pins, weak);
      const char* kind = weak ? "weak" : "strong";
      nlohmann::json arr = nlohmann::json::array();
      if (format == "text") {
        fmt::print("{} scaling of {} on {} ({}; efficiency per device vs the first count with a layout):\n", kind, shape.name, sys.name,
                   weak ? fmt::format("global batch {} per {} devices", global_batch, counts.front())
                        : fmt::format("global batch {}", global_batch));
        fmt::print("  {:>7} {:>8}  {:<44} {:>10} {:>11} {:>6} {:>10}\n", "devices", "batch", "best layout", "step s",
                   "tokens/s", "MFU%", "efficiency");
      }
      for (const auto& p : pts) {
        if (format == "text") {
          if (p.found) {
            fmt::print("  {:>7} {:>8}  {:<44} {:>10.4g} {:>11.5g} {:>6.2f} {:>9.2f}%\n", p.gpus, p.global_batch,
                       p.best.layout.describe(), p.best.step_time_s, p.best.tokens_per_s, 100 * p.best.mfu,
                       100 * p.efficiency);
          } else {
            fmt::print("  {:>7} {:>8}  {}\n", p.gpus, p.global_batch, p.note);
          }
        }
        nlohmann::json e = {{"gpus", p.gpus}, {"global_batch", p.global_batch}, {"found", p.found}};
        if (p.found) {
          e["best"] = to_json(p.best);
          e["efficiency"] = p.efficiency;
          csv_text += fmt::format("{},{},{},{},{},{},{},{}\n", kind, p.gpus, p.global_batch, p.best.layout.describe(),
                                  p.best.step_time_s, p.best.tokens_per_s, p.best.mfu, p.efficiency);
        }
        arr.push_back(e);
      }
      j[kind] = arr;
    }
    if (format == "json") fmt::print("{}\n", j.dump());
    if (!csv.empty()) {
      std::ofstream f(csv);
      if (!f) throw_input("cannot write {}", csv);
      f << csv_text;
    }
    if (!plot.empty()) {
      // PNG through gnuplot when it is installed; otherwise say so (the CSV has the numbers).
      if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
        throw_input("--plot {}: gnuplot is not installed (apt-get install gnuplot-nox), use --csv for the numbers", plot);
      }
      const std::string data = plot + ".csv";
      std::ofstream(data) << csv_text;
      const std::string script = fmt::format(
          "set terminal png size 900,600; set output '{}'; set datafile separator ','; set logscale x 2; "
          "set xlabel 'devices'; set ylabel 'scaling efficiency (%)'; set yrange [0:110]; set key bottom left; "
          "set title '{} on {}'; plot '{}' using ($2):(stringcolumn(1) eq 'strong' ? 100*$8 : 1/0) with linespoints "
          "title 'strong', '' using ($2):(stringcolumn(1) eq 'weak' ? 100*$8 : 1/0) with linespoints title 'weak'",
          plot, shape.name, sys.name, data);
      // The script goes through a file: its $2, $8 must not meet a shell.
      const std::string script_file = plot + ".gp";
      std::ofstream(script_file) << script << "\n";
      const std::string cmd = "gnuplot '" + script_file + "'";
      if (std::system(cmd.c_str()) != 0) throw_runtime("gnuplot failed to write {} (script {})", plot, script_file);
      std::error_code ec;
      if (std::filesystem::file_size(plot, ec) == 0 || ec) throw_runtime("gnuplot wrote nothing to {} (script {})", plot, script_file);
      std::remove(script_file.c_str());
    }
    return 0;
  }

  const SearchResult r = search_layouts(shape, sys, gpus, opt, pins, static_cast<size_t>(top));
  std::vector<Prediction> shown = r.top;
  if (shown.empty()) {
    if (r.evaluated == 1 && r.smallest) {
      shown.push_back(*r.smallest);  // a fully pinned layout is shown even when it does not fit
    } else {
      const Prediction& s = *r.smallest;
      throw_input("no layout of {} on {} x {} fits in memory: of {} valid layouts the smallest, {}, needs {} GB on stage {} "
                  "(params {}, grads {}, optimizer {}, activations {}, workspace {}, comm {}); a device has {} GB",
                  shape.name, gpus, sys.device.name, r.evaluated, s.layout.describe(), gb(s.memory.total),
                  s.memory.stage, gb(s.memory.params), gb(s.memory.grads), gb(s.memory.optimizer),
                  gb(s.memory.activations), gb(s.memory.workspace), gb(s.memory.comm), gb(sys.device.memory_bytes));
    }
  }
  if (format == "json") {
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& p : shown) arr.push_back(to_json(p));
    fmt::print("{}\n", arr.dump());
    return 0;
  }
  fmt::print("{} ({:.4g}B parameters, seq {}) on {} x {} ({}), global batch {}, {}\n", shape.name,
             shape.total_params() / 1e9, shape.seq, gpus, sys.device.name, sys.name, global_batch, precision_name(prec));
  fmt::print("searched {} valid layouts in {:.3f} s; {} fit in {} GB per device\n\n", r.evaluated, r.seconds, r.fitting,
             gb(sys.device.memory_bytes));
  print_table(shown, sys.device.memory_bytes);
  fmt::print("\ntimes in seconds per step; memory in GB on the fullest pipeline stage; MFU = model FLOPs (6N + 12LHS per token) / peak, HFU counts recomputation\n");
  if (shown.size() >= 2) fmt::print("\n{}\n", explain(shown[0], shown[1]));
  if (shown.size() == 1 && !shown[0].fits) {
    fmt::print("\nthis layout needs {} GB per device on stage {}; the device has {} GB\n", gb(shown[0].memory.total),
               shown[0].memory.stage, gb(sys.device.memory_bytes));
  }
  return 0;
}

int cmd_calibrate(CLI::App& app, int argc, char** argv, Communicator& world) {
  std::string out = "systems/local.toml", name = "local";
  int threads = 0;
  bool quick = false;
  app.add_option("--out", out, "system file to write");
  app.add_option("--name", name, "system name");
  app.add_option("--threads", threads, "threads per rank (0: OMP_NUM_THREADS or all cores)");
  app.add_flag("--quick", quick, "fewer sizes and repetitions (seconds instead of a minute)");
  app.parse(argc - 1, argv + 1);
  CalibrationOptions o;
  o.threads = threads;
  o.quick = quick;
  o.name = name;
  const Calibration c = calibrate(o, world);
  if (world.rank() == 0) {
    const std::filesystem::path p(out);
    if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
    std::ofstream f(out);
    if (!f) throw_input("cannot write {}", out);
    f << system_to_toml(c.system, c.notes);
    for (const auto& n : c.notes) fmt::print("{}\n", n);
    fmt::print("wrote {}\n", out);
  }
  return 0;
}

}  // namespace weft
