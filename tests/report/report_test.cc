// `weft report` on real runs of `weft train --trace true` (a 2-stage pipeline on two ranks
// with a planner system file, and a single process without one): valid PNG files, a Markdown
// summary that names every section and states the runs' numbers (recomputed here from the
// raw metrics.jsonl), the overlay of two runs, and every kind of bad input (one line, exit 2,
// the output folder untouched).
//
// comm_report.json comes from the trainer (a traced run writes it at the end); the checks
// recompute what the report states from it. Only the reader's field-by-field test uses a
// FIXTURE (write_comm_report_fixture), to have a row whose model count disagrees.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "comm/topology.h"
#include "comm/tracer.h"
#include "report/markdown.h"
#include "report/run_reader.h"
#include "test_util.h"
#include "train/comm_report.h"

namespace weft {
namespace {

using test::RunResult;
using test::TempDir;
namespace fs = std::filesystem;
using nlohmann::json;

// A communication row of the fixture: (op, axis, level, group size, bytes per call, calls).
struct FixtureRow {
  const char* op;
  const char* axis;
  const char* level;
  int group;
  int64_t bytes, count;
};

// FIXTURE: writes DIR/comm_report.json (schema version 1) with `rows`; the analytic model
// agrees with every row except `mismatched` (its model count is one more).
void write_comm_report_fixture(const std::string& dir, int world, const std::vector<FixtureRow>& rows,
                               int mismatched = -1) {
  json j = {{"version", 1},
            {"world", world},
            {"ranks_per_node", 1},
            {"node_source", "emulated"},
            {"steps", 4},
            {"model", "tiny"},
            {"layout",
             {{"tp", 1},
              {"pp", world},
              {"dp", 1},
              {"sp", false},
              {"zero", 0},
              {"schedule", "1f1b"},
              {"micro_batches", 2},
              {"virtual_stages", 1},
              {"recompute", "none"},
              {"precision", "fp32"}}},
            {"rows", json::array()},
            {"histogram", json::array()},
            {"by_axis_level", json::array()},
            {"mismatches", mismatched >= 0 ? 1 : 0}};
  std::map<std::pair<std::string, std::string>, std::pair<int64_t, int64_t>> levels;  // calls, bytes
  for (size_t i = 0; i < rows.size(); ++i) {
    const FixtureRow& r = rows[i];
    const double t = 1e-4 * static_cast<double>(r.count);
    j["rows"].push_back({{"op", r.op},
                         {"axis", r.axis},
                         {"level", r.level},
                         {"group_size", r.group},
                         {"bytes", r.bytes},
                         {"count", r.count},
                         {"total_bytes", r.bytes * r.count},
                         {"time_s", t},
                         {"mean_latency_s", 1e-4},
                         {"trimmed_mean_latency_s", 1e-4},
                         {"algbw_gbps", r.bytes / 1e-4 / 1e9},
                         {"busbw_gbps", r.bytes / 1e-4 / 1e9},
                         {"model_count", r.count + (static_cast<int>(i) == mismatched ? 1 : 0)},
                         {"model_total_bytes", r.bytes * r.count},
                         {"straggler_s", {{"max", 2e-5}, {"mean", 1e-5}, {"worst_rank", world - 1}}}});
    j["histogram"].push_back({{"op", r.op}, {"axis", r.axis}, {"log2_bytes", 10}, {"count", r.count}});
    auto& l = levels[{r.axis, r.level}];
    l.first += r.count;
    l.second += r.bytes * r.count;
  }
  for (const auto& [key, v] : levels) {
    j["by_axis_level"].push_back({{"axis", key.first},
                                  {"level", key.second},
                                  {"calls", v.first},
                                  {"bytes", v.second},
                                  {"model_bytes", v.second}});
  }
  std::ofstream(dir + "/comm_report.json") << j.dump(1);
}

const std::vector<FixtureRow> kPipelineRows = {{"send", "pp", "inter-node", 2, 4096, 16},
                                               {"recv", "pp", "inter-node", 2, 4096, 16},
                                               {"all_reduce", "pp-embedding", "inter-node", 2, 6432896, 4},
                                               {"barrier", "world", "intra-node", 2, 0, 1}};

// The bytes of an empty frame (axes, no data) that gnuplot draws with the terminal line (the
// first line: terminal, size) of the script `gp`: what a plot that drew nothing would weigh.
size_t empty_frame_bytes(const std::string& gp, const std::string& scratch) {
  const std::string script = test::read_text(gp);
  fs::create_directories(scratch);
  std::ofstream(scratch + "/frame.gp") << script.substr(0, script.find('\n')) << "\nset output 'frame.png'\n"
                                       << "plot [0:1][0:1] NaN notitle\n";
  EXPECT_EQ(std::system(fmt::format("cd {} && gnuplot frame.gp", scratch).c_str()), 0);
  return fs::file_size(scratch + "/frame.png");
}

// Checks the plot DIR/NAME.png: the 8-byte PNG signature, the IHDR chunk first with the size
// its script NAME.gp asks for, IEND last, and (non-trivial) at least 1.5 times the bytes of an
// empty frame of that size: drawn data (lines, bars, markers) weighs 2.5 to 5 times as much.
void expect_png(const std::string& dir, const std::string& name, const std::string& scratch) {
  SCOPED_TRACE(dir + "/" + name + ".png");
  const std::string b = test::read_text(dir + "/" + name + ".png");
  ASSERT_GT(b.size(), 33u);
  EXPECT_EQ(b.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  auto be32 = [&](size_t at) {
    return (uint32_t(uint8_t(b[at])) << 24) | (uint32_t(uint8_t(b[at + 1])) << 16) |
           (uint32_t(uint8_t(b[at + 2])) << 8) | uint32_t(uint8_t(b[at + 3]));
  };
  EXPECT_EQ(be32(8), 13u);  // IHDR's length
  EXPECT_EQ(b.substr(12, 4), "IHDR");
  const std::string gp = test::read_text(dir + "/" + name + ".gp");
  EXPECT_NE(gp.find(fmt::format(" size {},{}", be32(16), be32(20))), std::string::npos)
      << "width " << be32(16) << ", height " << be32(20) << " in " << gp;
  EXPECT_EQ(b.substr(b.size() - 8, 4), "IEND");
  EXPECT_GT(static_cast<double>(b.size()), 1.5 * empty_frame_bytes(dir + "/" + name + ".gp", scratch));
}

// Exit 2 and one line on stderr that holds every fragment.
void expect_bad_input(const RunResult& r, const std::vector<std::string>& fragments) {
  EXPECT_EQ(r.code, 2) << "stdout: " << r.out << "\nstderr: " << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "stderr should be one line: " << r.err;
  for (const auto& f : fragments) EXPECT_NE(r.err.find(f), std::string::npos) << "missing '" << f << "' in: " << r.err;
}

class Report : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp = std::make_unique<TempDir>("report");
    test::make_random_corpus(*tmp / "data", 8000, 2000);
    config = *tmp / "run.toml";
    std::ofstream(config) << "[model]\nmodel = \"tiny\"\nn_layer = 2\nn_head = 2\nn_embd = 32\nn_ctx = 16\n"
                          << "[data]\ndata = \"" << (*tmp / "data") << "\"\n"
                          << "[train]\nglobal_batch = 4\nmicro_batch = 2\nsteps = 4\nthreads = 1\n"
                          << "[eval]\nval_every = 2\nval_batches = 1\n[run]\ntrace = true\n"
                          << "[parallel]\ncomm_timeout = 120.0\n";
  }
  // `weft train` on np ranks (0: one process) into tmp/NAME; the trainer writes comm_report.json.
  std::string train(const std::string& name, int np, const std::string& args) {
    const std::string out = *tmp / name;
    RunResult r = test::run_weft_with(test::mpi_launcher(np), "train " + config + " --out " + out + " " + args, cmd());
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(fs::exists(out + "/comm_report.json")) << "a traced run must write its communication report";
    return out;
  }
  RunResult weft(const std::string& args, const std::string& env = "") { return test::run_weft_with(env, args, cmd()); }
  std::string cmd() { return *tmp / fmt::format("cmd{}", n++); }
  std::unique_ptr<TempDir> tmp;
  std::string config;
  int n = 0;
};

// The numbers report.md must state, recomputed from the raw metrics.jsonl.
struct Expected {
  double final_loss = 0, final_val = 0, tokens_per_s = 0, step_error_pct = 0, total_pred_mib = 0, total_meas_mib = 0;
  bool has_step_time = false;
};

Expected expected_from_metrics(const std::string& run) {
  Expected e;
  std::ifstream in(run + "/metrics.jsonl");
  std::string line;
  double ms = 0, tokens = 0;
  int steps = 0;
  while (std::getline(in, line)) {
    const json j = json::parse(line);
    if (j.contains("val_loss")) e.final_val = j["val_loss"].get<double>();
    if (j.contains("loss")) {
      e.final_loss = j["loss"].get<double>();
      if (++steps > 1) ms += j["ms"].get<double>(), tokens += j["tokens_per_s"].get<double>() * j["ms"].get<double>();
    }
    if (!j.contains("memory_report")) continue;
    for (const json& r : j["memory_report"]) {
      e.total_pred_mib = std::max(e.total_pred_mib, r["predicted"]["total"].get<double>() / 1048576.0);
      e.total_meas_mib = std::max(e.total_meas_mib, r["measured"]["total"].get<double>() / 1048576.0);
    }
    if (j.contains("step_time_report")) {
      const json& st = j["step_time_report"];
      const double m = st["measured_s"].get<double>(), p = st["predicted_s"].get<double>();
      e.step_error_pct = 100.0 * (p - m) / m;
      e.has_step_time = true;
    }
  }
  e.tokens_per_s = tokens / ms;  // tokens of the steps after the first over their time
  return e;
}

bool contains(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

void expect_numbers(const std::string& md, const Expected& e) {
  EXPECT_TRUE(contains(md, fmt::format("{:.4f}", e.final_loss))) << "final loss " << e.final_loss;
  EXPECT_TRUE(contains(md, fmt::format("{:.4f}", e.final_val))) << "final validation loss " << e.final_val;
  EXPECT_TRUE(contains(md, fmt::format("| {:.0f} ", e.tokens_per_s))) << "tokens/s " << e.tokens_per_s;
  EXPECT_TRUE(contains(md, fmt::format("| total | {:.2f} | {:.2f} |", e.total_pred_mib, e.total_meas_mib)));
  if (e.has_step_time) {
    EXPECT_TRUE(contains(md, fmt::format("{:+.1f}%", e.step_error_pct))) << e.step_error_pct;
  }
}

// What the Communication section must state for the run `run` (its comm_report.json read here):
// calls and bytes per (axis, level), the rows that differ from the model, the share of calls
// under 64 KiB and of their bytes.
void expect_comm(const std::string& md, const std::string& run) {
  const json c = json::parse(test::read_text(run + "/comm_report.json"));
  for (const json& e : c["by_axis_level"]) {
    const std::string axis = e["axis"], level = e["level"];
    EXPECT_TRUE(contains(md, fmt::format("| {} | {} |", axis, level))) << axis << " " << level;
    EXPECT_TRUE(contains(md, fmt::format("{} calls, {} bytes (", e["calls"].get<int64_t>(), e["bytes"].get<int64_t>())))
        << axis << " " << level;
  }
  EXPECT_TRUE(contains(md, fmt::format("{} row(s) differ from the analytic model", c["mismatches"].get<int64_t>())));
  double calls = 0, small = 0, bytes = 0, small_bytes = 0;
  for (const json& r : c["rows"]) {
    const double n = r["count"].get<double>(), b = r["total_bytes"].get<double>();
    calls += n, bytes += b;
    if (r["bytes"].get<int64_t>() < 65536) small += n, small_bytes += b;
  }
  if (calls == 0) {
    EXPECT_TRUE(contains(md, "No calls."));
    return;
  }
  EXPECT_TRUE(contains(md, fmt::format("{:.0f} calls, {:.1f}% of them under 64 KiB, carrying {:.2f}% of the bytes",
                                       calls, 100.0 * small / calls, bytes > 0 ? 100.0 * small_bytes / bytes : 0.0)))
      << md;
}

// The gnuplot titles of a run's communication bars: one per link level.
void expect_comm_series(const std::string& gp, const std::string& run, const std::string& label) {
  const json c = json::parse(test::read_text(run + "/comm_report.json"));
  for (const json& e : c["by_axis_level"]) {
    const std::string title = fmt::format("'{}: {}'", label, e["level"].get<std::string>());
    EXPECT_TRUE(contains(gp, title)) << title << " in " << gp;
  }
}

TEST_F(Report, TracedRunsAndTheirOverlay) {
  const std::string a = train("pp2", 2, "--pp 2 --system systems/dgx-a100-80gb.toml");
  const std::string b = train("single", 0, "");
  ASSERT_FALSE(::testing::Test::HasFailure());

  RunResult r = weft("report " + a);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "") << "gnuplot warnings or other messages";
  const std::string md = test::read_text(a + "/report/report.md");
  for (const char* section : {"## Runs", "## Loss", "## Throughput", "## Memory", "## Pipeline", "## Communication"}) {
    EXPECT_TRUE(contains(md, section)) << section;
  }
  for (const char* png : {"loss", "throughput", "memory", "pipeline", "communication"}) {
    expect_png(a + "/report", png, *tmp / "frame");
    EXPECT_TRUE(contains(md, fmt::format("]({}.png)", png))) << png;
    EXPECT_TRUE(fs::exists(a + "/report/" + png + ".gp")) << png;
  }
  expect_numbers(md, expected_from_metrics(a));
  expect_comm(md, a);
  EXPECT_TRUE(contains(md, "Schedule 1f1b, 2 stages"));

  // The single process: no pipeline plot, no step-time prediction (no system file given).
  r = weft("report " + b + " --out " + *tmp / "single-report");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string md_b = test::read_text(*tmp / "single-report/report.md");
  EXPECT_FALSE(fs::exists(*tmp / "single-report/pipeline.png"));
  for (const char* png : {"loss", "throughput", "memory", "communication"}) {
    expect_png(*tmp / "single-report", png, *tmp / "frame");
  }
  EXPECT_TRUE(contains(md_b, "pp = 1: no pipeline."));
  EXPECT_TRUE(contains(md_b, "- (no system file)"));
  expect_numbers(md_b, expected_from_metrics(b));
  expect_comm(md_b, b);

  // The overlay: both runs in every plot and table, B against A.
  r = weft("report " + a + " " + b);
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string dir = a + "/compare-single";
  const std::string md_ab = test::read_text(dir + "/report.md");
  EXPECT_TRUE(contains(md_ab, "# weft run comparison: pp2 (A) against single (B)"));
  for (const char* png : {"loss", "throughput", "memory", "pipeline", "communication"}) {
    expect_png(dir, png, *tmp / "frame");
  }
  expect_numbers(md_ab, expected_from_metrics(a));
  expect_numbers(md_ab, expected_from_metrics(b));
  expect_comm(md_ab, a);
  expect_comm(md_ab, b);
  for (const char* s : {"### pp2", "### single", "single against pp2:", "| axis | level | pp2 | single |"}) {
    EXPECT_TRUE(contains(md_ab, s)) << s;
  }
  const std::string loss_gp = test::read_text(dir + "/loss.gp");
  EXPECT_TRUE(contains(loss_gp, "'pp2: training'") && contains(loss_gp, "'single: validation'")) << loss_gp;
  const std::string comm_gp = test::read_text(dir + "/communication.gp");
  expect_comm_series(comm_gp, a, "pp2");
  expect_comm_series(comm_gp, b, "single");

  // A report of the single process into the pipeline run's report folder leaves no stale
  // pipeline plot behind.
  r = weft("report " + b + " --out " + a + "/report");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(fs::exists(a + "/report/pipeline.png"));
  EXPECT_FALSE(fs::exists(a + "/report/pipeline.gp"));
  EXPECT_TRUE(contains(test::read_text(a + "/report/report.md"), "# weft run report: single"));
}

// Copies the run folder `from` to `to`.
void copy_run(const std::string& from, const std::string& to) { fs::copy(from, to, fs::copy_options::recursive); }

TEST_F(Report, BadInputAndFailures) {
  const std::string run = train("run", 0, "");
  ASSERT_FALSE(::testing::Test::HasFailure());
  RunResult r = weft("report " + run + " --out " + *tmp / "good");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string good_md = test::read_text(*tmp / "good/report.md");

  // Not a run folder: missing, empty.
  expect_bad_input(weft("report " + *tmp / "nowhere"), {*tmp / "nowhere", "no such directory"});
  fs::create_directories(*tmp / "empty");
  expect_bad_input(weft("report " + *tmp / "empty"), {*tmp / "empty", "not a run folder", "metrics.jsonl"});
  // A run without trace, and a traced run without comm_report.json.
  copy_run(run, *tmp / "untraced");
  fs::remove(*tmp / "untraced/trace-rank0.jsonl");
  fs::remove(*tmp / "untraced/comm_report.json");
  expect_bad_input(weft("report " + *tmp / "untraced"), {"untraced", "no trace", "--trace true"});
  copy_run(run, *tmp / "no-comm");
  fs::remove(*tmp / "no-comm/comm_report.json");
  expect_bad_input(weft("report " + *tmp / "no-comm"), {"no-comm", "no comm_report.json"});

  // metrics.jsonl: the last line cut mid-JSON, a corrupt line inside, no final line.
  const std::string metrics = test::read_text(run + "/metrics.jsonl");
  const int64_t lines = std::count(metrics.begin(), metrics.end(), '\n');
  copy_run(run, *tmp / "cut");
  std::ofstream(*tmp / "cut/metrics.jsonl") << metrics.substr(0, metrics.size() - 40);
  expect_bad_input(weft("report " + *tmp / "cut" + " --out " + *tmp / "good"),
                   {*tmp / "cut/metrics.jsonl:" + std::to_string(lines), "not valid JSON"});
  copy_run(run, *tmp / "corrupt");
  const size_t second = metrics.find('\n') + 1;
  std::ofstream(*tmp / "corrupt/metrics.jsonl") << metrics.substr(0, second) << "{\"step\": 1, \"loss\": }\n"
                                                << metrics.substr(metrics.find('\n', second) + 1);
  expect_bad_input(weft("report " + *tmp / "corrupt"), {*tmp / "corrupt/metrics.jsonl:2", "not valid JSON"});
  copy_run(run, *tmp / "unfinished");
  std::ofstream(*tmp / "unfinished/metrics.jsonl") << metrics.substr(0, metrics.rfind('\n', metrics.size() - 2) + 1);
  expect_bad_input(weft("report " + *tmp / "unfinished"), {"metrics.jsonl", "no final report line", "did not finish"});
  copy_run(run, *tmp / "typed");
  std::string typed = metrics;
  typed.replace(typed.find("\"loss\":"), 7, "\"loss\":\"high\",\"x\":");
  std::ofstream(*tmp / "typed/metrics.jsonl") << typed;
  expect_bad_input(weft("report " + *tmp / "typed"), {"typed/metrics.jsonl:", "'loss' is missing or not a number"});

  // Nothing was written for any of them; the earlier report is as it was.
  for (const char* d : {"untraced", "no-comm", "cut", "corrupt", "unfinished", "typed"}) {
    EXPECT_FALSE(fs::exists(*tmp / d + "/report")) << d;
  }
  EXPECT_EQ(test::read_text(*tmp / "good/report.md"), good_md);
  // gnuplot missing: one line, exit 2, nothing written.
  expect_bad_input(weft("report " + run + " --out " + *tmp / "no-gnuplot", "PATH=" + *tmp / "empty"),
                   {"gnuplot not found"});
  EXPECT_FALSE(fs::exists(*tmp / "no-gnuplot"));
  EXPECT_EQ(weft("report " + run + " " + run + " " + run).code, 2);  // one or two runs

  // A gnuplot that fails on a script: a runtime failure (exit 1) with its messages on one line,
  // nothing written, no scratch folder left behind.
  fs::create_directories(*tmp / "bin");
  std::ofstream(*tmp / "bin/gnuplot")
      << "#!/bin/sh\n[ \"$1\" = -e ] && exit 0\necho 'line 3: bad' >&2\necho more >&2\nexit 1\n";
  fs::permissions(*tmp / "bin/gnuplot", fs::perms::owner_all);
  r = weft("report " + run + " --out " + *tmp / "failed", "PATH=" + *tmp / "bin:/usr/bin:/bin");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(r.err, "weft: error: gnuplot failed on loss.gp (exit 1, no PNG written): line 3: bad / more\n");
  EXPECT_FALSE(fs::exists(*tmp / "failed"));
  for (const auto& e : fs::directory_iterator(tmp->path())) {
    EXPECT_EQ(e.path().filename().string().find(".weft-report"), std::string::npos) << e.path();
  }
}

// comm_report.json read field by field: a wrong field is named with its row.
TEST(ReportReader, CommReportFieldsAreChecked) {
  TempDir tmp("report");
  write_comm_report_fixture(tmp / "", 2, kPipelineRows, 1);
  const report::CommReport c = report::read_comm_report(tmp / "comm_report.json");
  ASSERT_EQ(c.rows.size(), kPipelineRows.size());
  EXPECT_EQ(c.rows[2].axis, "pp-embedding");
  EXPECT_EQ(c.rows[2].total_bytes, 6432896 * 4);
  EXPECT_EQ(*c.rows[1].model_count, 17);
  EXPECT_EQ(c.mismatches, 1);
  ASSERT_EQ(c.by_axis_level.size(), 3u);  // pp, pp-embedding, world
  EXPECT_EQ(c.by_axis_level[0].bytes, 2 * 16 * 4096);

  json j = json::parse(test::read_text(tmp / "comm_report.json"));
  j["rows"][3]["model_count"] = nullptr;  // the model has no entry: allowed
  j["rows"][3]["straggler_s"] = nullptr;  // no peer to compare with: allowed
  j["rows"][0]["straggler_s"]["applicable"] = false;
  std::ofstream(tmp / "comm_report.json") << j.dump();
  const report::CommReport d = report::read_comm_report(tmp / "comm_report.json");
  EXPECT_FALSE(d.rows[3].model_count.has_value());
  EXPECT_FALSE(d.rows[3].straggler_applicable);
  EXPECT_FALSE(d.rows[0].straggler_applicable);
  EXPECT_TRUE(d.rows[1].straggler_applicable);
  j["rows"][2].erase("bytes");
  std::ofstream(tmp / "comm_report.json") << j.dump();
  try {
    report::read_comm_report(tmp / "comm_report.json");
    ADD_FAILURE() << "a row without 'bytes' was accepted";
  } catch (const InputError& e) {
    EXPECT_TRUE(contains(e.what(), "comm_report.json: rows[2]: 'bytes' is missing or not an integer")) << e.what();
  }
  j["rows"][2]["bytes"] = 1;
  j["version"] = 2;  // adds the `levels` section, which the reader does not need
  std::ofstream(tmp / "comm_report.json") << j.dump();
  EXPECT_NO_THROW(report::read_comm_report(tmp / "comm_report.json"));
  j["version"] = 3;  // version 3 has a `compression` section
  std::ofstream(tmp / "comm_report.json") << j.dump();
  try {
    report::read_comm_report(tmp / "comm_report.json");
    ADD_FAILURE() << "a version 3 report without its compression section was accepted";
  } catch (const InputError& e) {
    EXPECT_TRUE(contains(e.what(), "'compression' is missing or not an object")) << e.what();
  }
  j["version"] = 4;
  std::ofstream(tmp / "comm_report.json") << j.dump();
  EXPECT_THROW(report::read_comm_report(tmp / "comm_report.json"), InputError);
}

// A run of one step on two ranks: the report of one dp all-reduce of 4000 B per step (the
// trainer's builder on hand-made events), compressed as int4 to 500 B with errors 0.1 and 0.3
// on the two ranks when `int4`, else plain; written and read back like a run's.
report::Run compression_run(const std::string& dir, const std::string& label, bool int4) {
  std::vector<std::vector<TraceEvent>> per_rank(2);
  for (int r = 0; r < 2; ++r) {
    TraceEvent e;
    e.kind = "all_reduce", e.axis = "dp", e.bytes = 4000, e.group = "ranks 0,1", e.duration_s = 0.01;
    e.step = 1, e.phase = "train";
    if (int4) e.codec = "int4", e.wire_bytes = 500, e.codec_s = 0.002, e.rel_err = r == 0 ? 0.1 : 0.3;
    per_rank[static_cast<size_t>(r)].push_back(e);
  }
  CommReportInputs in;
  in.ec.layout.dp = 2;
  in.nodes = emulated_node_map(2, 1);
  in.first_step = 0, in.last_step = 1;
  fs::create_directories(dir);
  std::ofstream(dir + "/comm_report.json") << build_comm_report(per_rank, in).dump(1);
  report::Run run;
  run.dir = dir;
  run.label = label;
  run.steps = {report::StepPoint{1, 32, 5.0, 1000.0, 32.0}};
  run.comm = report::read_comm_report(dir + "/comm_report.json");
  return run;
}

// The report shows a compression table (op, axis, codec, raw, wire, ratio, codec time, error)
// when any call of a run was compressed, and B's wire and raw bytes against A's.
TEST(ReportMarkdown, CompressionTableWhenAnyCallWasCompressed) {
  TempDir tmp("report");
  const report::Run a = compression_run(tmp / "a", "a", false), b = compression_run(tmp / "b", "b", true);
  EXPECT_EQ(b.comm.version, 3);
  EXPECT_FALSE(a.comm.compressed());
  ASSERT_TRUE(b.comm.compressed());
  ASSERT_EQ(b.comm.compression.size(), 1u);
  const report::CommCompression& e = b.comm.compression[0];
  EXPECT_EQ(e.op, "all_reduce");
  EXPECT_EQ(e.raw_bytes, 4000);
  EXPECT_EQ(e.wire_bytes, 500);
  EXPECT_DOUBLE_EQ(e.ratio, 0.125);
  EXPECT_EQ(e.codecs, std::vector<std::string>{"int4"});
  EXPECT_DOUBLE_EQ(e.codec_s, 0.002);
  EXPECT_EQ(e.rel_err_measured, 2);
  EXPECT_DOUBLE_EQ(e.rel_err_mean, 0.2);
  EXPECT_DOUBLE_EQ(e.rel_err_max, 0.3);
  EXPECT_EQ(b.comm.rows.at(0).wire_total_bytes, 500);

  const std::string plain = report::report_markdown({&a}, {});
  EXPECT_FALSE(contains(plain, "### Compression")) << plain;
  const std::string one = report::report_markdown({&b}, {});
  EXPECT_TRUE(contains(one, "### Compression")) << one;
  EXPECT_TRUE(contains(one, "| all_reduce | dp | int4 | 4000 | 500 | 0.125 | 0.0020 | 0.2 / 0.3 |")) << one;
  const std::string both = report::report_markdown({&a, &b}, {});
  EXPECT_TRUE(contains(both, "| run | op | axis | codec |")) << both;
  EXPECT_TRUE(contains(both, "| a | all_reduce | dp | - | 4000 | 4000 | 1.000 | 0.0000 | - |")) << both;
  EXPECT_TRUE(contains(both, "| b | all_reduce | dp | int4 | 4000 | 500 | 0.125 | 0.0020 | 0.2 / 0.3 |")) << both;
  EXPECT_TRUE(contains(both, "b against a: 0.125x the wire bytes, 1.000x the raw bytes.")) << both;
  EXPECT_TRUE(contains(both, "wire 500 (500 B)")) << both;  // the (axis, level) table names B's wire bytes
}

}  // namespace
}  // namespace weft
