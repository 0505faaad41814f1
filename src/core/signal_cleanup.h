// Temporary files removed when a signal ends the process (issue 34 class 5): a tool that writes
// a large output through a temporary file (`weft prepare --synthetic-weather`'s NetCDF files)
// registers the temporary path while it exists; a SignalCleanupScope installs, for its
// lifetime, handlers of SIGINT, SIGTERM and SIGHUP that unlink every registered path and then
// end the process by the same signal (default action: the exit status says which). Without a
// scope (e.g. in `weft train`, whose handlers stop at a step boundary) registering is harmless.
#pragma once
#include <string>

namespace weft {

// Registers `path` for removal by a signal; unregister when the file is renamed into place or
// removed. At most kMaxSignalCleanupPaths at once (InternalError beyond). Thread-safe against
// the handler (the slots are written before they are published).
inline constexpr int kMaxSignalCleanupPaths = 16;
void register_signal_cleanup(const std::string& path);
void unregister_signal_cleanup(const std::string& path);

// Installs the handlers for its lifetime (restoring the previous ones). One at a time.
class SignalCleanupScope {
 public:
  SignalCleanupScope();
  ~SignalCleanupScope();
  SignalCleanupScope(const SignalCleanupScope&) = delete;
  SignalCleanupScope& operator=(const SignalCleanupScope&) = delete;
};

}  // namespace weft
