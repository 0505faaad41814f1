// Shared by the run-folder fault tests (disk_full_test.cc, run_lock_test.cc): a small run's
// config, and a strict reader of metrics.jsonl.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "test_util.h"

namespace weft::test {

// A 2-layer model over a 256-token vocabulary (checkpoints of about 1.4 MiB) on the random
// corpus in `data`, `steps` steps, a checkpoint every 10 steps, no validation and no sample.
inline std::string write_small_run_config(const TempDir& tmp, const std::string& data, int steps) {
  const std::string path = tmp / "run.toml";
  std::ofstream(path) << "[model]\nmodel = \"tiny\"\nn_layer = 2\nn_head = 2\nn_embd = 64\nn_ctx = 32\nvocab_size = 256\n"
                      << "[data]\ndata = \"" << data << "\"\n"
                      << "[train]\nseq_len = 32\nglobal_batch = 4\nmicro_batch = 2\nsteps = " << steps
                      << "\nlr = 3e-3\nwarmup_steps = 2\nseed = 7\nthreads = 1\n"
                      << "[eval]\nval_every = 0\nval_batches = 0\n"
                      << "[checkpoint]\nckpt_every = 10\nkeep_last = 0\n"
                      << "[run]\nlog_every = 1\n[sample]\nsample_tokens = 0\n";
  return path;
}

// step -> loss of every step line of RUN/metrics.jsonl. Fails the test on a line that does not
// parse, a file that does not end in a newline (a torn last line) or a step seen twice.
inline std::map<int64_t, double> strict_losses(const std::string& run) {
  const std::string text = read_text(run + "/metrics.jsonl");
  std::map<int64_t, double> out;
  EXPECT_TRUE(text.empty() || text.back() == '\n') << run << "/metrics.jsonl ends in a torn line";
  std::istringstream in(text);
  std::string line;
  for (int no = 1; std::getline(in, line); ++no) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const std::exception& e) {
      ADD_FAILURE() << run << "/metrics.jsonl:" << no << " does not parse: " << e.what();
      continue;
    }
    if (!j.contains("loss")) continue;
    const int64_t step = j.at("step").get<int64_t>();
    EXPECT_EQ(out.count(step), 0u) << "step " << step << " twice in " << run << "/metrics.jsonl";
    out[step] = j.at("loss").get<double>();
  }
  return out;
}

// Bitwise: the same steps with the same losses.
inline void expect_same_curve(const std::map<int64_t, double>& got, const std::map<int64_t, double>& ref) {
  ASSERT_EQ(got.size(), ref.size());
  for (const auto& [step, loss] : ref) {
    ASSERT_TRUE(got.count(step)) << "step " << step << " missing";
    EXPECT_EQ(got.at(step), loss) << "step " << step;
  }
}

// Names in `dir` that a failed or finished run must not leave behind: temporary files and
// folders (".tmp"), and the lock file.
inline std::string leftovers(const std::string& dir) {
  std::string out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.find(".tmp") != std::string::npos || name == ".weft.lock") out += name + " ";
  }
  return out;
}

}  // namespace weft::test
