// Hostile input, class 1 of issue 34: files weft writes never follow what someone planted. A
// symbolic link, a FIFO or a socket where weft writes its run lock, a record file
// (metrics.jsonl, the trace) or a checkpoint file is refused with one line naming it; the
// link's target is untouched and nothing blocks. Label: hostile.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "ckpt/fs_util.h"
#include "comm/tracer.h"
#include "core/durable_file.h"
#include "core/error.h"
#include "run_fault_util.h"
#include "test_util.h"
#include "train/run_lock.h"

namespace weft {
namespace {

using test::TempDir;
namespace fs = std::filesystem;

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// `f` throws an InputError whose one line names `path` and contains `what`.
template <class F>
void expect_refused(F&& f, const std::string& path, const std::string& what) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    f();
    ADD_FAILURE() << path << ": not refused";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5)) << path << ": blocked";
}

// A victim file elsewhere and a link to it at `at`.
std::string plant_link(const TempDir& tmp, const std::string& at) {
  const std::string victim = tmp / "victim.txt";
  std::ofstream(victim) << "precious\n";
  fs::create_symlink(victim, at);
  return victim;
}

TEST(PlantedFiles, RunLockThroughALinkIsRefusedAndItsTargetKept) {
  TempDir tmp("planted");
  const std::string run = tmp / "run";
  fs::create_directories(run);
  const std::string lock = run + "/" + kRunLockFile;
  const std::string victim = plant_link(tmp, lock);
  expect_refused([&] { RunLock l = RunLock::acquire(run); }, lock, "is a symbolic link");
  EXPECT_EQ(slurp(victim), "precious\n");
  EXPECT_TRUE(fs::is_symlink(lock)) << "the planted link is left for its owner to remove";
}

TEST(PlantedFiles, RunLockOnAFifoOrASocketIsRefusedWithoutBlocking) {
  TempDir tmp("planted");
  const std::string run = tmp / "run";
  fs::create_directories(run);
  const std::string lock = run + "/" + kRunLockFile;
  ASSERT_EQ(::mkfifo(lock.c_str(), 0644), 0);
  expect_refused([&] { RunLock l = RunLock::acquire(run); }, lock, "is a FIFO, not a regular file");
  fs::remove(lock);
  const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(s, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", kRunLockFile);
  const fs::path cwd = fs::current_path();
  fs::current_path(run);  // bound by its short relative name (sun_path holds 108 bytes)
  const int bound = ::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  fs::current_path(cwd);
  ASSERT_EQ(bound, 0);
  expect_refused([&] { RunLock l = RunLock::acquire(run); }, lock, "is a socket, not a regular file");
  ::close(s);
}

TEST(PlantedFiles, RecordsAndCheckpointFilesAreNotWrittenThroughLinks) {
  TempDir tmp("planted");
  // metrics.jsonl (AppendFile), a trace (Tracer::write_jsonl), a checkpoint file (write_file_synced).
  const std::string metrics = tmp / "metrics.jsonl";
  const std::string victim = plant_link(tmp, metrics);
  expect_refused([&] { AppendFile f(metrics); }, metrics, "is a symbolic link");
  const std::string trace = tmp / "trace.jsonl";
  fs::create_symlink(victim, trace);
  expect_refused([&] { Tracer().write_jsonl(trace); }, trace, "is a symbolic link");
  const std::string state = tmp / "trainer.json";
  fs::create_symlink(victim, state);
  expect_refused([&] { ckpt_io::write_file_synced(state, "{}"); }, state, "is a symbolic link");
  EXPECT_EQ(slurp(victim), "precious\n");
  const std::string fifo = tmp / "fifo.jsonl";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  expect_refused([&] { AppendFile f(fifo); }, fifo, "is a FIFO");
}

// `weft train` into a folder whose lock is a planted link: exit 2, one line, the target kept,
// nothing else written in the folder.
TEST(PlantedFiles, TrainRefusesAPlantedLockLink) {
  TempDir tmp("planted");
  test::make_random_corpus(tmp / "data", 20000, 2000, 256);
  const std::string config = test::write_small_run_config(tmp, tmp / "data", 2);
  const std::string run = tmp / "run";
  fs::create_directories(run);
  const std::string victim = plant_link(tmp, run + "/" + kRunLockFile);
  const test::RunResult r = test::run_weft("train " + config + " --out " + run, tmp / "train");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("is a symbolic link: weft does not write through a link"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(victim), "precious\n");
  EXPECT_FALSE(fs::exists(run + "/metrics.jsonl"));
}

// `weft plan --csv` onto a planted link: the table is written to a fresh file renamed over the
// name, which replaces the link; the link's target is untouched.
TEST(PlantedFiles, PlanCsvReplacesAPlantedLinkInsteadOfWritingThroughIt) {
  TempDir tmp("planted");
  const std::string csv = tmp / "s.csv";
  const std::string victim = plant_link(tmp, csv);
  const test::RunResult r = test::run_weft(
      "plan --model gpt-175b --system " + std::string(WEFT_SOURCE_DIR) +
          "/systems/frontier.toml --gpus 1024 --global-batch 8000 --precision fp16 --tp 4 --pp 16 --micro-batch 1 "
          "--zero 1 --recompute full --scaling strong --scaling-gpus 512,1024 --csv " + csv,
      tmp / "plan");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(slurp(victim), "precious\n");
  EXPECT_FALSE(fs::is_symlink(csv));
  EXPECT_NE(slurp(csv).find("strong,1024,8000"), std::string::npos);
}

}  // namespace
}  // namespace weft
