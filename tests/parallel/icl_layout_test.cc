// weft eval --tasks (in-context-learning evaluation, train/icl_eval.h) on a model trained to
// memorise one line ("Alice likes apples. Bob likes bananas. ..."): the items' answers are
// forced by construction, so every format scores 1.0 zero-shot; and tp 2, pp 2, dp 2 with
// ZeRO-3 and tp 2 x pp 2 give the one-process log-likelihoods (1e-4) and accuracies, few-shot
// prompts included.
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

void write_tasks(const TempDir& tmp) {
  std::ofstream mc(tmp / "likes_mc.jsonl"), sc(tmp / "likes_schema.jsonl"), lm(tmp / "likes_lm.jsonl");
  for (size_t i = 0; i < test::kLikes.size(); ++i) {
    std::vector<std::string> choices = {test::kLikes[i].second + ".", test::kLikes[(i + 1) % 6].second + ".",
                                        test::kLikes[(i + 3) % 6].second + "."};
    const size_t gold = i % 3;
    std::swap(choices[0], choices[gold]);
    mc << nlohmann::json{{"query", test::likes_prefix(i)}, {"choices", choices}, {"gold", gold}}.dump() << "\n";
    sc << nlohmann::json{{"context_options", {test::likes_prefix(i), test::likes_prefix((i + 1) % 6)}},
                         {"continuation", test::kLikes[i].second + "."},
                         {"gold", 0}}.dump()
       << "\n";
    lm << nlohmann::json{{"context", test::likes_prefix(i)}, {"continuation", test::kLikes[i].second + "."}}.dump() << "\n";
  }
}

TEST(IclLayouts, MemorisedItemsAreRightAndEveryLayoutScoresAlike) {
  TempDir tmp("icl-layouts");
  std::filesystem::create_directories(tmp / "corpus");
  const std::string line = test::likes_line();
  for (int d = 0; d < 4; ++d) {
    std::ofstream f(tmp / fmt::format("corpus/doc{}.txt", d));
    for (int l = 0; l < 60; ++l) f << line << "\n";
  }
  int n = 0;
  const auto weft = [&](int np, const std::string& args) {
    return test::run_weft_with(test::mpi_launcher(np), args, tmp / fmt::format("cmd{}", n++));
  };
  RunResult r = weft(0, "prepare --input " + tmp / "corpus" + " --out " + tmp / "data");
  ASSERT_EQ(r.code, 0) << r.err;
  std::ofstream(tmp / "run.toml") << "[model]\nmodel = \"tiny\"\nn_layer = 2\nn_head = 4\nn_embd = 128\nn_ctx = 64\n"
                                  << "[data]\ndata = \"" << (tmp / "data") << "\"\n"
                                  << "[train]\nseq_len = 32\nglobal_batch = 16\nmicro_batch = 16\nsteps = 70\n"
                                  << "lr = 3e-3\nwarmup_steps = 10\nthreads = 2\n[eval]\nval_every = 0\n"
                                  << "[checkpoint]\nkeep_last = 0\nckpt_every = 70\n";
  r = weft(0, "train " + tmp / "run.toml" + " --out " + tmp / "run");
  ASSERT_EQ(r.code, 0) << r.err;
  write_tasks(tmp);
  const std::string tasks = " --tasks " + tmp / "likes_mc.jsonl" + " " + tmp / "likes_schema.jsonl" + " " +
                            tmp / "likes_lm.jsonl";
  const std::string eval = "eval --checkpoint " + tmp / "run" + tasks + " --threads 1 --out ";
  const auto read = [](const std::string& path) { return nlohmann::json::parse(test::read_text(path))["tasks"]; };

  r = weft(0, eval + tmp / "ref.json");
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json ref = read(tmp / "ref.json");
  ASSERT_EQ(ref.size(), 3u);
  for (const auto& t : ref) {
    EXPECT_EQ(t["items"].get<int>(), 6) << t["task"];
    EXPECT_DOUBLE_EQ(t["acc"].get<double>(), 1.0) << t["task"] << ": the memorised answers";
    if (t.contains("acc_norm")) EXPECT_DOUBLE_EQ(t["acc_norm"].get<double>(), 1.0) << t["task"];
  }
  EXPECT_EQ(ref[0]["format"], "multiple_choice");
  EXPECT_EQ(ref[1]["format"], "schema");
  EXPECT_EQ(ref[2]["format"], "language_modeling");
  r = weft(0, eval + tmp / "ref2.json" + " --fewshot 2 --seed 5");
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json ref2 = read(tmp / "ref2.json");

  const auto same = [](const nlohmann::json& a, const nlohmann::json& b, const std::string& what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    for (size_t t = 0; t < a.size(); ++t) {
      EXPECT_EQ(a[t]["acc"], b[t]["acc"]) << what << " " << a[t]["task"];
      EXPECT_EQ(a[t].value("acc_norm", -1.0), b[t].value("acc_norm", -1.0)) << what << " " << a[t]["task"];
      const auto& sa = a[t]["samples"];
      const auto& sb = b[t]["samples"];
      ASSERT_EQ(sa.size(), sb.size()) << what;
      for (size_t i = 0; i < sa.size(); ++i) {
        const auto& la = sa[i]["loglikelihoods"];
        const auto& lb = sb[i]["loglikelihoods"];
        ASSERT_EQ(la.size(), lb.size()) << what;
        for (size_t o = 0; o < la.size(); ++o) {
          EXPECT_NEAR(la[o].get<double>(), lb[o].get<double>(), 1e-4) << what << " " << a[t]["task"] << " item " << i;
        }
      }
    }
  };
  const std::vector<std::pair<int, std::string>> layouts = {
      {2, "--tp 2"}, {2, "--pp 2"}, {2, "--dp 2 --zero 3"}, {4, "--tp 2 --pp 2"}};
  for (const auto& [np, args] : layouts) {
    const std::string out = tmp / fmt::format("l{}.json", n);
    r = weft(np, eval + out + " " + args);
    ASSERT_EQ(r.code, 0) << args << ": " << r.err;
    same(ref, read(out), args);
  }
  // Few-shot prompts are drawn alike in every layout (the dp replicas deal the requests).
  const std::string out = tmp / "fewshot-dp.json";
  r = weft(2, eval + out + " --fewshot 2 --seed 5 --dp 2");
  ASSERT_EQ(r.code, 0) << r.err;
  same(ref2, read(out), "--dp 2 --fewshot 2");
}

}  // namespace
}  // namespace weft
