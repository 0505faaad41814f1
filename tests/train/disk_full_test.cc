// Fault cases: the disk fills up in the middle of `weft train`, once while a metrics line is
// written and once while a checkpoint is written. Each case checks the one-line message (file,
// error, free space, the step reached, the checkpoint to resume from), exit code 1, a
// metrics.jsonl that parses line by line with no torn line, no temporary file or lock left
// behind, and that `--resume` after freeing the space continues to the uninterrupted run's
// curve bit for bit.
//
// The disk fills for real where a small tmpfs can be mounted (root, and `mount` works): the
// kernel fails the writes. Elsewhere an LD_PRELOAD shim (diskfull_shim.c) fails the run
// folder's writes with ENOSPC itself. Each case prints and records which mechanism it used;
// the *Injected cases use the shim everywhere, so that both mechanisms are exercised here.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <regex>

#include "run_fault_util.h"
#include "test_util.h"

namespace weft {
namespace {

using test::TempDir;
namespace fs = std::filesystem;

// A small tmpfs mounted at `dir` for the object's life, when this process may mount one;
// otherwise why_not() says why.
class SmallTmpfs {
 public:
  SmallTmpfs(const std::string& dir, const std::string& size) : dir_(dir) {
    fs::create_directories(dir);
    if (::geteuid() != 0) {
      why_not_ = fmt::format("not running as root (uid {})", ::geteuid());
      return;
    }
    const std::string cmd = fmt::format("mount -t tmpfs -o size={} weft-test-tmpfs '{}' 2>&1", size, dir);
    std::string out;
    if (std::FILE* p = ::popen(cmd.c_str(), "r")) {
      char buf[256];
      while (std::fgets(buf, sizeof(buf), p)) out += buf;
      mounted_ = ::pclose(p) == 0;
    }
    if (!mounted_) why_not_ = "mount -t tmpfs failed: " + (out.empty() ? std::string("no output") : out);
  }
  ~SmallTmpfs() {
    if (mounted_ && std::system(fmt::format("umount '{}' || umount -l '{}'", dir_, dir_).c_str()) != 0) {
      ADD_FAILURE() << "cannot unmount " << dir_;
    }
  }
  bool mounted() const { return mounted_; }
  const std::string& why_not() const { return why_not_; }

 private:
  std::string dir_;
  bool mounted_ = false;
  std::string why_not_;
};

struct DiskFullCase {
  int64_t at_line = 11;    // the disk fills just before this metrics line (after checkpoint 10)
  int64_t leave = 0;       // bytes left free then
  bool force_inject = false;
  std::string file;        // the file the message must name (relative to the run folder)
};

// The uninterrupted run's curve (20 steps).
std::map<int64_t, double> reference_curve(const TempDir& tmp, const std::string& config) {
  const test::RunResult r = test::run_weft("train " + config + " --out " + tmp / "reference", tmp / "reference");
  EXPECT_EQ(r.code, 0) << r.err;
  return test::strict_losses(tmp / "reference");
}

// Checks the failed run's message and folder; returns the step it stopped after.
int64_t check_failed_run(const test::RunResult& r, const std::string& run, const DiskFullCase& c) {
  EXPECT_EQ(r.code, 1) << r.err;
  const std::regex line("weft: (?:error: )?cannot write " + run + "/" + c.file +
                        "(?:: .*)?: No space left on device \\([0-9.]+ [KMG]?i?B free of [0-9.]+ [KMG]?i?B\\); "
                        "stopped after step ([0-9]+); resume from " + run + "/step-000010 with --resume\n");
  std::smatch m;
  EXPECT_TRUE(std::regex_search(r.err, m, line)) << "stderr:\n" << r.err;
  int errors = 0;
  for (size_t p = 0; (p = r.err.find("weft: ", p)) != std::string::npos; ++p) ++errors;
  EXPECT_EQ(errors, 1) << "one line, not several:\n" << r.err;
  EXPECT_EQ(test::leftovers(run), "");
  EXPECT_FALSE(fs::exists(run + "/step-000020"));
  return m.size() > 1 ? std::stoll(m[1].str()) : -1;
}

void run_disk_full_case(const DiskFullCase& c) {
  TempDir tmp("disk-full");
  test::make_random_corpus(tmp / "data", 20000, 2000, 256);
  const std::string config = test::write_small_run_config(tmp, tmp / "data", 20);
  const auto t0 = std::chrono::steady_clock::now();
  const std::map<int64_t, double> ref = reference_curve(tmp, config);
  ASSERT_EQ(ref.size(), 20u);

  SmallTmpfs mount(tmp / "mnt", "8m");
  const bool tmpfs = mount.mounted() && !c.force_inject;
  const std::string mechanism =
      tmpfs ? "tmpfs of 8 MiB, filled by the shim: the kernel fails the writes"
            : "LD_PRELOAD shim injecting ENOSPC (" + (c.force_inject ? std::string("this case always injects") : mount.why_not()) + ")";
  std::printf("[ mechanism ] %s\n", mechanism.c_str());
  ::testing::Test::RecordProperty("mechanism", mechanism);
  const std::string run = tmpfs ? tmp / "mnt/run" : tmp / "run";
  const std::string env = fmt::format(
      "LD_PRELOAD={} WEFT_DISKFULL_DIR={} WEFT_DISKFULL_AT_LINE={} WEFT_DISKFULL_LEAVE={} WEFT_DISKFULL_MODE={} "
      "WEFT_DISKFULL_FILLER={}",
      WEFT_DISKFULL_SHIM, run, c.at_line, c.leave, tmpfs ? "tmpfs" : "inject", tmp / "mnt/filler");
  fs::create_directories(run);  // the shim resolves the folder when it starts
  const test::RunResult failed = test::run_weft_with(env, "train " + config + " --out " + run, tmp / "failed");
  const int64_t stopped = check_failed_run(failed, run, c);

  // The folder still parses: the step lines up to the failure, none torn.
  const std::map<int64_t, double> before = test::strict_losses(run);
  const int64_t last_line = c.file == "metrics.jsonl" ? stopped - 1 : stopped;
  EXPECT_GE(stopped, c.at_line);
  EXPECT_EQ(static_cast<int64_t>(before.size()), last_line);
  if (!before.empty()) {
    EXPECT_EQ(before.rbegin()->first, last_line);
  }

  // Space freed, the run resumes from step 10 and ends on the uninterrupted curve.
  if (tmpfs) fs::remove(tmp / "mnt/filler");
  const test::RunResult resumed = test::run_weft("train " + config + " --out " + run + " --resume", tmp / "resumed");
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_NE(resumed.out.find("resuming from " + run + "/step-000010 at step 10"), std::string::npos) << resumed.out;
  test::expect_same_curve(test::strict_losses(run), ref);
  EXPECT_EQ(test::leftovers(run), "");
  std::printf("[ case ] stopped after step %lld; %.1f s\n", static_cast<long long>(stopped),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

TEST(DiskFull, DuringMetricsWrite) { run_disk_full_case({11, 0, false, "metrics.jsonl"}); }
TEST(DiskFull, DuringCheckpointWrite) { run_disk_full_case({11, 64 << 10, false, "step-000020"}); }
// 100 bytes left: the line is written in part, then fails, and must be cut off again.
TEST(DiskFull, DuringMetricsWriteInjected) { run_disk_full_case({11, 100, true, "metrics.jsonl"}); }
TEST(DiskFull, DuringCheckpointWriteInjected) { run_disk_full_case({11, 64 << 10, true, "step-000020"}); }

}  // namespace
}  // namespace weft
