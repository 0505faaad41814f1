#include "report/plots.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace weft::report {

namespace {

// "A: training" in an overlay, "training" for one run.
std::string series_title(const std::vector<const Run*>& runs, size_t r, const std::string& what) {
  return runs.size() == 1 ? what : runs[r]->label + ": " + what;
}

// Text for inside a double-quoted gnuplot string (titles that hold a line break, datablock
// labels): without the characters that would end or escape it.
std::string plain(std::string s) {
  std::replace(s.begin(), s.end(), '"', '\'');
  std::replace(s.begin(), s.end(), '\\', '/');
  return s;
}

// A string column of a datablock: in double quotes (gnuplot's data files know no other), so a
// label may hold spaces.
std::string data_string(const std::string& s) {
  std::string out(1, '"');  // (not "\"" + ...: GCC 12 warns falsely on that form, -Wrestrict)
  out += plain(s);
  out += '"';
  return out;
}

// An x range one unit wider than the bars on each side (the first column of `rows` is x), so
// that a plot of few bars does not stretch them across the whole width.
std::string bar_xrange(const std::vector<std::string>& rows) {
  double lo = 0, hi = 0;
  for (const std::string& r : rows) lo = std::min(lo, std::stod(r)), hi = std::max(hi, std::stod(r));
  return fmt::format("set xrange [{:.2f}:{:.2f}]\n", lo - 1.0, hi + 1.0);
}

std::string plot_command(const std::vector<std::string>& parts) {
  std::string s = "plot ";
  for (size_t i = 0; i < parts.size(); ++i) s += (i ? ", \\\n     " : "") + parts[i];
  return s + "\n";
}

// The memory categories drawn as stacked bars (the total is drawn as a marker).
constexpr size_t kStacked = kMemTotal;
// One colour per memory category, the same in every run.
const char* const kCategoryColours = "#1f4e9c #4a90d9 #2a9d8f #e9c46a #f4a261 #e76f51";

}  // namespace

std::string loss_script(const Gnuplot& gp, const std::vector<const Run*>& runs) {
  std::string s = script_header(gp, "loss", 960, 540);
  s += "set title 'Training and validation loss'\nset xlabel 'tokens trained'\n"
       "set ylabel 'loss (nats per token)'\nset format x '%.1s%c'\n";
  // The second run is drawn thinner and dashed, with open markers: runs of two layouts that
  // follow the same curve (layout invariance) both stay visible.
  static const char* const kTrainStyle[] = {"lw 3", "lw 1.5 dt (6,4)"};
  static const char* const kValStyle[] = {"pt 7 ps 1.4 lw 1.5 dt 2", "pt 6 ps 2.0 lw 1 dt 3"};
  std::vector<std::string> parts;
  for (size_t r = 0; r < runs.size(); ++r) {
    std::vector<std::string> train, val;
    for (const StepPoint& p : runs[r]->steps) train.push_back(fmt::format("{} {:.9g}", p.tokens, p.loss));
    for (const ValPoint& v : runs[r]->vals) val.push_back(fmt::format("{} {:.9g}", v.tokens, v.val_loss));
    const int c = static_cast<int>(r);
    s += datablock(fmt::format("train{}", r), train);
    parts.push_back(fmt::format("$train{} using 1:2 with lines {} lc rgb '{}' title {}", r, kTrainStyle[c],
                                series_colour(c, 0), quoted(series_title(runs, r, "training"))));
    if (val.empty()) continue;
    s += datablock(fmt::format("val{}", r), val);
    parts.push_back(fmt::format("$val{} using 1:2 with linespoints {} lc rgb '{}' title {}", r, kValStyle[c],
                                series_colour(c, 1), quoted(series_title(runs, r, "validation"))));
  }
  return s + plot_command(parts);
}

namespace {

// One panel of the throughput plot: column `col` of $steps<r> against the step, and the
// planner's value (value(pred_s) for a run with a prediction) as a dashed line.
std::string throughput_panel(const std::vector<const Run*>& runs, int col, const std::string& ylabel,
                             double (*value)(const Run&, double)) {
  std::string s = fmt::format("set ylabel {}\nset xlabel 'step'\nset yrange [0:*]\n", quoted(ylabel));
  std::vector<std::string> parts;
  for (size_t r = 0; r < runs.size(); ++r) {
    const int c = static_cast<int>(r);
    parts.push_back(fmt::format("$steps{} using 1:{} with linespoints pt 7 ps 0.8 lw 2 lc rgb '{}' title {}", r, col,
                                series_colour(c, 0), quoted(series_title(runs, r, "measured"))));
    if (const auto& st = runs[r]->step_time) {
      parts.push_back(fmt::format("{:.9g} with lines lw 2 dt 2 lc rgb '{}' title {}", value(*runs[r], st->predicted_s),
                                  series_colour(c, 1), quoted(series_title(runs, r, "planner's prediction"))));
    }
  }
  return s + plot_command(parts);
}

}  // namespace

std::string throughput_script(const Gnuplot& gp, const std::vector<const Run*>& runs) {
  std::string s = script_header(gp, "throughput", 960, 760);
  for (size_t r = 0; r < runs.size(); ++r) {
    std::vector<std::string> rows;
    for (const StepPoint& p : runs[r]->steps) {
      rows.push_back(fmt::format("{} {:.9g} {:.9g}", p.step, p.tokens_per_s, p.ms));
    }
    s += datablock(fmt::format("steps{}", r), rows);
  }
  // The same left margin in both panels, so that their step axes line up.
  s += "set multiplot layout 2,1 title \"Throughput and step time against the planner's prediction\"\nset lmargin 11\n";
  s += throughput_panel(runs, 2, "tokens/s", [](const Run& run, double pred_s) {
    return static_cast<double>(run.tokens_per_step()) / pred_s;
  });
  s += throughput_panel(runs, 3, "step time (ms)", [](const Run&, double pred_s) { return pred_s * 1e3; });
  return s + "unset multiplot\n";
}

namespace {

// The stacked bars of the memory plot: per run, per rank, a predicted and a measured bar.
// Row: x, label, the cumulative category sums (kStacked columns), the total peak.
std::vector<std::string> memory_rows(const std::vector<const Run*>& runs, double scale) {
  std::vector<std::string> rows;
  double x = 0;
  for (size_t r = 0; r < runs.size(); ++r) {
    for (const RankMemory& m : runs[r]->memory) {
      for (int measured = 0; measured < 2; ++measured) {
        const auto& v = measured ? m.measured : m.predicted;
        std::string label =
            fmt::format("{}r{} {}", runs.size() > 1 ? runs[r]->label + " " : "", m.rank, measured ? "meas." : "pred.");
        std::string row = fmt::format("{:.2f} {}", x, data_string(label));
        double cum = 0;
        for (size_t k = 0; k < kStacked; ++k) row += fmt::format(" {:.6g}", (cum += v[k]) / scale);
        rows.push_back(row + fmt::format(" {:.6g}", v[kMemTotal] / scale));
        x += 1.0;
      }
      x += 0.6;  // a gap between ranks
    }
    x += 0.8;  // and a wider one between runs
  }
  return rows;
}

}  // namespace

std::string memory_script(const Gnuplot& gp, const std::vector<const Run*>& runs) {
  double max_bytes = 0;
  size_t bars = 0;
  for (const Run* run : runs) {
    for (const RankMemory& m : run->memory) {
      double p = 0, q = 0;
      for (size_t k = 0; k < kStacked; ++k) p += m.predicted[k], q += m.measured[k];
      max_bytes = std::max({max_bytes, p, q});
      bars += 2;
    }
  }
  const ByteUnit unit = byte_unit(max_bytes);
  std::string s = script_header(gp, "memory", std::clamp(static_cast<int>(200 + 50 * bars), 800, 2400), 560);
  const std::vector<std::string> rows = memory_rows(runs, unit.scale);
  s += datablock("mem", rows) + bar_xrange(rows);
  s += fmt::format(
      "set title 'Memory per rank by category: predicted (planner) and measured (peak of the training steps)'\n"
      "set ylabel 'bytes ({})'\nset yrange [0:*]\nset xtics rotate by 35 right\nset grid noxtics\n"
      "set style fill solid 0.9 border rgb '#404040'\nset boxwidth 0.85\n"
      "colours = '{}'\nnames = '",
      unit.name, kCategoryColours);
  for (size_t k = 0; k < kStacked; ++k) s += fmt::format("{}{}", k ? " " : "", kMemCategories[k]);
  // Drawn from the top of the stack down, each box from zero, so each category shows its share.
  s += fmt::format(
      "'\nplot for [k={}:1:-1] $mem using 1:(column(k+2)):xtic(2) with boxes lc rgb word(colours, k) "
      "title word(names, k), \\\n     $mem using 1:{} with points pt 9 ps 1.6 lc rgb 'black' "
      "title 'total peak'\n",
      kStacked, kStacked + 3);
  return s;
}

namespace {

// Per stage of each run with a pipeline: busy, blocked on a receive, and the rest of the idle
// time (idle = span - busy includes the wait), stacked; a row: x, label, the three cumulative.
std::vector<std::string> pipeline_rows(const std::vector<const Run*>& runs) {
  std::vector<std::string> rows;
  double x = 0;
  for (const Run* run : runs) {
    if (!run->pipeline) continue;
    const PipelineSummary& p = *run->pipeline;
    for (int st = 0; st < p.stages; ++st) {
      const double busy = p.busy_ms[st], wait = std::min(p.wait_ms[st], p.idle_ms[st]);
      const double other = std::max(0.0, p.idle_ms[st] - wait);
      const std::string label = fmt::format("{}stage {}", runs.size() > 1 ? run->label + " " : "", st);
      rows.push_back(
          fmt::format("{:.2f} {} {:.6g} {:.6g} {:.6g}", x, data_string(label), busy, busy + wait, busy + wait + other));
      x += 1.0;
    }
    x += 0.8;
  }
  return rows;
}

std::string pipeline_title(const std::vector<const Run*>& runs) {
  std::string t;
  for (const Run* run : runs) {
    if (!run->pipeline) continue;
    const PipelineSummary& p = *run->pipeline;
    t += fmt::format("\\n{}{}, p {}, v {}, m {}: bubble measured {:.2f}, predicted (p-1)/(v m) {:.2f}",
                     runs.size() > 1 ? plain(run->label) + ": " : "", p.schedule, p.stages, p.virtual_stages,
                     p.micro_batches, p.bubble_fraction, p.bubble_predicted);
  }
  return t;
}

}  // namespace

std::string pipeline_script(const Gnuplot& gp, const std::vector<const Run*>& runs) {
  std::string s = script_header(gp, "pipeline", 900, 540);
  const std::vector<std::string> rows = pipeline_rows(runs);
  s += datablock("pipe", rows) + bar_xrange(rows);
  s += "set title \"Pipeline: time of each stage, mean per step" + pipeline_title(runs) + "\"\n";
  s += "set ylabel 'time per step (ms)'\nset yrange [0:*]\nset grid noxtics\nset key below horizontal\n"
       "set style fill solid 0.9 border rgb '#404040'\nset boxwidth 0.7\n";
  s += plot_command({"$pipe using 1:5:xtic(2) with boxes lc rgb '#d9d9d9' title 'idle, other (bubble)'",
                     "$pipe using 1:4 with boxes lc rgb '#f4a261' title 'idle, blocked on a receive (p2p wait)'",
                     "$pipe using 1:3 with boxes lc rgb '#1f4e9c' title 'busy (forward, backward)'"});
  return s;
}

namespace {

// Per (run, level) a series of bars over the axes; a row: x, bytes, the model's bytes (or NaN).
struct CommSeries {
  std::string title;
  int run = 0, shade = 0;  // colour: series_colour(run, shade)
  std::vector<std::string> rows;
  std::vector<std::pair<size_t, double>> bars;  // (axis index, x) of each row
};

std::vector<CommSeries> comm_series(const std::vector<const Run*>& runs, const std::vector<std::string>& axes,
                                    double scale) {
  std::vector<std::pair<size_t, std::string>> keys;  // (run, level)
  for (size_t r = 0; r < runs.size(); ++r) {
    std::set<std::string> levels;
    for (const CommAxisLevel& e : runs[r]->comm.by_axis_level) levels.insert(e.level);
    for (const std::string& l : levels) keys.emplace_back(r, l);
  }
  std::vector<CommSeries> out;
  const double width = static_cast<double>(keys.size()) + 1.0;
  for (size_t k = 0; k < keys.size(); ++k) {
    const auto& [r, level] = keys[k];
    const int shade =
        static_cast<int>(std::count_if(keys.begin(), keys.begin() + k, [&](const auto& o) { return o.first == keys[k].first; }));
    CommSeries s{series_title(runs, r, level), static_cast<int>(r), shade, {}, {}};
    for (size_t a = 0; a < axes.size(); ++a) {
      for (const CommAxisLevel& e : runs[r]->comm.by_axis_level) {
        if (e.axis != axes[a] || e.level != level) continue;
        s.bars.emplace_back(a, a * width + k);
        s.rows.push_back(fmt::format("{:.3f} {:.6g} {}", a * width + k, e.bytes / scale,
                                     e.model_bytes ? fmt::format("{:.6g}", *e.model_bytes / scale) : "NaN"));
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

// An axis's name under the middle of its bars.
std::string comm_xtics(const std::vector<std::string>& axes, const std::vector<CommSeries>& series) {
  std::string s = "set xtics (";
  for (size_t a = 0; a < axes.size(); ++a) {
    double sum = 0;
    int n = 0;
    for (const CommSeries& c : series) {
      for (const auto& [axis, x] : c.bars) {
        if (axis == a) sum += x, ++n;
      }
    }
    s += fmt::format("{}{} {:.3f}", a ? ", " : "", quoted(axes[a]), n ? sum / n : 0.0);
  }
  return s + ")\n";
}

// The y axis of the communication plot: log scale when the axes differ by orders of magnitude
// (tp's activations against pp's small messages), from a decade below the smallest bar.
std::string comm_y_axis(double min_b, double max_b, const ByteUnit& unit) {
  if (min_b <= 0 || max_b / min_b <= 100) return fmt::format("set ylabel 'bytes ({})'\nset yrange [0:*]\n", unit.name);
  const double bottom = std::pow(10.0, std::floor(std::log10(min_b / unit.scale / 2)));
  return fmt::format("set ylabel 'bytes ({}, log scale)'\nset logscale y\nset yrange [{:.3g}:*]\n", unit.name, bottom);
}

}  // namespace

std::string comm_script(const Gnuplot& gp, const std::vector<const Run*>& runs) {
  std::set<std::string> axis_set;
  double max_b = 0, min_b = 0;
  for (const Run* run : runs) {
    for (const CommAxisLevel& e : run->comm.by_axis_level) {
      axis_set.insert(e.axis);
      max_b = std::max(max_b, static_cast<double>(e.bytes));
      if (e.bytes > 0) min_b = min_b == 0 ? e.bytes : std::min(min_b, static_cast<double>(e.bytes));
    }
  }
  const std::vector<std::string> axes(axis_set.begin(), axis_set.end());
  const ByteUnit unit = byte_unit(max_b);
  const std::vector<CommSeries> series = comm_series(runs, axes, unit.scale);
  std::string s = script_header(gp, "communication", 960, 540);
  s += "set title 'Communication of the job by axis and link level (traced steps; points: analytic model)'\n"
       "set xlabel 'axis'\nset grid noxtics\nset style fill solid 0.9 border rgb '#404040'\nset boxwidth 0.9\n";
  std::vector<std::string> all_rows;
  for (const CommSeries& c : series) all_rows.insert(all_rows.end(), c.rows.begin(), c.rows.end());
  s += comm_y_axis(min_b, max_b, unit) + comm_xtics(axes, series) + bar_xrange(all_rows);
  std::vector<std::string> parts;
  for (size_t k = 0; k < series.size(); ++k) {
    s += datablock(fmt::format("comm{}", k), series[k].rows);
    parts.push_back(fmt::format("$comm{} using 1:2 with boxes lc rgb '{}' title {}", k,
                                series_colour(series[k].run, series[k].shade), quoted(series[k].title)));
  }
  for (size_t k = 0; k < series.size(); ++k) {
    parts.push_back(fmt::format("$comm{} using 1:3 with points pt 7 ps 1.3 lc rgb 'black' {}", k,
                                k == 0 ? "title 'analytic model'" : "notitle"));
  }
  return s + plot_command(parts);
}

std::string tasks_script(const Gnuplot& gp, const std::vector<const Run*>& runs) {
  std::string s = script_header(gp, "tasks", 960, 540);
  s += "set title 'In-context-learning accuracy during training'\nset xlabel 'tokens trained'\n"
       "set ylabel 'accuracy'\nset format x '%.1s%c'\nset yrange [0:1.05]\nset key outside right top\n";
  std::vector<std::string> parts;
  int block = 0;
  for (size_t r = 0; r < runs.size(); ++r) {
    // Task names in the order they first appear; acc solid, acc_norm dashed in the same colour.
    std::vector<std::string> names;
    for (const TaskPoint& p : runs[r]->tasks) {
      if (std::find(names.begin(), names.end(), p.task) == names.end()) names.push_back(p.task);
    }
    for (size_t t = 0; t < names.size(); ++t) {
      std::vector<std::string> acc, norm;
      for (const TaskPoint& p : runs[r]->tasks) {
        if (p.task != names[t]) continue;
        acc.push_back(fmt::format("{} {:.9g}", p.tokens, p.acc));
        if (p.acc_norm) norm.push_back(fmt::format("{} {:.9g}", p.tokens, *p.acc_norm));
      }
      const std::string colour = series_colour(static_cast<int>(r), static_cast<int>(t));
      s += datablock(fmt::format("acc{}", block), acc);
      parts.push_back(fmt::format("$acc{} using 1:2 with linespoints pt 7 ps 1.0 lw 2 lc rgb '{}' title {}", block,
                                  colour, quoted(series_title(runs, r, names[t] + " acc"))));
      if (!norm.empty()) {
        s += datablock(fmt::format("norm{}", block), norm);
        parts.push_back(fmt::format("$norm{} using 1:2 with linespoints pt 6 ps 1.2 lw 1.5 dt 2 lc rgb '{}' title {}",
                                    block, colour, quoted(series_title(runs, r, names[t] + " acc_norm"))));
      }
      ++block;
    }
  }
  return s + plot_command(parts);
}

PlotFiles draw_plots(const Gnuplot& gp, const std::string& dir, const std::vector<const Run*>& runs) {
  PlotFiles f;
  run_script(gp, dir, "loss", loss_script(gp, runs));
  f.loss = "loss.png";
  if (std::any_of(runs.begin(), runs.end(), [](const Run* r) { return !r->tasks.empty(); })) {
    run_script(gp, dir, "tasks", tasks_script(gp, runs));
    f.tasks = "tasks.png";
  }
  run_script(gp, dir, "throughput", throughput_script(gp, runs));
  f.throughput = "throughput.png";
  run_script(gp, dir, "memory", memory_script(gp, runs));
  f.memory = "memory.png";
  if (std::any_of(runs.begin(), runs.end(), [](const Run* r) { return r->pipeline.has_value(); })) {
    run_script(gp, dir, "pipeline", pipeline_script(gp, runs));
    f.pipeline = "pipeline.png";
  }
  if (std::any_of(runs.begin(), runs.end(), [](const Run* r) { return !r->comm.by_axis_level.empty(); })) {
    run_script(gp, dir, "communication", comm_script(gp, runs));
    f.comm = "communication.png";
  }
  return f;
}

}  // namespace weft::report
