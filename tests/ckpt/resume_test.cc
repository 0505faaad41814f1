// Resuming and pruning in a run folder: --resume verifies the newest checkpoint, --resume
// latest-valid walks back past corrupt ones and continues the same curve bit for bit; pruning
// and interrupted saves never leave a half-deleted folder under a checkpoint name, and a
// cleanup never deletes what a live process is writing.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/fs_util.h"
#include "ckpt/safetensors.h"
#include "ckpt_test_util.h"
#include "core/error.h"
#include "model/gpt/gpt_config.h"
#include "model/params.h"
#include "test_util.h"
#include "train/run_folder.h"
#include "train/trainer.h"

namespace weft {
namespace {

namespace fs = std::filesystem;
using testing_ckpt::dead_pid;
using testing_ckpt::suffix_for_pid;

using testing_ckpt::input_error_message;

// Flips one bit in the first byte of `tensor`'s data in `path`.
void corrupt_tensor(const std::string& path, const std::string& tensor) {
  uint64_t offset = 0;
  {
    SafetensorsFile f(path);
    std::string head = test::read_text(path).substr(0, 8);
    uint64_t n = 0;
    std::memcpy(&n, head.data(), 8);
    offset = 8 + n + f.info(tensor).begin;
  }
  std::string b = test::read_text(path);
  b[offset] = static_cast<char>(b[offset] ^ 0x01);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << b;
}

// A micro checkpoint saved as <run>/step-NNNNNN.
void save_step(const std::string& run, int64_t step) {
  static const ModelConfig layout_cfg = make_model_config("micro", 1, 2, 32, 16, 100, 0);
  static const ParamLayout layout = param_layout(layout_cfg);
  std::vector<float> p(static_cast<size_t>(layout.total()), 0.5f);
  save_checkpoint((fs::path(run) / step_dir_name(step)).string(), {&layout_cfg, &layout, p.data(), nullptr, nullptr, {{"step", step}}});
}

std::vector<int64_t> steps_of(const std::string& run) {
  std::vector<int64_t> out;
  for (const auto& [s, d] : list_checkpoints(run)) out.push_back(s);
  return out;
}

TEST(RunFolderPrune, InterruptedPruneLeavesNothingUnderACheckpointName) {
  test::TempDir tmp("ckpt");
  const std::string run = tmp / "run";
  for (int64_t s : {1, 2, 3}) save_step(run, s);
  // A prune of step 1 interrupted mid-delete by a process that died: half a folder, under a
  // name no lookup reads.
  const std::string trash = run + "/step-000001.trash-" + suffix_for_pid(dead_pid());
  fs::rename(run + "/step-000001", trash);
  fs::remove(trash + "/model.safetensors");
  // Leftovers of a live process (pid 1 on this host) and of another host: never touched.
  const std::string live = run + "/step-000002.trash-" + suffix_for_pid(1);
  const std::string other_host = run + "/step-000003.tmp-otherhost-" + std::to_string(dead_pid());
  fs::create_directories(live);
  fs::create_directories(other_host);
  const std::string dead_tmp = run + "/step-000003.tmp-" + suffix_for_pid(dead_pid());
  fs::create_directories(dead_tmp);
  EXPECT_EQ(steps_of(run), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(find_latest_checkpoint(run), run + "/step-000003");

  prune_checkpoints(run, 1);
  EXPECT_EQ(steps_of(run), (std::vector<int64_t>{3}));
  EXPECT_FALSE(fs::exists(trash)) << "a dead process' trash is removed";
  EXPECT_FALSE(fs::exists(dead_tmp)) << "a dead process' temporary folder is removed";
  EXPECT_FALSE(fs::exists(run + "/step-000002"));
  EXPECT_TRUE(fs::exists(live)) << "a live process' folder is never removed";
  EXPECT_TRUE(fs::exists(other_host)) << "another host's process cannot be proven gone";
  // Pruning itself leaves no trash behind.
  for (const auto& e : fs::directory_iterator(run)) {
    const std::string n = e.path().filename().string();
    EXPECT_TRUE(n == "step-000003" || e.path() == live || e.path() == other_host) << n;
  }
}

TEST(RunFolderPrune, SaveNeverTouchesALiveWritersTemporaryFolders) {
  test::TempDir tmp("ckpt");
  const std::string run = tmp / "run";
  save_step(run, 1);
  const std::string dir = run + "/step-000001";
  const std::string live_tmp = dir + ".tmp-" + suffix_for_pid(1);
  const std::string legacy_tmp = dir + ".tmp-4242";  // an older weft's name: writer unknown
  fs::create_directories(live_tmp);
  fs::create_directories(legacy_tmp);
  save_step(run, 1);
  EXPECT_TRUE(fs::exists(live_tmp));
  EXPECT_TRUE(fs::exists(legacy_tmp));
  // <dir> missing with only a live writer's previous version: refused, nothing moved.
  fs::rename(dir, dir + ".old-" + suffix_for_pid(1));
  try {
    save_step(run, 1);
    ADD_FAILURE() << "no RuntimeError";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("may still be running"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::exists(dir + ".old-" + suffix_for_pid(1)));
  // Readers still find it (the recovery rule).
  EXPECT_EQ(steps_of(run), (std::vector<int64_t>{1}));
}

RunConfig small_run(const std::string& data, const std::string& out) {
  RunConfig c;
  c.model = "tiny";
  c.n_layer = 1;
  c.n_head = 2;
  c.n_embd = 32;
  c.n_ctx = 16;
  c.data = data;
  c.seq_len = 16;
  c.global_batch = 2;
  c.micro_batch = 2;
  c.steps = 6;
  c.lr = 3e-3;
  c.warmup_steps = 1;
  c.val_every = 0;
  c.val_batches = 1;
  c.ckpt_every = 3;
  c.keep_last = 0;
  c.out = out;
  c.log_every = 100;
  c.threads = 2;
  return c;
}

// --resume with a corrupt newest checkpoint is refused naming it; latest-valid takes the one
// before and reproduces the uninterrupted losses bit for bit.
TEST(ResumeLatestValid, SkipsCorruptCheckpointAndContinuesTheSameCurve) {
  test::TempDir tmp("ckpt");
  test::make_random_corpus(tmp / "data", 6000, 1200);
  train(small_run(tmp / "data", tmp / "full"), {});
  const std::string part = tmp / "part";
  fs::copy(tmp / "full", part, fs::copy_options::recursive);
  corrupt_tensor(part + "/step-000006/model.safetensors", "transformer.h.0.mlp.c_fc.weight");
  const std::string metrics_before = test::read_text(part + "/metrics.jsonl");

  TrainOptions opt;
  opt.resume = true;
  const std::string msg = input_error_message([&] { train(small_run(tmp / "data", part), opt); });
  EXPECT_NE(msg.find(part + "/step-000006/model.safetensors: tensor transformer.h.0.mlp.c_fc.weight checksum"),
            std::string::npos) << msg;
  EXPECT_NE(msg.find("pass --resume latest-valid"), std::string::npos) << msg;
  EXPECT_EQ(test::read_text(part + "/metrics.jsonl"), metrics_before) << "a refused resume rewrites nothing";

  opt.resume_from = kResumeLatestValid;
  const TrainResult r = train(small_run(tmp / "data", part), opt);
  EXPECT_EQ(r.first_step, 3);
  EXPECT_EQ(r.steps_done, 6);
  const auto a = test::metric_series(tmp / "full", "loss");
  const auto b = test::metric_series(part, "loss");
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), a.size());
  for (const auto& [step, loss] : a) EXPECT_EQ(b.at(step), loss) << "step " << step;  // bit for bit
  verify_checkpoint(part + "/step-000006");  // rewritten whole
  EXPECT_EQ(test::read_text(tmp / "full/step-000006/model.safetensors"),
            test::read_text(part + "/step-000006/model.safetensors"));

  // A checkpoint beyond the run's total steps is refused with both values (equal is fine).
  opt.resume_from = part + "/step-000006";
  RunConfig shorter = small_run(tmp / "data", part);
  shorter.steps = 4;
  EXPECT_EQ(input_error_message([&] { train(shorter, opt); }),
            part + "/step-000006: checkpoint step 6 is beyond the run's total steps 4; raise --steps to at least 6 "
                   "or resume an earlier checkpoint");
  EXPECT_EQ(train(small_run(tmp / "data", part), opt).steps_done, 6);
}

TEST(ResumeLatestValid, NoValidCheckpointIsAnError) {
  test::TempDir tmp("ckpt");
  const std::string run = tmp / "run";
  save_step(run, 1);
  corrupt_tensor(run + "/step-000001/model.safetensors", "transformer.wte.weight");
  RunConfig c = small_run(tmp / "data", run);
  TrainOptions opt;
  opt.resume = true;
  opt.resume_from = kResumeLatestValid;
  const std::string msg = input_error_message([&] { inspect_run_folder(c, opt, make_model_config("micro", 1, 2, 32, 16, 100, 0)); });
  EXPECT_NE(msg.find("--resume latest-valid: none of the 1 checkpoints in " + run + " verifies (the newest: " + run +
                     "/step-000001/model.safetensors: tensor transformer.wte.weight checksum"),
            std::string::npos) << msg;
}

// The command line: exit 2 and one line for a corrupt newest checkpoint; latest-valid says
// which checkpoint it took and why it skipped the newer one.
TEST(ResumeLatestValid, CommandLine) {
  test::TempDir tmp("ckpt");
  test::make_random_corpus(tmp / "data", 6000, 1200);
  const std::string config = tmp / "run.toml";
  std::ofstream(config) << "[model]\nmodel = \"tiny\"\nn_layer = 1\nn_head = 2\nn_embd = 32\nn_ctx = 16\n"
                        << "[data]\ndata = \"" << (tmp / "data") << "\"\n"
                        << "[train]\nglobal_batch = 2\nmicro_batch = 2\nsteps = 4\nthreads = 1\n"
                        << "[checkpoint]\nckpt_every = 2\nkeep_last = 0\n"
                        << "[eval]\nval_batches = 1\n[run]\nout = \"" << (tmp / "run") << "\"\n";
  test::RunResult r = test::run_weft("train " + config, tmp / "a");
  ASSERT_EQ(r.code, 0) << r.err;
  corrupt_tensor(tmp / "run/step-000004/optimizer.safetensors", "exp_avg.transformer.wpe.weight");
  r = test::run_weft("train " + config + " --resume", tmp / "b");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("step-000004/optimizer.safetensors: tensor exp_avg.transformer.wpe.weight checksum"),
            std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--resume latest-valid"), std::string::npos) << r.err;
  r = test::run_weft("train " + config + " --resume latest-valid", tmp / "c");
  EXPECT_EQ(r.code, 0) << r.err;
  const std::string log = r.out + r.err;
  EXPECT_NE(log.find("skipping " + (tmp / "run/step-000004") + ": "), std::string::npos) << log;
  EXPECT_NE(log.find("resuming from " + (tmp / "run/step-000002") + " (1 newer checkpoint(s) skipped)"),
            std::string::npos) << log;
}

}  // namespace
}  // namespace weft
