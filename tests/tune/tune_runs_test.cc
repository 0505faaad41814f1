// `weft tune` on 2 MPI ranks (a one-layer model, a calibrated system file of this machine):
// the planner's picks run first, the search writes one tune.csv row per trial with the
// planner's prediction beside the measurement, the best trial is at least as fast as the
// planner's pick measured in the same run, SHAP ranks every knob, the plots exist, a fixed
// seed gives the same trials, and bad options are refused.
#include <gtest/gtest.h>

#include <csignal>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "plan/system.h"
#include "test_util.h"
#include "tune/space.h"

namespace weft {
namespace {

namespace fs = std::filesystem;
using test::RunResult;

std::vector<std::vector<std::string>> read_csv(const std::string& path) {
  std::vector<std::vector<std::string>> rows;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> row;
    std::stringstream ss(line);
    for (std::string f; std::getline(ss, f, ',');) row.push_back(f);
    if (!line.empty() && line.back() == ',') row.emplace_back();  // getline drops a last empty field
    rows.push_back(row);
  }
  return rows;
}

class TuneRuns : public test::CliFixture {
 protected:
  TuneRuns() : CliFixture("tune") {}
  void SetUp() override {
    CliFixture::SetUp();
    // A two-layer model and a global batch of 4: tp, pp, dp, micro-batch, ZeRO, recompute,
    // sp and the schedules all have choices on 2 ranks.
    std::ofstream(config) << "[model]\nmodel = \"tiny\"\nn_layer = 2\nn_head = 2\nn_embd = 32\nn_ctx = 16\n"
                          << "[data]\ndata = \"" << (*tmp / "data") << "\"\n"
                          << "[train]\nglobal_batch = 4\nmicro_batch = 1\nsteps = 2\nthreads = 1\n"
                          << "[parallel]\ncomm_timeout = 120.0\n";
    RunResult r = weft(fmt::format("calibrate --quick --threads 1 --out {}", *tmp / "local.toml"));
    ASSERT_EQ(r.code, 0) << r.err;
  }
  RunResult tune(const std::string& out, const std::string& args) {
    return test::run_weft_with(test::mpi_launcher(2),
                               fmt::format("tune {} --system {} --out {} {}", config, *tmp / "local.toml", out, args),
                               *tmp / fmt::format("cmd{}", n++));
  }
};

TEST_F(TuneRuns, PlannerSeededSearchWritesItsFindings) {
  const std::string out = *tmp / "t1";
  RunResult r = tune(out, "--trials 6 --steps 2 --warmup 1 --initial 4 --seed 3 --recalibrate " + (*tmp / "fixed.toml"));
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  const auto rows = read_csv(out + "/tune.csv");
  ASSERT_EQ(rows.size(), 7u) << "a header and one row per trial";
  const std::vector<std::string>& head = rows[0];
  ASSERT_EQ(head[0], "job_id");
  EXPECT_EQ(head[1], "p:tp");
  const auto col = [&](const std::string& name) {
    return static_cast<size_t>(std::find(head.begin(), head.end(), name) - head.begin());
  };
  ASSERT_LT(col("objective"), head.size());
  ASSERT_LT(col("m:source"), head.size());
  ASSERT_LT(col("m:predicted_ms"), head.size());
  // The planner's three top picks first, then random points, then the surrogate's.
  for (size_t i = 1; i <= 3; ++i) EXPECT_EQ(rows[i][col("m:source")], "planner") << i;
  EXPECT_EQ(rows[4][col("m:source")], "random");
  EXPECT_EQ(rows[5][col("m:source")], "surrogate");
  for (size_t i = 1; i < rows.size(); ++i) {
    EXPECT_GT(std::stod(rows[i][col("m:predicted_ms")]), 0.0) << i;
    if (rows[i][col("objective")] != "F") {
      EXPECT_GT(std::stod(rows[i][col("objective")]), 0.0) << i;
    }
  }
  const nlohmann::json s = nlohmann::json::parse(test::read_text(out + "/summary.json"));
  ASSERT_FALSE(s["best"].is_null()) << s.dump();
  ASSERT_FALSE(s["planner_pick"].is_null()) << s.dump();
  EXPECT_EQ(s["planner_pick"]["trial"], 0);
  EXPECT_GE(s["best"]["tokens_per_s"].get<double>(), s["planner_pick"]["tokens_per_s"].get<double>());
  EXPECT_GE(s["best_over_planner_pick"].get<double>(), 1.0);
  EXPECT_GT(s["planner_error"]["trials"].get<int>(), 0);
  // --recalibrate: a loadable system that predicts the trials no worse than before.
  const auto& rc = s["recalibration"];
  ASSERT_FALSE(rc.is_null()) << s.dump();
  EXPECT_LE(rc["error_after"].get<double>(), rc["error_before"].get<double>());
  EXPECT_NO_THROW(plan::load_system(*tmp / "fixed.toml"));
  // best.toml: the winner's layout keys.
  const std::string best = test::read_text(out + "/best.toml");
  EXPECT_NE(best.find("[parallel]\ntp = "), std::string::npos) << best;
  EXPECT_NE(best.find("micro_batch = "), std::string::npos) << best;
  // SHAP: every knob ranked, one row per successful trial, efficiency: the phis add up to the
  // surrogate's value less the background's mean.
  const nlohmann::json shap = nlohmann::json::parse(test::read_text(out + "/shap.json"));
  ASSERT_EQ(shap["ranking"].size(), static_cast<size_t>(tune::kNumKnobs));
  for (size_t i = 1; i < shap["ranking"].size(); ++i) {
    EXPECT_GE(shap["ranking"][i - 1]["mean_abs_phi"].get<double>(), shap["ranking"][i]["mean_abs_phi"].get<double>());
  }
  ASSERT_GE(shap["points"].size(), 2u);
  for (const auto& p : shap["points"]) {
    double sum = 0;
    for (const auto& [k, v] : p["phi"].items()) sum += v.get<double>();
    EXPECT_NEAR(sum, p["surrogate"].get<double>() - shap["base"].get<double>(),
                1e-6 * std::max(1.0, std::fabs(p["surrogate"].get<double>())));
  }
  EXPECT_TRUE(fs::exists(out + "/shap.png"));
  EXPECT_TRUE(fs::exists(out + "/shap_beeswarm.png"));
  EXPECT_NE(r.out.find("knobs by mean |SHAP|"), std::string::npos) << r.out;

  // Replayed against its own tune.csv (--oracle): the same measurements, so the same seed
  // makes the same choices all the way, the surrogate's included.
  const std::string replay = *tmp / "replay";
  r = tune(replay, "--trials 6 --steps 2 --warmup 1 --initial 4 --seed 3 --oracle " + out + "/tune.csv");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto rows3 = read_csv(replay + "/tune.csv");
  ASSERT_EQ(rows3.size(), rows.size());
  for (size_t i = 1; i < rows.size(); ++i) {
    for (size_t c = 1; c <= static_cast<size_t>(tune::kNumKnobs); ++c) EXPECT_EQ(rows3[i][c], rows[i][c]) << i << "," << c;
    EXPECT_EQ(rows3[i][col("objective")], rows[i][col("objective")]) << i;
  }

  // An earlier tune is never replaced silently (issue 34 class 3): --out that holds one is
  // refused without --overwrite, and --oracle may not name the tune.csv it would write; both
  // before any work, leaving every file as it was.
  {
    const std::string before = test::read_text(replay + "/tune.csv"), source = test::read_text(out + "/tune.csv");
    const std::string summary = test::read_text(replay + "/summary.json");
    RunResult again = tune(replay, "--trials 6 --seed 3 --oracle " + out + "/tune.csv");
    EXPECT_EQ(again.code, 2) << again.err;
    EXPECT_NE(again.err.find("--out " + replay + " already holds a tune (" + replay + "/tune.csv); pass --overwrite"),
              std::string::npos) << again.err;
    for (const char* args : {"", " --overwrite"}) {
      RunResult self = tune(out, std::string("--trials 6 --seed 3 --oracle ") + out + "/tune.csv" + args);
      EXPECT_EQ(self.code, 2) << args << ": " << self.err;
      EXPECT_NE(self.err.find("the replay would overwrite what it replays"), std::string::npos) << args << ": " << self.err;
    }
    EXPECT_EQ(test::read_text(replay + "/tune.csv"), before);
    EXPECT_EQ(test::read_text(replay + "/summary.json"), summary);
    EXPECT_EQ(test::read_text(out + "/tune.csv"), source);
    // --overwrite replaces it (the same replay: the same rows).
    again = tune(replay, "--trials 6 --steps 2 --warmup 1 --initial 4 --seed 3 --overwrite --oracle " + out + "/tune.csv");
    ASSERT_EQ(again.code, 0) << again.err;
    EXPECT_EQ(read_csv(replay + "/tune.csv").size(), rows.size());
  }

  // A failed trial (the oracle's first row marked failed, as a run out of memory would be)
  // is recorded with its reason and the search goes on to the same number of trials.
  {
    std::string text = test::read_text(out + "/tune.csv");
    const size_t row1 = text.find('\n') + 1, row1_end = text.find('\n', row1);
    auto f = read_csv(out + "/tune.csv")[1];
    ASSERT_EQ(f.size(), head.size());
    f[col("objective")] = "F";
    f[col("m:step_ms")] = "";
    f[col("m:failure")] = "out of memory (edited)";
    std::string line;
    for (size_t c = 0; c < f.size(); ++c) line += (c ? "," : "") + f[c];
    text.replace(row1, row1_end - row1, line);
    std::ofstream(*tmp / "failed.csv") << text;
  }
  const std::string failed = *tmp / "failed";
  r = tune(failed, "--trials 6 --initial 4 --seed 3 --oracle " + (*tmp / "failed.csv"));
  ASSERT_EQ(r.code, 0) << r.err;
  const auto rows4 = read_csv(failed + "/tune.csv");
  ASSERT_EQ(rows4.size(), rows.size());
  EXPECT_EQ(rows4[1][col("objective")], "F");
  EXPECT_EQ(rows4[1][col("m:failure")], "out of memory (edited)");
  // The surrogate, taught otherwise, may go where the 6-row oracle has no figure: failures too.
  for (size_t i = 2; i < rows4.size(); ++i) {
    if (rows4[i][col("objective")] == "F") {
      EXPECT_NE(rows4[i][col("m:failure")].find("not in the oracle"), std::string::npos) << i;
    }
  }
  const nlohmann::json s4 = nlohmann::json::parse(test::read_text(failed + "/summary.json"));
  EXPECT_GE(s4["failed"].get<int>(), 1);
  EXPECT_FALSE(s4["best"].is_null());

  // The same seed: the same trials in the same order. The planner's and the random phase's
  // layouts do not depend on the timings; the surrogate's follow them, and timings vary.
  const std::string again = *tmp / "t2";
  r = tune(again, "--trials 4 --steps 1 --warmup 0 --initial 4 --seed 3");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto rows2 = read_csv(again + "/tune.csv");
  ASSERT_EQ(rows2.size(), 5u);
  for (size_t i = 1; i <= 4; ++i) {
    for (size_t c = 1; c <= static_cast<size_t>(tune::kNumKnobs); ++c) EXPECT_EQ(rows2[i][c], rows[i][c]) << i << "," << c;
  }
}

// Issue 34 class 4: a tune writes every finished trial as it finishes, so a kill -9 keeps
// them; --resume takes them from tune.csv (not run again) and goes on with the same search.
TEST_F(TuneRuns, KilledTuneKeepsItsTrialsAndResumes) {
  const std::string out = *tmp / "killed";
  const std::string args = fmt::format("tune {} --system {} --out {} --trials 5 --steps 1 --warmup 0 --initial 4 --seed 3",
                                       config, *tmp / "local.toml", out);
  // One rank in the background, killed (SIGKILL: no handler runs) once tune.csv holds 2 trials.
  const std::string script = fmt::format(
      "cd {src} && (WEFT_SYSTEM=none {bin} {args} > {tmp}.out 2>&1 & p=$!; "
      "for i in $(seq 1 1200); do n=$(cat {out}/tune.csv 2>/dev/null | wc -l); [ \"$n\" -ge 3 ] && break; "
      "kill -0 $p 2>/dev/null || break; sleep 0.05; done; kill -9 $p; wait $p)",
      fmt::arg("src", WEFT_SOURCE_DIR), fmt::arg("bin", WEFT_BINARY), fmt::arg("args", args),
      fmt::arg("tmp", *tmp / "k"), fmt::arg("out", out));
  const int st = std::system(script.c_str());
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 128 + SIGKILL) << "the tune ended before it was killed: "
                                                                 << test::read_text(*tmp / "k.out");
  const auto kept = read_csv(out + "/tune.csv");
  ASSERT_GE(kept.size(), 3u);  // the header and at least the 2 finished trials, each row whole
  ASSERT_LT(kept.size(), 6u);
  for (const auto& row : kept) EXPECT_EQ(row.size(), kept[0].size());
  EXPECT_FALSE(fs::exists(out + "/summary.json"));
  // A new tune into the folder is refused; --resume with --overwrite or --oracle too.
  RunResult r = weft(args);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("already holds a tune"), std::string::npos) << r.err;
  for (const std::string& bad : {std::string(" --resume --overwrite"), " --resume --oracle " + out + "/tune.csv"}) {
    r = weft(args + bad);
    EXPECT_EQ(r.code, 2) << bad << ": " << r.err;
    EXPECT_NE(r.err.find("--resume"), std::string::npos) << r.err;
  }
  r = weft(fmt::format("tune {} --system {} --out {} --resume", config, *tmp / "local.toml", *tmp / "nothing"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("holds no tune.csv"), std::string::npos) << r.err;
  EXPECT_EQ(read_csv(out + "/tune.csv"), kept);  // the refusals changed nothing
  // --resume: the recorded trials come back with their figures, the rest are run.
  r = weft(args + " --resume");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE((r.out + r.err).find(fmt::format("{} trials recorded", kept.size() - 1)), std::string::npos) << r.out << r.err;
  const auto rows = read_csv(out + "/tune.csv");
  ASSERT_EQ(rows.size(), 6u);
  const auto col = [&](const std::string& name) {
    return static_cast<size_t>(std::find(rows[0].begin(), rows[0].end(), name) - rows[0].begin());
  };
  for (size_t i = 1; i < kept.size(); ++i) {
    for (const char* c : {"objective", "m:step_ms", "m:peak_bytes"}) EXPECT_EQ(rows[i][col(c)], kept[i][col(c)]) << i << c;
    for (size_t c = 1; c <= static_cast<size_t>(tune::kNumKnobs); ++c) EXPECT_EQ(rows[i][c], kept[i][c]) << i << "," << c;
    EXPECT_NE(rows[i][col("m:source")].find("(recorded)"), std::string::npos) << i;
  }
  for (size_t i = kept.size(); i < rows.size(); ++i) EXPECT_EQ(rows[i][col("m:source")].find("(recorded)"), std::string::npos);
  EXPECT_TRUE(fs::exists(out + "/summary.json"));
  // A corrupt record is one line naming the file, row and field, and changes nothing.
  std::string text = test::read_text(out + "/tune.csv");
  const std::string obj = rows[1][col("objective")];
  text.replace(text.find(obj), obj.size(), "1e999");
  std::ofstream(out + "/tune.csv") << text;
  r = weft(args + " --resume");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("tune.csv: row 2: objective '1e999' is not a finite number"), std::string::npos) << r.err;
  EXPECT_EQ(test::read_text(out + "/tune.csv"), text);
}

// --confirm 2: after the search the 2 fastest trials and the planner's pick (trial 1, the
// planner's first seed) run twice more each; their step is the median of 3 runs (m:runs 3),
// every other trial keeps its one run, and the best is the fastest confirmed trial. A replay
// (--oracle) runs nothing, so it confirms nothing and says so.
TEST_F(TuneRuns, ConfirmRunsTheFastestAgain) {
  const std::string out = *tmp / "confirm";
  RunResult r = tune(out, "--trials 5 --steps 1 --warmup 0 --initial 5 --seed 4 --confirm 2");
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("tune: confirming the "), std::string::npos) << r.out;
  const auto rows = read_csv(out + "/tune.csv");
  ASSERT_EQ(rows.size(), 6u);
  const std::vector<std::string>& head = rows[0];
  const auto col = [&](const std::string& name) {
    const auto it = std::find(head.begin(), head.end(), name);
    EXPECT_NE(it, head.end()) << name;
    return static_cast<size_t>(it - head.begin());
  };
  std::vector<size_t> confirmed;
  for (size_t i = 1; i < rows.size(); ++i) {
    ASSERT_NE(rows[i][col("objective")], "F") << i << ": " << rows[i][col("m:failure")];
    const int runs = std::stoi(rows[i][col("m:runs")]);
    EXPECT_TRUE(runs == 1 || runs == 3) << i << ": " << runs;
    if (runs == 3) confirmed.push_back(i);
  }
  ASSERT_GE(confirmed.size(), 2u);
  ASSERT_LE(confirmed.size(), 3u);
  EXPECT_EQ(rows[1][col("m:runs")], "3") << "the planner's pick is confirmed";
  double fastest = 1e30;
  for (size_t i : confirmed) fastest = std::min(fastest, std::stod(rows[i][col("m:step_ms")]));
  const nlohmann::json s = nlohmann::json::parse(test::read_text(out + "/summary.json"));
  EXPECT_EQ(s["best"]["runs"].get<int>(), 3) << s.dump();
  EXPECT_NEAR(s["best"]["step_ms"].get<double>(), fastest, 1e-6 * fastest) << s.dump();
  EXPECT_NE(r.out.find("the median of 3 runs"), std::string::npos) << r.out;

  RunResult replay = tune(*tmp / "confirm-replay", "--trials 5 --initial 5 --seed 4 --confirm 2 --oracle " + out + "/tune.csv");
  ASSERT_EQ(replay.code, 0) << replay.err;
  EXPECT_NE(replay.out.find("--confirm 2 not done: the trials were looked up in"), std::string::npos) << replay.out;
}

TEST_F(TuneRuns, BadOptionsAreRefused) {
  for (const char* args : {"--trials 0", "--steps 0", "--kappa -1", "--batch 0", "--confirm -1", "--set nonsense"}) {
    RunResult r = weft(fmt::format("tune {} --system {} --out {} {}", config, *tmp / "local.toml", *tmp / "bad", args));
    EXPECT_EQ(r.code, 2) << args << ": " << r.err;
    EXPECT_FALSE(r.err.empty()) << args;
  }
  RunResult r = weft(fmt::format("tune {} --out {}", *tmp / "missing.toml", *tmp / "bad"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("does not exist"), std::string::npos) << r.err;
  // --recalibrate from a single trial cannot fit three constants: refused before any trial
  // (issue 34 class 8), nothing written.
  r = weft(fmt::format("tune {} --system {} --out {} --trials 1 --recalibrate {}", config, *tmp / "local.toml",
                       *tmp / "one", *tmp / "one.toml"));
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("needs at least 2 trials"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(*tmp / "one.toml"));
  EXPECT_FALSE(fs::exists(*tmp / "one/tune.csv"));
}

// On one rank the trials never communicate: --recalibrate fits the device and the overhead and
// keeps the link bandwidths, saying so, instead of fitting an arbitrary factor to them.
TEST_F(TuneRuns, OneRankRecalibrationKeepsTheLinks) {
  RunResult r = weft(fmt::format("tune {} --system {} --out {} --trials 3 --steps 1 --warmup 0 --initial 3 --seed 1 "
                                 "--recalibrate {}",
                                 config, *tmp / "local.toml", *tmp / "solo", *tmp / "solo.toml"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("the link bandwidths are kept as they are"), std::string::npos) << r.err;
  const nlohmann::json s = nlohmann::json::parse(test::read_text(*tmp / "solo/summary.json"));
  EXPECT_FALSE(s["recalibration"]["link_fitted"].get<bool>());
  const plan::System base = plan::load_system(*tmp / "local.toml"), fixed = plan::load_system(*tmp / "solo.toml");
  ASSERT_EQ(base.levels.size(), fixed.levels.size());
  for (size_t i = 0; i < base.levels.size(); ++i) {
    EXPECT_NEAR(fixed.levels[i].bandwidth, base.levels[i].bandwidth, 1e-9 * base.levels[i].bandwidth) << i;
    EXPECT_NEAR(fixed.levels[i].latency, base.levels[i].latency, 1e-9 * base.levels[i].latency) << i;
  }
}

// Any registered family is tuned through its own data source: a ClimaX config on weather fields.
// Its trials keep to what the family allows (pp 1, no sequence parallelism, no selective
// recompute) and every trial runs and is measured.
TEST_F(TuneRuns, ClimaxConfigIsTunedOnWeatherFields) {
  const std::string data = *tmp / "weather";
  ASSERT_EQ(test::run_weft("prepare --synthetic-weather " + data + " --days 6 --val-days 2 --test-days 2 --seed 3",
                           *tmp / "prep")
                .code,
            0);
  const std::string climax = *tmp / "climax.toml";
  std::ofstream(climax) << "[model]\nmodel = \"climax-tiny\"\n[data]\ndata = \"" << data << "\"\nlead_hours = [6]\n"
                        << "[train]\nglobal_batch = 4\nmicro_batch = 1\nsteps = 2\nthreads = 1\n"
                        << "[parallel]\ncomm_timeout = 120.0\n";
  const std::string out = *tmp / "tc";
  RunResult r = test::run_weft_with(
      test::mpi_launcher(2),
      fmt::format("tune {} --system {} --out {} --trials 4 --steps 2 --warmup 1 --initial 2 --seed 3", climax,
                  *tmp / "local.toml", out),
      *tmp / "cmd-climax");
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  const auto rows = read_csv(out + "/tune.csv");
  ASSERT_EQ(rows.size(), 5u) << "a header and one row per trial";
  const std::vector<std::string>& head = rows[0];
  const auto col = [&](const std::string& name) {
    return static_cast<size_t>(std::find(head.begin(), head.end(), name) - head.begin());
  };
  for (size_t i = 1; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i][col("p:pp")], "1") << i;
    EXPECT_EQ(rows[i][col("p:sequence_parallel")], "false") << i;
    EXPECT_NE(rows[i][col("p:recompute")], "selective") << i;
    EXPECT_EQ(rows[i][col("m:failure")], "") << i;
    EXPECT_GT(std::stod(rows[i][col("objective")]), 0.0) << i;
  }
  const nlohmann::json summary = nlohmann::json::parse(std::ifstream(out + "/summary.json"));
  EXPECT_EQ(summary.at("trials"), 4);
  EXPECT_TRUE(std::filesystem::exists(out + "/best.toml"));
}

}  // namespace
}  // namespace weft
