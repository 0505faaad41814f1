// One run per folder: the writing rank (world rank 0) holds an advisory lock (flock) on
// <run>/.weft.lock from before anything in the folder is written (before --overwrite deletes
// anything, before config.toml) until the run ends. The file names the holder: one JSON line
// {"host", "pid", "started" (UTC, ISO 8601), "command"}. A second `weft train` into the folder
// is refused at once, naming that holder. The lock file is removed when the run ends, whether
// it succeeded or failed; a lock file found unlocked was left by a process that ended without
// releasing it (killed, or its machine died): it is reported in the log and taken over.
#pragma once
#include <cstdint>
#include <string>

namespace weft {

class Communicator;

inline constexpr const char* kRunLockFile = ".weft.lock";

// Who holds (or held) a run folder's lock, as its lock file says.
struct LockHolder {
  std::string host;
  int64_t pid = 0;
  std::string started;
  std::string command;
};

class RunLock {
 public:
  RunLock() = default;  // holds nothing
  RunLock(RunLock&& o) noexcept;
  RunLock& operator=(RunLock&& o) noexcept;
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;
  ~RunLock() { release(); }

  // Takes the lock of `run_dir` (creating the folder if needed) for this process. InputError
  // naming the holder's host and pid when another process holds it; WriteError when the lock
  // file cannot be written.
  static RunLock acquire(const std::string& run_dir);

  bool held() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }
  // Removes the lock file, then unlocks; removes the run folder too if this lock created it
  // and nothing else was written there. Idempotent.
  void release();

 private:
  void take_over_and_write();

  std::string path_;
  int fd_ = -1;
  std::string created_dir_;  // the run folder, if acquire created it
};

// The holder a lock file names; false if the file is missing, empty or not a holder line.
bool read_lock_holder(const std::string& lock_path, LockHolder& out);

// Collective over `world`: rank 0 takes the lock of `run_dir`, then every rank learns the
// outcome, so that on refusal every rank throws the same InputError (exit 2) and none is left
// waiting in a collective. The other ranks get a RunLock that holds nothing.
RunLock lock_run_folder(const std::string& run_dir, Communicator& world);

}  // namespace weft
