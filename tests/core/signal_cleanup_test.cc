// core/signal_cleanup.h: a signal that ends a tool while it writes through temporary files
// removes them (issue 34 class 5), and the process still ends by that signal.
#include "core/signal_cleanup.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "test_util.h"

namespace weft {
namespace {

namespace fs = std::filesystem;

// In a child: registers `keep` then `gone`, unregisters `keep`, and sends itself `sig` inside a
// scope (or outside it); returns the child's wait status.
int child_dies(const std::string& gone, const std::string& keep, int sig, bool scoped) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::ofstream(gone) << "partial";
    std::ofstream(keep) << "renamed into place";
    register_signal_cleanup(keep);
    register_signal_cleanup(gone);
    unregister_signal_cleanup(keep);
    if (scoped) {
      SignalCleanupScope scope;
      ::raise(sig);
    } else {
      ::raise(sig);
    }
    ::_exit(0);  // not reached
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

TEST(SignalCleanup, ASignalRemovesTheRegisteredFilesAndStillEndsTheProcess) {
  test::TempDir tmp("signal-cleanup");
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    const std::string gone = tmp / fmt::format("gone-{}.tmp", sig), keep = tmp / fmt::format("keep-{}", sig);
    const int status = child_dies(gone, keep, sig, true);
    ASSERT_TRUE(WIFSIGNALED(status)) << sig;
    EXPECT_EQ(WTERMSIG(status), sig);
    EXPECT_FALSE(fs::exists(gone)) << sig;
    EXPECT_TRUE(fs::exists(keep)) << sig;  // unregistered: no longer a temporary file
  }
  // Without a scope the registration does nothing: the default action, the file stays.
  const std::string gone = tmp / "unscoped.tmp", keep = tmp / "unscoped";
  const int status = child_dies(gone, keep, SIGTERM, false);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_TRUE(fs::exists(gone));
}

TEST(SignalCleanup, TheScopeRestoresThePreviousHandlers) {
  struct sigaction before {};
  ::sigaction(SIGTERM, nullptr, &before);
  {
    SignalCleanupScope scope;
    struct sigaction during {};
    ::sigaction(SIGTERM, nullptr, &during);
    EXPECT_NE(during.sa_handler, before.sa_handler);
  }
  struct sigaction after {};
  ::sigaction(SIGTERM, nullptr, &after);
  EXPECT_EQ(after.sa_handler, before.sa_handler);
}

}  // namespace
}  // namespace weft
