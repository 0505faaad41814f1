#include "train/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "core/durable_file.h"
#include "core/error.h"
#include "core/log.h"
#include "data/text_util.h"

namespace fs = std::filesystem;

namespace weft {

namespace {

std::string host_name() {
  char host[256] = {0};
  if (::gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') return "unknown-host";
  return host;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm {};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// This process's command line (/proc/self/cmdline, arguments joined by spaces).
std::string command_line() {
  std::string raw;
  try {
    raw = read_file("/proc/self/cmdline");
  } catch (const std::exception&) {
    return "unknown";
  }
  while (!raw.empty() && raw.back() == '\0') raw.pop_back();
  for (char& c : raw) {
    if (c == '\0') c = ' ';
  }
  return raw.size() > 1000 ? raw.substr(0, 1000) + " ..." : raw;
}

std::string describe(const LockHolder& h) {
  return fmt::format("pid {} on {} (started {}: {})", h.pid, h.host, h.started, h.command);
}

// The refusal: the holder, as its lock file names it. The holder writes its line right after
// taking the lock, so an empty file is read again for a moment before giving up on a name.
[[noreturn]] void refuse(const std::string& run_dir, const std::string& path) {
  LockHolder h;
  bool named = false;
  for (int i = 0; i < 50 && !(named = read_lock_holder(path, h)); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const std::string who = named ? describe(h) : fmt::format("another process (its lock file {} names none)", path);
  throw_input("run folder {} is in use: {} holds its lock {}; wait for that run to end or stop it, or choose another --out",
              run_dir, who, path);
}

// Opens the lock file, creating the folder if a concurrent release removed it. Never through
// a symbolic link and never a FIFO, socket or device planted there (core/durable_file.h's
// open_for_writing: one line naming it, nothing written).
int open_lock_file(const std::string& run_dir, const std::string& path) {
  for (int attempt = 0;; ++attempt) {
    try {
      return open_for_writing(path, O_RDWR | O_CREAT);
    } catch (const WriteError& e) {
      const int err = e.error();
      std::error_code ec;
      if (err == ENOENT && attempt < 3 && fs::create_directories(run_dir, ec)) continue;
      if (err == ENOSPC || err == EDQUOT || err == EIO) throw;
      throw_input("cannot create the run folder's lock file {}: {}", path, std::strerror(err));
    }
  }
}

// True if `fd` is still the file at `path` (not a link put in its place): a holder that
// released its lock in between removed the file, and a lock on the removed file keeps no one
// else out.
bool still_linked(int fd, const std::string& path) {
  struct stat a {}, b {};
  return ::fstat(fd, &a) == 0 && ::lstat(path.c_str(), &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev;
}

// The start of a lock file (its one JSON line; at most 64 KiB), read without following a link
// or waiting on a FIFO.
std::string read_lock_text(const std::string& path) {
  const int fd = open_for_reading(path);
  if (fd < 0) throw_input("cannot read {}: {}", path, std::strerror(errno));
  std::string text(size_t{64} << 10, '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t r = ::read(fd, text.data() + got, text.size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  ::close(fd);
  text.resize(got);
  return text;
}

}  // namespace

bool read_lock_holder(const std::string& lock_path, LockHolder& out) {
  try {
    const nlohmann::json j = nlohmann::json::parse(read_lock_text(lock_path));
    out.host = j.at("host").get<std::string>();
    out.pid = j.at("pid").get<int64_t>();
    out.started = j.value("started", std::string("?"));
    out.command = j.value("command", std::string("?"));
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

RunLock::RunLock(RunLock&& o) noexcept
    : path_(std::move(o.path_)), fd_(std::exchange(o.fd_, -1)), created_dir_(std::move(o.created_dir_)) {}

RunLock& RunLock::operator=(RunLock&& o) noexcept {
  if (this != &o) {
    release();
    path_ = std::move(o.path_);
    fd_ = std::exchange(o.fd_, -1);
    created_dir_ = std::move(o.created_dir_);
  }
  return *this;
}

RunLock RunLock::acquire(const std::string& run_dir) {
  std::error_code ec;
  const bool existed = fs::exists(run_dir, ec);
  fs::create_directories(run_dir, ec);
  if (ec) throw_input("cannot create run folder {}: {}", run_dir, ec.message());
  RunLock lock;
  lock.path_ = (fs::path(run_dir) / kRunLockFile).string();
  if (!existed) lock.created_dir_ = run_dir;
  for (int attempt = 0; lock.fd_ < 0; ++attempt) {
    const int fd = open_lock_file(run_dir, lock.path_);
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      ::close(fd);
      if (err == EWOULDBLOCK) refuse(run_dir, lock.path_);
      throw_input("cannot lock {}: {} (the run folder's file system must support file locks)", lock.path_,
                  std::strerror(err));
    }
    if (still_linked(fd, lock.path_)) {
      lock.fd_ = fd;
    } else {
      ::close(fd);
      WEFT_CHECK(attempt < 100, "{}: the lock file kept being replaced while locking it", lock.path_);
    }
  }
  lock.take_over_and_write();
  return lock;
}

// Locked: reports what an earlier process left in the file, then writes this process's line.
void RunLock::take_over_and_write() {
  LockHolder old;
  if (read_lock_holder(path_, old)) {
    log_warn("{}: previous run pid {} on {} (started {}) ended without releasing the lock; taking it over", path_,
             old.pid, old.host, old.started);
  } else if (std::error_code ec; fs::file_size(path_, ec) > 0 && !ec) {
    log_warn("{}: an earlier process left a lock file that names no holder; taking it over", path_);
  }
  const nlohmann::json me = {
      {"host", host_name()}, {"pid", static_cast<int64_t>(::getpid())}, {"started", utc_now()}, {"command", command_line()}};
  const std::string line = me.dump() + "\n";
  int err = ::ftruncate(fd_, 0) == 0 ? 0 : errno;
  if (err == 0) err = ::lseek(fd_, 0, SEEK_SET) == 0 ? write_fully(fd_, line.data(), line.size()) : errno;
  if (err == 0 && ::fsync(fd_) != 0 && errno != EINVAL && errno != EROFS) err = errno;
  if (err != 0) {
    release();
    throw WriteError(path_, err);
  }
}

void RunLock::release() {
  if (fd_ < 0) return;
  // Unlinked while still locked: a process that opened the old file meanwhile sees, once it
  // holds the lock, that the file is gone (still_linked) and starts again.
  ::unlink(path_.c_str());
  ::close(std::exchange(fd_, -1));
  if (!created_dir_.empty()) ::rmdir(created_dir_.c_str());  // only if still empty
}

RunLock lock_run_folder(const std::string& run_dir, Communicator& world) {
  RunLock lock;
  int64_t head[2] = {0, 0};  // outcome (0 taken, 1 runtime failure, 2 refused), message length
  std::string msg;
  if (world.rank() == 0) {
    try {
      lock = RunLock::acquire(run_dir);
    } catch (const InputError& e) {
      msg = e.what(), head[0] = 2;
    } catch (const std::exception& e) {
      msg = e.what(), head[0] = 1;
    }
    head[1] = static_cast<int64_t>(msg.size());
  }
  if (world.size() > 1) {
    world.broadcast(head, 2, CommDType::kI64, 0);
    msg.resize(static_cast<size_t>(head[1]));
    if (head[1] > 0) world.broadcast(msg.data(), head[1], CommDType::kU8, 0);
  }
  if (head[0] == 2) throw InputError(msg);
  if (head[0] == 1) throw RuntimeError(msg);
  return lock;
}

}  // namespace weft
