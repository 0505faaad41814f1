// One run per folder (train/run_lock.h): a second run into a locked folder is refused naming the
// holder, on one rank and on two; a stale lock file is reported and taken over; two concurrent
// `weft train` into one folder: one is refused, the other completes with its folder intact.
#include "train/run_lock.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "core/error.h"
#include "run_fault_util.h"
#include "test_util.h"

namespace weft {
namespace {

using test::TempDir;
namespace fs = std::filesystem;

std::string this_host() {
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  return host;
}

std::string holder_line(const std::string& host, int64_t pid) {
  return fmt::format("{{\"host\": \"{}\", \"pid\": {}, \"started\": \"2026-01-02T03:04:05Z\", \"command\": \"weft train x\"}}\n",
                     host, pid);
}

TEST(RunLock, SecondHolderIsRefusedNamingTheFirst) {
  TempDir tmp("run-lock");
  const std::string run = tmp / "run";
  RunLock first = RunLock::acquire(run);
  ASSERT_TRUE(first.held());
  LockHolder h;
  ASSERT_TRUE(read_lock_holder(run + "/.weft.lock", h));
  EXPECT_EQ(h.pid, ::getpid());
  EXPECT_EQ(h.host, this_host());
  EXPECT_NE(h.command.find("weft_tests"), std::string::npos) << h.command;
  try {
    RunLock second = RunLock::acquire(run);
    FAIL() << "a second lock of " << run << " was granted";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(fmt::format("run folder {} is in use: pid {} on {}", run, ::getpid(), this_host())),
              std::string::npos) << msg;
  }
  first.release();
  EXPECT_FALSE(fs::exists(run + "/.weft.lock"));
  EXPECT_FALSE(fs::exists(run)) << "the lock created the folder and nothing else was written there";
  RunLock again = RunLock::acquire(run);
  EXPECT_TRUE(again.held());
}

TEST(RunLock, StaleLockFileIsReportedAndTakenOver) {
  TempDir tmp("run-lock");
  const std::string run = tmp / "run";
  fs::create_directories(run);
  std::ofstream(run + "/.weft.lock") << holder_line("gone-host", 999999);
  ::testing::internal::CaptureStderr();
  RunLock lock = RunLock::acquire(run);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find(run + "/.weft.lock: previous run pid 999999 on gone-host (started 2026-01-02T03:04:05Z) ended "
                           "without releasing the lock; taking it over"),
            std::string::npos) << err;
  LockHolder h;
  ASSERT_TRUE(read_lock_holder(run + "/.weft.lock", h));
  EXPECT_EQ(h.pid, ::getpid());
  lock.release();
  EXPECT_TRUE(fs::is_directory(run)) << "a folder the lock did not create stays";
}

// `weft train` started in the background; its pid is the process's (exec, no shell left).
pid_t spawn_weft(const std::string& args, const std::string& scratch) {
  const std::string cmd = fmt::format("cd {} && OMP_NUM_THREADS=2 exec {} {} > {}.out 2> {}.err < /dev/null",
                                      WEFT_SOURCE_DIR, WEFT_BINARY, args, scratch, scratch);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

int wait_exit_code(pid_t pid) {
  int st = 0;
  ::waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

// Waits until `pid` holds the lock of `run` (its lock file names it); false if it ended first.
bool wait_for_holder(const std::string& run, pid_t pid) {
  for (int i = 0; i < 3000; ++i) {
    LockHolder h;
    if (read_lock_holder(run + "/.weft.lock", h) && h.pid == pid) return true;
    if (::waitpid(pid, nullptr, WNOHANG) == pid) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

TEST(RunLock, ConcurrentTrainsIntoOneFolder) {
  TempDir tmp("run-lock");
  test::make_random_corpus(tmp / "data", 20000, 2000, 256);
  const std::string config = test::write_small_run_config(tmp, tmp / "data", 60);
  const std::string run = tmp / "run";
  const pid_t first = spawn_weft("train " + config + " --out " + run, tmp / "first");
  ASSERT_TRUE(wait_for_holder(run, first)) << test::read_text(tmp / "first.err");
  // The second asks to overwrite: refused before it deletes or writes anything.
  const auto t0 = std::chrono::steady_clock::now();
  const test::RunResult second = test::run_weft("train " + config + " --out " + run + " --overwrite", tmp / "second");
  const double refused_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(second.code, 2) << second.err;
  EXPECT_NE(second.err.find(fmt::format("weft: run folder {} is in use: pid {} on {}", run, first, this_host())),
            std::string::npos) << second.err;
  std::printf("[ case ] refused in %.2f s\n", refused_s);
  ASSERT_EQ(wait_exit_code(first), 0) << test::read_text(tmp / "first.err");
  // The first run's folder is whole: every step line once, its checkpoints, no lock left.
  const std::map<int64_t, double> losses = test::strict_losses(run);
  EXPECT_EQ(losses.size(), 60u);
  EXPECT_EQ(losses.rbegin()->first, 60);
  for (const char* f : {"config.toml", "step-000010/model.safetensors", "step-000060/trainer.json"}) {
    EXPECT_TRUE(fs::exists(run + "/" + f)) << f;
  }
  EXPECT_EQ(test::leftovers(run), "");
}

TEST(RunLock, StaleLockFileIsReportedByTrain) {
  TempDir tmp("run-lock");
  test::make_random_corpus(tmp / "data", 20000, 2000, 256);
  const std::string config = test::write_small_run_config(tmp, tmp / "data", 2);
  const std::string run = tmp / "run";
  fs::create_directories(run);
  std::ofstream(run + "/.weft.lock") << holder_line("gone-host", 999999);
  const test::RunResult r = test::run_weft("train " + config + " --out " + run, tmp / "train");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("previous run pid 999999 on gone-host (started 2026-01-02T03:04:05Z) ended without releasing "
                       "the lock; taking it over"),
            std::string::npos) << r.err;
  EXPECT_EQ(test::strict_losses(run).size(), 2u);
  EXPECT_EQ(test::leftovers(run), "");
}

// `weft train` on two ranks into a held folder: exit 2 with the holder named, nothing written.
// (That every rank learns the refusal is checked on the ranks themselves: tests/mpi/mpi_run_lock.cc.)
TEST(RunLock, RefusalReachesEveryRank) {
  TempDir tmp("run-lock");
  test::make_random_corpus(tmp / "data", 20000, 2000, 256);
  const std::string config = test::write_small_run_config(tmp, tmp / "data", 2);
  const std::string run = tmp / "run";
  RunLock held = RunLock::acquire(run);
  const auto t0 = std::chrono::steady_clock::now();
  const test::RunResult r =
      test::run_weft_with(test::mpi_launcher(2), "train " + config + " --dp 2 --threads 1 --out " + run, tmp / "mpi");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find(fmt::format("run folder {} is in use: pid {} on {}", run, ::getpid(), this_host())),
            std::string::npos) << r.err;
  EXPECT_LT(s, 30.0) << "a rank waited for the refusal";
  std::printf("[ case ] 2 ranks refused in %.2f s\n", s);
  EXPECT_FALSE(fs::exists(run + "/config.toml"));
  EXPECT_FALSE(fs::exists(run + "/metrics.jsonl"));
}

}  // namespace
}  // namespace weft
