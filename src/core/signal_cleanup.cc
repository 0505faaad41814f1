#include "core/signal_cleanup.h"

#include <limits.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "core/error.h"

namespace weft {

namespace {

// A slot is free (0), being written (1) or published (2): the handler reads published ones.
struct Slot {
  std::atomic<int> state{0};
  char path[PATH_MAX] = {0};
};
Slot g_slots[kMaxSignalCleanupPaths];

constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};
struct sigaction g_old[3];

extern "C" void cleanup_and_die(int sig) {
  for (Slot& s : g_slots) {
    if (s.state.load(std::memory_order_acquire) == 2) ::unlink(s.path);  // async-signal-safe
  }
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  ::raise(sig);
}

}  // namespace

void register_signal_cleanup(const std::string& path) {
  WEFT_CHECK(path.size() < PATH_MAX, "a temporary path of {} bytes", path.size());
  for (Slot& s : g_slots) {
    int free = 0;
    if (!s.state.compare_exchange_strong(free, 1, std::memory_order_acq_rel)) continue;
    std::memcpy(s.path, path.c_str(), path.size() + 1);  // written before it is published
    s.state.store(2, std::memory_order_release);
    return;
  }
  WEFT_CHECK(false, "more than {} temporary files registered for removal on a signal", kMaxSignalCleanupPaths);
}

void unregister_signal_cleanup(const std::string& path) {
  for (Slot& s : g_slots) {
    if (s.state.load(std::memory_order_acquire) == 2 && path == s.path) {
      s.state.store(0, std::memory_order_release);
      return;
    }
  }
}

SignalCleanupScope::SignalCleanupScope() {
  struct sigaction sa {};
  sa.sa_handler = cleanup_and_die;
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < 3; ++i) ::sigaction(kSignals[i], &sa, &g_old[i]);
}

SignalCleanupScope::~SignalCleanupScope() {
  for (size_t i = 0; i < 3; ++i) ::sigaction(kSignals[i], &g_old[i], nullptr);
}

}  // namespace weft
