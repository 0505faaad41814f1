// Preemption in one process (train/preemption.h): a SIGTERM or SIGINT sent at a chosen moment
// through the trainer's test hook (before a step) or a communicator that signals inside a
// barrier (during setup, during the stop checkpoint). Each case checks the handler's line, the
// step the run stops after, the checkpoint, and that --resume continues to exactly the losses of
// an uninterrupted run. Real processes, exit codes and mpirun: tests/mpi/preemption_test.py.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <random>
#include <regex>

#include "comm/self_comm.h"
#include "test_util.h"
#include "train/preemption.h"
#include "train/trainer.h"

namespace weft {
namespace {

using test::TempDir;
namespace fs = std::filesystem;

RunConfig preempt_run(const std::string& data, const std::string& out) {
  RunConfig c;
  c.model = "tiny";
  c.n_layer = 2, c.n_head = 2, c.n_embd = 64, c.n_ctx = 32, c.vocab_size = 512;
  c.data = data;
  c.seq_len = 32, c.global_batch = 4, c.micro_batch = 2, c.steps = 10;
  c.lr = 3e-3, c.warmup_steps = 2;
  c.val_every = 4, c.val_batches = 2;
  c.ckpt_every = 0, c.keep_last = 0;
  c.out = out;
  c.log_every = 100, c.threads = 1;
  return c;
}

// The single-process communicator, raising `signal` at its barrier number `at` (1-based: the
// first barrier is set-up's, before the run folder is opened; the next ones end checkpoints).
class SignalAtBarrier : public Communicator {
 public:
  SignalAtBarrier(int signal, int at) : inner_(make_self_communicator("world")), signal_(signal), at_(at) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const std::string& axis() const override { return inner_->axis(); }
  const std::vector<int>& world_ranks() const override { return inner_->world_ranks(); }
  void barrier() override {
    if (++barriers_ == at_) ::kill(::getpid(), signal_);
    inner_->barrier();
  }
  void all_reduce(void* b, int64_t n, CommDType t, ReduceOp op) override { inner_->all_reduce(b, n, t, op); }
  void reduce_scatter(const void* s, void* r, int64_t n, CommDType t, ReduceOp op) override { inner_->reduce_scatter(s, r, n, t, op); }
  void reduce_scatter_v(const void* s, void* r, const std::vector<int64_t>& c, CommDType t, ReduceOp op) override {
    inner_->reduce_scatter_v(s, r, c, t, op);
  }
  void all_gather(const void* s, void* r, int64_t n, CommDType t) override { inner_->all_gather(s, r, n, t); }
  void all_gather_v(const void* s, void* r, const std::vector<int64_t>& c, CommDType t) override { inner_->all_gather_v(s, r, c, t); }
  void broadcast(void* b, int64_t n, CommDType t, int root) override { inner_->broadcast(b, n, t, root); }
  void all_to_all_v(const void* s, void* r, const std::vector<int64_t>& c, CommDType t) override { inner_->all_to_all_v(s, r, c, t); }
  void send(const void* b, int64_t n, CommDType t, int p, int tag) override { inner_->send(b, n, t, p, tag); }
  void recv(void* b, int64_t n, CommDType t, int p, int tag) override { inner_->recv(b, n, t, p, tag); }
  CommHandle iall_reduce(void* b, int64_t n, CommDType t, ReduceOp op) override { return inner_->iall_reduce(b, n, t, op); }
  CommHandle ireduce_scatter_v(const void* s, void* r, const std::vector<int64_t>& c, CommDType t, ReduceOp op) override {
    return inner_->ireduce_scatter_v(s, r, c, t, op);
  }
  CommHandle iall_gather_v(const void* s, void* r, const std::vector<int64_t>& c, CommDType t) override {
    return inner_->iall_gather_v(s, r, c, t);
  }
  CommHandle iall_to_all_v(const void* s, void* r, const std::vector<int64_t>& c, CommDType t) override {
    return inner_->iall_to_all_v(s, r, c, t);
  }
  CommHandle isend(const void* b, int64_t n, CommDType t, int p, int tag) override { return inner_->isend(b, n, t, p, tag); }
  CommHandle irecv(void* b, int64_t n, CommDType t, int p, int tag) override { return inner_->irecv(b, n, t, p, tag); }
  void progress() override { inner_->progress(); }
  std::unique_ptr<Communicator> split(int color, int key, const std::string& axis) override { return inner_->split(color, key, axis); }
  void set_timeout(std::chrono::milliseconds t) override { inner_->set_timeout(t); }
  std::chrono::milliseconds timeout() const override { return inner_->timeout(); }
  void set_tracer(Tracer* t) override { inner_->set_tracer(t); }
  Tracer* tracer() const override { return inner_->tracer(); }

 private:
  std::unique_ptr<Communicator> inner_;
  int signal_, at_, barriers_ = 0;
};

// Every training and validation value of `run` equals the reference's, bit for bit.
void expect_same_curve(const std::string& run, const std::string& ref) {
  for (const char* key : {"loss", "val_loss", "lr", "grad_norm"}) {
    const auto a = test::metric_series(run, key), b = test::metric_series(ref, key);
    ASSERT_EQ(a.size(), b.size()) << key;
    for (const auto& [step, v] : b) EXPECT_EQ(a.at(step), v) << key << " at step " << step << " of " << run;
  }
}

std::vector<std::string> step_dirs(const std::string& run) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(run)) {
    if (e.path().filename().string().rfind("step-", 0) == 0) out.push_back(e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

class Preemption : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp = std::make_unique<TempDir>("preemption");
    test::make_random_corpus(*tmp / "data", 20000, 2000, 512);
    ref = *tmp / "ref";
  }
  // The uninterrupted run the resumed curves must equal (not every case needs it).
  void train_reference() { train(preempt_run(*tmp / "data", ref), {}); }
  // Trains into `name` with `signal` sent before 0-based step `at` (-1: never); returns the
  // result and, in `err`, what stderr received.
  TrainResult signalled(const RunConfig& c, int signal, int64_t at, std::string& err, Communicator* world = nullptr) {
    TrainOptions opt;
    opt.before_step = [&](int64_t step) {
      if (step == at) ::kill(::getpid(), signal);
    };
    testing::internal::CaptureStderr();
    TrainResult r = world ? train(c, opt, *world) : train(c, opt);
    err = testing::internal::GetCapturedStderr();
    return r;
  }
  TrainResult resume(const RunConfig& c) {
    TrainOptions opt;
    opt.resume = true;
    return train(c, opt);
  }
  std::unique_ptr<TempDir> tmp;
  std::string ref;
};

// The signal arrives just before step at+1 starts: that step runs, every later one does not.
TEST_F(Preemption, SignalAtRandomStepsStopsAfterThatStepAndResumesTheSameCurve) {
  train_reference();
  std::mt19937 g(static_cast<uint32_t>(::getpid()));
  for (int signal : {SIGTERM, SIGINT}) {
    const int64_t at = std::uniform_int_distribution<int64_t>(1, 7)(g);
    SCOPED_TRACE(fmt::format("{} before step {} (0-based)", signal_name(signal), at));
    const RunConfig c = preempt_run(*tmp / "data", *tmp / fmt::format("sig{}-at{}", signal, at));
    std::string err;
    const TrainResult r = signalled(c, signal, at, err);
    EXPECT_EQ(r.stop_signal, signal);
    EXPECT_EQ(r.steps_done, at + 1);
    EXPECT_EQ(train_exit_code(r.stop_signal, r.steps_done, c.steps), 128 + signal);
    EXPECT_TRUE(std::regex_search(err, std::regex(fmt::format(
        "weft: rank 0 received {} \\(from pid {}\\); stopping after step {} at a consistent point \\(every rank stops "
        "after the same step\\), then writing its checkpoint\n", signal_name(signal), ::getpid(), at + 1))))
        << err;
    EXPECT_TRUE(std::regex_search(err, std::regex(fmt::format(
        "weft: stopped by {} after step {} of 10 \\([0-9.]+ s after the signal\\); checkpoint .*step-{:06d} written in "
        "[0-9.]+ s; resume with --resume; exit code {}", signal_name(signal), at + 1, at + 1, 128 + signal))))
        << err;
    EXPECT_EQ(step_dirs(c.out), std::vector<std::string>{fmt::format("step-{:06d}", at + 1)});
    const TrainResult b = resume(c);
    EXPECT_EQ(b.first_step, at + 1);
    EXPECT_EQ(b.stop_signal, 0);
    expect_same_curve(c.out, ref);
    EXPECT_EQ(test::read_text(c.out + "/step-000010/model.safetensors"), test::read_text(ref + "/step-000010/model.safetensors"));
  }
}

// A signal during set-up (inside its barrier, before the run folder is opened): no step runs and
// nothing is written but the folder's config; the handler's line says so.
TEST_F(Preemption, SignalDuringSetupStopsBeforeTheFirstStepWithoutCheckpoint) {
  const RunConfig c = preempt_run(*tmp / "data", *tmp / "setup");
  SignalAtBarrier world(SIGTERM, 1);
  std::string err;
  const TrainResult r = signalled(c, SIGTERM, -1, err, &world);
  EXPECT_EQ(r.stop_signal, SIGTERM);
  EXPECT_EQ(r.steps_done, 0);
  EXPECT_EQ(train_exit_code(r.stop_signal, r.steps_done, c.steps), 143);
  EXPECT_NE(err.find("weft: rank 0 received SIGTERM (from pid " + std::to_string(::getpid()) +
                     ") during setup; stopping before the first step, without a checkpoint\n"), std::string::npos) << err;
  EXPECT_TRUE(std::regex_search(err, std::regex("weft: stopped by SIGTERM during setup \\([0-9.]+ s after the signal\\), "
                                                "before step 1; no checkpoint written \\(no step ran\\); exit code 143")))
      << err;
  EXPECT_TRUE(step_dirs(c.out).empty());
  EXPECT_TRUE(test::metric_series(c.out, "loss").empty());
}

// A second signal while the stop checkpoint is written (its closing barrier) is reported and
// changes nothing: the checkpoint is complete and the resumed curve is the reference's.
TEST_F(Preemption, SecondSignalDuringTheStopCheckpointIsReportedAndHarmless) {
  train_reference();
  const RunConfig c = preempt_run(*tmp / "data", *tmp / "twice");
  SignalAtBarrier world(SIGTERM, 2);  // barrier 1: set-up; 2: the stop checkpoint's
  std::string err;
  const TrainResult r = signalled(c, SIGTERM, 4, err, &world);
  EXPECT_EQ(r.steps_done, 5);
  EXPECT_NE(err.find("received SIGTERM (from pid " + std::to_string(::getpid()) + ") again; already stopping after step 5 (a checkpoint being written is "
                     "finished first"), std::string::npos) << err;
  EXPECT_EQ(step_dirs(c.out), std::vector<std::string>{"step-000005"});
  resume(c);
  expect_same_curve(c.out, ref);
}

// on_signal = false: the run stops after the same step without a checkpoint; --resume goes
// back to the newest periodic one and reaches the same curve.
TEST_F(Preemption, OnSignalFalseStopsWithoutCheckpointAndResumesFromTheNewest) {
  train_reference();
  RunConfig c = preempt_run(*tmp / "data", *tmp / "off");
  c.on_signal = false;
  c.ckpt_every = 4;
  std::string err;
  const TrainResult r = signalled(c, SIGTERM, 5, err);
  EXPECT_EQ(r.steps_done, 6);
  EXPECT_NE(err.find("stopping after step 6 at a consistent point (every rank stops after the same step), without a "
                     "checkpoint ([checkpoint] on_signal = false)"), std::string::npos) << err;
  EXPECT_NE(err.find("no checkpoint written ([checkpoint] on_signal = false); --resume continues from " + c.out + "/step-000004"),
            std::string::npos) << err;
  EXPECT_EQ(step_dirs(c.out), std::vector<std::string>{"step-000004"});
  EXPECT_EQ(resume(c).first_step, 4);
  expect_same_curve(c.out, ref);
}

// A signal before the last step: every step runs, the final checkpoint is the one due anyway,
// and the exit code is 0 (nothing is left to resume).
TEST_F(Preemption, SignalBeforeTheLastStepCompletesTheRunWithExitCodeZero) {
  train_reference();
  const RunConfig c = preempt_run(*tmp / "data", *tmp / "last");
  std::string err;
  const TrainResult r = signalled(c, SIGTERM, 9, err);
  EXPECT_EQ(r.steps_done, 10);
  EXPECT_EQ(r.stop_signal, SIGTERM);
  EXPECT_EQ(train_exit_code(r.stop_signal, r.steps_done, c.steps), 0);
  EXPECT_NE(err.find("after the last step (10): training is complete"), std::string::npos) << err;
  expect_same_curve(c.out, ref);
}

TEST(PreemptionCodes, ExitCodesFollowTheShellConvention) {
  EXPECT_EQ(train_exit_code(0, 3, 10), 0);
  EXPECT_EQ(train_exit_code(SIGTERM, 3, 10), 143);
  EXPECT_EQ(train_exit_code(SIGINT, 3, 10), 130);
  EXPECT_EQ(train_exit_code(SIGTERM, 10, 10), 0);
  EXPECT_EQ(signal_name(SIGTERM), "SIGTERM");
  EXPECT_EQ(signal_name(SIGINT), "SIGINT");
}

}  // namespace
}  // namespace weft
