// [eval] tasks in weft train (train/train_tasks.h): in-context-learning tasks scored on the
// training engine at step 0, every tasks_every steps and after the last. A tiny model memorises
// one line ("Alice likes apples. Bob likes bananas. ..."), so the items' answers are forced by
// construction; the scores during training equal `weft eval --tasks` on the checkpoint of the
// same step, the training around them is bit for bit the one without tasks, every layout scores
// alike (tp with sp, pp, dp with ZeRO-3, whose traced steps still equal the communication model),
// and `weft report` plots them.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "icl_items.h"
#include "test_util.h"

namespace weft {
namespace {

using test::RunResult;
using test::TempDir;
namespace fs = std::filesystem;

class TrainTaskRuns : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp = std::make_unique<TempDir>("train-tasks");
    fs::create_directories(*tmp / "corpus");
    const std::string line = test::likes_line();
    for (int d = 0; d < 4; ++d) {
      std::ofstream f(*tmp / fmt::format("corpus/doc{}.txt", d));
      for (int l = 0; l < 60; ++l) f << line << "\n";
    }
    std::ofstream mc(*tmp / "likes_mc.jsonl"), lm(*tmp / "likes_lm.jsonl");
    for (size_t i = 0; i < test::kLikes.size(); ++i) {
      std::vector<std::string> choices = {test::kLikes[i].second + ".", test::kLikes[(i + 1) % 6].second + ".",
                                          test::kLikes[(i + 3) % 6].second + "."};
      std::swap(choices[0], choices[i % 3]);
      mc << nlohmann::json{{"query", test::likes_prefix(i)}, {"choices", choices}, {"gold", i % 3}}.dump() << "\n";
      lm << nlohmann::json{{"context", test::likes_prefix(i)}, {"continuation", test::kLikes[i].second + "."}}.dump() << "\n";
    }
    ASSERT_EQ(weft(0, "prepare --input " + *tmp / "corpus" + " --out " + *tmp / "data").code, 0);
  }

  RunResult weft(int np, const std::string& args) {
    return test::run_weft_with(test::mpi_launcher(np), args, *tmp / fmt::format("cmd{}", n++));
  }

  // run.toml: a 2-layer tiny model on the memorised line; `tasks` lines under [eval].
  std::string config(const std::string& name, int steps, const std::string& eval_lines) {
    const std::string path = *tmp / (name + ".toml");
    std::ofstream(path) << "[model]\nmodel = \"tiny\"\nn_layer = 2\nn_head = 4\nn_embd = 128\nn_ctx = 64\n"
                        << "[data]\ndata = \"" << (*tmp / "data") << "\"\n"
                        << "[train]\nseq_len = 32\nglobal_batch = 16\nmicro_batch = 16\nsteps = " << steps << "\n"
                        << "lr = 3e-3\nwarmup_steps = 10\nthreads = 1\n[eval]\nval_every = 0\n" << eval_lines
                        << "[checkpoint]\nkeep_last = 0\n[parallel]\ncomm_timeout = 120.0\n";
    return path;
  }

  std::string tasks_lines(int every) const {
    return fmt::format("tasks = [\"{}\", \"{}\"]\ntasks_every = {}\n", *tmp / "likes_mc.jsonl", *tmp / "likes_lm.jsonl",
                       every);
  }

  // step -> the tasks line's entries of a run folder's metrics.jsonl.
  static std::map<int64_t, nlohmann::json> task_lines(const std::string& run) {
    std::map<int64_t, nlohmann::json> out;
    std::ifstream in(run + "/metrics.jsonl");
    std::string line;
    while (std::getline(in, line)) {
      const auto j = nlohmann::json::parse(line);
      if (j.contains("tasks")) out[j["step"].get<int64_t>()] = j["tasks"];
    }
    return out;
  }

  std::unique_ptr<TempDir> tmp;
  int n = 0;
};

TEST_F(TrainTaskRuns, ScoresEqualWeftEvalAndTrainingIsUnchanged) {
  RunResult r = weft(0, "train " + config("tasks", 70, tasks_lines(35)) + " --ckpt_every 35 --trace true --threads 2 --out " + *tmp / "run");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE((r.out + r.err).find("likes_mc 0-shot: acc"), std::string::npos) << r.out << r.err;
  const auto lines = task_lines(*tmp / "run");
  ASSERT_EQ(lines.size(), 3u);
  ASSERT_TRUE(lines.count(0) && lines.count(35) && lines.count(70));
  for (const auto& [step, tasks] : lines) {
    ASSERT_EQ(tasks.size(), 2u);
    EXPECT_EQ(tasks[0]["task"], "likes_mc");
    EXPECT_EQ(tasks[0]["items"].get<int>(), 6);
    EXPECT_TRUE(tasks[0].contains("acc_norm"));
    EXPECT_EQ(tasks[1]["task"], "likes_lm");
    EXPECT_FALSE(tasks[1].contains("acc_norm"));
  }
  // The memorised answers after training; the untrained model does not know them all.
  for (const auto& t : lines.at(70)) EXPECT_DOUBLE_EQ(t["acc"].get<double>(), 1.0) << t["task"];
  EXPECT_LT(lines.at(0)[1]["acc"].get<double>(), 1.0);

  // Training around the scoring is the run without tasks, bit for bit.
  r = weft(0, "train " + config("plain", 70, "") + " --ckpt_every 35 --trace true --threads 2 --out " + *tmp / "plain");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto with = test::metric_series(*tmp / "run", "loss"), without = test::metric_series(*tmp / "plain", "loss");
  ASSERT_EQ(with.size(), 70u);
  for (const auto& [step, loss] : without) EXPECT_EQ(with.at(step), loss) << "step " << step;
  EXPECT_EQ(test::read_text(*tmp / "run/step-000070/model.safetensors"),
            test::read_text(*tmp / "plain/step-000070/model.safetensors"));

  // weft eval --tasks on the checkpoints of steps 35 and 70 gives the scores written then.
  for (int step : {35, 70}) {
    const std::string out = *tmp / fmt::format("eval{}.json", step);
    r = weft(0, fmt::format("eval --checkpoint {} --tasks {} {} --threads 1 --out {}",
                            *tmp / fmt::format("run/step-{:06d}", step), *tmp / "likes_mc.jsonl", *tmp / "likes_lm.jsonl",
                            out));
    ASSERT_EQ(r.code, 0) << r.err;
    const auto ev = nlohmann::json::parse(test::read_text(out))["tasks"];
    ASSERT_EQ(ev.size(), 2u);
    for (size_t t = 0; t < 2; ++t) {
      EXPECT_EQ(ev[t]["acc"], lines.at(step)[t]["acc"]) << "step " << step << " " << ev[t]["task"];
      EXPECT_EQ(ev[t].value("acc_norm", -1.0), lines.at(step)[t].value("acc_norm", -1.0)) << "step " << step;
    }
  }

  // weft report draws them and tabulates the first and last scores.
  r = weft(0, "report " + *tmp / "run" + " --out " + *tmp / "report");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::is_regular_file(*tmp / "report/tasks.png"));
  const std::string md = test::read_text(*tmp / "report/report.md");
  EXPECT_NE(md.find("## In-context-learning tasks"), std::string::npos);
  EXPECT_NE(md.find("| likes_mc | 6 (0-shot) | 0: "), std::string::npos) << md;
  EXPECT_NE(md.find("70: 1.0000 / 1.0000 |"), std::string::npos) << md;
  // A run without tasks has neither the plot nor the section.
  r = weft(0, "report " + *tmp / "plain" + " --out " + *tmp / "report-plain");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(fs::exists(*tmp / "report-plain/tasks.png"));
  EXPECT_EQ(test::read_text(*tmp / "report-plain/report.md").find("In-context"), std::string::npos);
}

TEST_F(TrainTaskRuns, EveryLayoutScoresAndTrainsAsOneProcess) {
  const std::string cfg = config("layouts", 8, tasks_lines(4) + "fewshot = 1\n");
  RunResult r = weft(0, "train " + cfg + " --out " + *tmp / "ref");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto ref = task_lines(*tmp / "ref");
  ASSERT_EQ(ref.size(), 3u);  // steps 0, 4, 8
  const auto ref_loss = test::metric_series(*tmp / "ref", "loss");
  const std::vector<std::pair<int, std::string>> layouts = {
      {2, "--tp 2 --sequence_parallel true"}, {2, "--pp 2 --micro_batch 8"}, {2, "--dp 2 --zero 3 --micro_batch 8 --trace true"}};
  for (const auto& [np, args] : layouts) {
    const std::string out = *tmp / fmt::format("l{}", n);
    r = weft(np, "train " + cfg + " " + args + " --out " + out);
    ASSERT_EQ(r.code, 0) << args << ": " << r.err;
    test::expect_same_series(test::metric_series(out, "loss"), ref_loss, args);
    const auto got = task_lines(out);
    ASSERT_EQ(got.size(), ref.size()) << args;
    for (const auto& [step, tasks] : ref) {
      for (size_t t = 0; t < tasks.size(); ++t) {
        EXPECT_EQ(got.at(step)[t]["acc"], tasks[t]["acc"]) << args << " step " << step << " " << tasks[t]["task"];
        EXPECT_EQ(got.at(step)[t].value("acc_norm", -1.0), tasks[t].value("acc_norm", -1.0)) << args << " step " << step;
      }
    }
    if (args.find("--trace") != std::string::npos) {
      // The tasks' ZeRO-3 forwards precede the next step's gathers: the model replays them.
      const auto rep = nlohmann::json::parse(test::read_text(out + "/comm_report.json"));
      EXPECT_EQ(rep["mismatches"].get<int64_t>(), 0) << rep.dump(1).substr(0, 3000);
    }
  }
}

TEST_F(TrainTaskRuns, BadTasksFailBeforeTheRunFolderIsWritten) {
  const auto refused = [&](const std::string& eval_lines, const std::string& extra, const std::string& message) {
    const std::string out = *tmp / fmt::format("bad{}", n);
    const RunResult r = weft(0, "train " + config("bad", 2, eval_lines) + " " + extra + " --out " + out);
    EXPECT_NE(r.code, 0) << eval_lines;
    EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(out + "/metrics.jsonl")) << eval_lines;
  };
  refused(fmt::format("tasks = [\"{}\"]\n", *tmp / "missing.jsonl"), "", "missing.jsonl");
  refused(tasks_lines(0) + "fewshot = -1\n", "", "fewshot -1");
  refused("tasks = \"likes.jsonl\"\n", "", "key 'eval.tasks' must be a list of strings");
  {  // a model without token logits
    const std::string cfg = *tmp / "climax.toml", out = *tmp / "climax";
    std::ofstream(cfg) << "[model]\nmodel = \"climax-tiny\"\n[data]\ndata = \"" << (*tmp / "data") << "\"\n[eval]\n"
                       << tasks_lines(0);
    const RunResult r = weft(0, "train " + cfg + " --out " + out);
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.err.find("gives no token logits to score continuations with"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(out));
  }
  // A continuation longer than the model's context (100 tokens, n_ctx 64): refused at start,
  // naming the item.
  std::string apples;
  for (int k = 0; k < 100; ++k) apples += " apples";
  std::ofstream(*tmp / "long.jsonl") << nlohmann::json{{"context", "Alice likes"}, {"continuation", apples}}.dump() << "\n";
  refused(fmt::format("tasks = [\"{}\"]\n", *tmp / "long.jsonl"), "", "long.jsonl item 0");
  refused(tasks_lines(0) + "tokenizer = \"" + *tmp / "nope" + "\"\n", "", "eval.tokenizer");
}

}  // namespace
}  // namespace weft
