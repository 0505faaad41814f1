// Shared test helpers: per-test temporary folders, subprocess runs, small token corpora.
#pragma once
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/shard.h"

namespace weft::test {

namespace fs = std::filesystem;

// A fresh folder under WEFT_TEST_TMP named after the running test; removed if the test passes.
class TempDir {
 public:
  explicit TempDir(const std::string& group = "misc") {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::path(WEFT_TEST_TMP) / group / fmt::format("{}.{}-{}", info->test_suite_name(), info->name(), ::getpid());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    if (!::testing::Test::HasFailure()) {
      std::error_code ec;
      fs::remove_all(path_, ec);
    }
  }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

struct RunResult {
  int code = -1;
  std::string out, err;
};

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs `PREFIX build/weft ARGS` (PREFIX: a launcher such as mpirun, or env settings) with
// stdout and stderr captured, from the source folder, with no implicit system file
// (WEFT_SYSTEM=none: a systems/local.toml that a user's `weft calibrate` left in the tree does
// not reach a test; a test names the system file it prices with).
// `binary` replaces build/weft (e.g. a test harness built on the same library).
inline RunResult run_weft_with(const std::string& prefix, const std::string& args, const std::string& scratch,
                               const std::string& binary = WEFT_BINARY) {
  const std::string out = scratch + ".out", err = scratch + ".err";
  const std::string cmd = fmt::format("cd {} && OMP_NUM_THREADS=2 WEFT_SYSTEM=none {} {} {} > {} 2> {} < /dev/null", WEFT_SOURCE_DIR,
                                      prefix, binary, args, out, err);
  int st = std::system(cmd.c_str());
  RunResult r;
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  r.out = read_text(out);
  r.err = read_text(err);
  return r;
}

inline RunResult run_weft(const std::string& args, const std::string& scratch) { return run_weft_with("", args, scratch); }

// A corpus of random tokens (vocabulary V) in llm.c shards: DIR/x_train_000000.bin, DIR/x_val_000000.bin.
inline void make_random_corpus(const std::string& dir, int64_t train_tokens, int64_t val_tokens, int V = 50257,
                               uint32_t seed = 5) {
  fs::create_directories(dir);
  std::mt19937 g(seed);
  // A learnable stream: mostly a fixed cycle of 97 tokens, with some noise.
  std::uniform_int_distribution<int32_t> tok(0, V - 1);
  std::vector<int32_t> cycle(97);
  for (auto& c : cycle) c = tok(g);
  auto make = [&](int64_t n) {
    std::vector<int32_t> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = (g() % 8 == 0) ? tok(g) : cycle[i % 97];
    return v;
  };
  write_shard(dir + "/x_train_000000.bin", make(train_tokens), V);
  write_shard(dir + "/x_val_000000.bin", make(val_tokens), V);
}

// step -> value of `key` in a run folder's metrics.jsonl ("loss", "val_loss", ...).
inline std::map<int64_t, double> metric_series(const std::string& run, const char* key) {
  std::map<int64_t, double> out;
  std::ifstream in(run + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j.contains(key)) out[j["step"].get<int64_t>()] = j[key].get<double>();
  }
  return out;
}

// Every step of `a` is in `ref` and within `rel` relative (layout parity, fp32: 1e-5).
inline void expect_same_series(const std::map<int64_t, double>& a, const std::map<int64_t, double>& ref,
                               const std::string& what, double rel = 1e-5) {
  ASSERT_FALSE(a.empty()) << what;
  for (const auto& [step, v] : a) {
    ASSERT_TRUE(ref.count(step)) << what << " step " << step;
    EXPECT_NEAR(v, ref.at(step), rel * ref.at(step)) << what << ", step " << step;
  }
}

// "mpirun ... -np N -x OMP_NUM_THREADS=1" for N > 0 ranks; "" runs a plain single process.
inline std::string mpi_launcher(int np) {
  if (np <= 0) return "";
  return fmt::format("mpirun --oversubscribe {} -np {} -x OMP_NUM_THREADS=1", geteuid() == 0 ? "--allow-run-as-root" : "", np);
}

// Layout-parity runs of the tiny preset on a random corpus: one fixture for the dp, tp and pp
// suites, which differ only in their [train] lines.
class ParityRuns : public ::testing::Test {
 protected:
  // A fresh folder `group` with a corpus and run.toml (tiny preset, `train_lines` under [train],
  // validation every 6 steps over `val_batches` global batches, every checkpoint kept).
  void prepare(const std::string& group, const std::string& train_lines, int val_batches) {
    tmp = std::make_unique<TempDir>(group);
    make_random_corpus(*tmp / "data", 40000, 4000);
    config = *tmp / "run.toml";
    std::ofstream(config) << "[model]\nmodel = \"tiny\"\n[data]\ndata = \"" << (*tmp / "data") << "\"\n"
                          << "[train]\n" << train_lines << "steps = 12\nlr = 2e-3\nwarmup_steps = 3\nthreads = 1\n"
                          << "[eval]\nval_every = 6\nval_batches = " << val_batches << "\n"
                          << "[checkpoint]\nkeep_last = 0\n[parallel]\ncomm_timeout = 120.0\n";
  }
  // `weft train run.toml ARGS` on np ranks (0: a plain single process). env: "NAME=value" set
  // for the command and exported to every rank.
  RunResult train(int np, const std::string& args, const std::string& env = "") {
    std::string prefix = env.empty() ? "" : env + " ";
    prefix += mpi_launcher(np);
    if (np > 0 && !env.empty()) prefix += " -x " + env.substr(0, env.find('='));
    return run_weft_with(prefix, "train " + config + " " + args, *tmp / fmt::format("cmd{}", n++));
  }
  std::unique_ptr<TempDir> tmp;
  std::string config;
  int n = 0;
};

// A folder for command-line tests: a random corpus in <tmp>/data and a one-layer model's
// config in <tmp>/run.toml that trains 2 steps into <tmp>/run.
class CliFixture : public ::testing::Test {
 protected:
  explicit CliFixture(std::string group) : group_(std::move(group)) {}
  void SetUp() override {
    tmp = std::make_unique<TempDir>(group_);
    make_random_corpus(*tmp / "data", 6000, 1200);
    config = *tmp / "run.toml";
    std::ofstream(config) << "[model]\nmodel = \"tiny\"\nn_layer = 1\nn_head = 2\nn_embd = 32\nn_ctx = 16\n"
                          << "[data]\ndata = \"" << (*tmp / "data") << "\"\n"
                          << "[train]\nglobal_batch = 2\nmicro_batch = 2\nsteps = 2\nthreads = 1\n"
                          << "[eval]\nval_batches = 1\n[run]\nout = \"" << (*tmp / "run") << "\"\n";
  }
  RunResult weft(const std::string& args) { return run_weft(args, *tmp / fmt::format("cmd{}", n++)); }
  std::unique_ptr<TempDir> tmp;
  std::string config;
  int n = 0;

 private:
  std::string group_;
};

// The message of the InputError that fn() throws (a test failure when it throws none).
template <typename Fn>
std::string input_error_message(Fn fn) {
  try {
    fn();
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no InputError thrown";
  return "";
}

}  // namespace weft::test
