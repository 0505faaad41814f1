// Checked writes (core/durable_file.h) and write_file_atomic's temporary files: an append that
// fails part way leaves the file as it was; a failed replace removes its own temporary file
// and no other.
#include "core/durable_file.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <regex>

#include "data/text_util.h"
#include "test_util.h"

namespace weft {
namespace {

using test::TempDir;
namespace fs = std::filesystem;

// RLIMIT_FSIZE makes the kernel fail a write past `limit` bytes of a file with EFBIG after a
// short write, the same pattern as a disk that fills in the middle of a write.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t limit) {
    ::getrlimit(RLIMIT_FSIZE, &saved_);
    old_handler_ = std::signal(SIGXFSZ, SIG_IGN);  // the error, not the signal
    rlimit l = saved_;
    l.rlim_cur = limit;
    EXPECT_EQ(::setrlimit(RLIMIT_FSIZE, &l), 0);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, old_handler_);
  }

 private:
  rlimit saved_{};
  void (*old_handler_)(int) = nullptr;
};

TEST(DurableFile, FailedAppendLeavesNoPartialRecord) {
  TempDir tmp("durable-file");
  const std::string path = tmp / "metrics.jsonl";
  AppendFile f(path);
  f.append("{\"step\":1}\n");
  const std::string before = test::read_text(path);
  try {
    FileSizeLimit limit(before.size() + 5);  // room for 5 bytes of the next record
    f.append("{\"step\":2,\"loss\":1.5}\n");
    FAIL() << "the append past the limit succeeded";
  } catch (const WriteError& e) {
    EXPECT_EQ(e.error(), EFBIG);
    EXPECT_EQ(e.path(), path);
    const std::string msg = e.what();
    EXPECT_TRUE(std::regex_search(msg, std::regex("^cannot write " + path + ": File too large \\([0-9.]+ [KMG]?i?B free of ")))
        << msg;
  }
  EXPECT_EQ(test::read_text(path), before) << "the 5 bytes written were not cut off";
  f.append("{\"step\":2}\n");  // the file goes on from a whole line
  EXPECT_EQ(test::read_text(path), before + "{\"step\":2}\n");
  f.close();
}

TEST(DurableFile, AppendOrRollBackRestoresTheLength) {
  TempDir tmp("durable-file");
  const std::string path = tmp / "trace.jsonl";
  std::ofstream(path) << "one\n";
  EXPECT_THROW(append_or_roll_back(path,
                                   [&] {
                                     std::ofstream(path, std::ios::app) << "two, torn";
                                     throw RuntimeError("write failed");
                                   }),
               RuntimeError);
  EXPECT_EQ(test::read_text(path), "one\n");
}

TEST(DurableFile, ReplaceRemovesOnlyItsOwnTemporaryFile) {
  TempDir tmp("durable-file");
  const std::string path = tmp / "config.toml";
  write_file_atomic(path, "a = 1\n");
  // What another process (or a crashed one) is writing next to it.
  const std::string foreign = path + ".tmp-otherhost-4242-deadbeef";
  std::ofstream(foreign) << "not ours";
  EXPECT_THROW(write_file_atomic(path, [](std::FILE*) { return false; }, "a config"), WriteError);
  EXPECT_EQ(test::read_text(path), "a = 1\n") << "a failed replace keeps the old file";
  EXPECT_EQ(test::read_text(foreign), "not ours");
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(tmp.path())) names.push_back(e.path().filename().string());
  EXPECT_EQ(names.size(), 2u) << "a temporary file was left behind";
  write_file_atomic(path, "a = 2\n");
  EXPECT_EQ(test::read_text(path), "a = 2\n");
  EXPECT_EQ(test::read_text(foreign), "not ours");
}

TEST(DurableFile, TemporaryNamesCarryHostPidAndARandomPart) {
  TempDir tmp("durable-file");
  const std::string path = tmp / "x.txt";
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  std::vector<std::string> seen;
  for (int i = 0; i < 2; ++i) {
    // A writer that looks at its own temporary file's name from inside the write.
    write_file_atomic(
        path,
        [&](std::FILE*) {
          for (const auto& e : fs::directory_iterator(tmp.path())) {
            const std::string n = e.path().filename().string();
            if (n.find(".tmp-") != std::string::npos) seen.push_back(n);
          }
          return true;
        },
        "nothing");
  }
  ASSERT_EQ(seen.size(), 2u);
  const std::regex name("x\\.txt\\.tmp-" + std::string(host) + "-" + std::to_string(::getpid()) + "-[0-9a-f]{8}");
  EXPECT_TRUE(std::regex_match(seen[0], name)) << seen[0];
  EXPECT_TRUE(std::regex_match(seen[1], name)) << seen[1];
  EXPECT_NE(seen[0], seen[1]);
}

TEST(DurableFile, FreeSpaceNoteOfAMissingFileUsesItsFolder) {
  TempDir tmp("durable-file");
  const std::string note = free_space_note(tmp / "not/yet/there.txt");
  EXPECT_TRUE(std::regex_match(note, std::regex("[0-9.]+ [KMG]?i?B free of [0-9.]+ [KMG]?i?B"))) << note;
}

}  // namespace
}  // namespace weft
