// Checked writes: every write's result is looked at, a failure names the file, the error and
// the free space of its file system, and an append never leaves part of a record behind.
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "core/error.h"

namespace weft {

// A write that failed (ENOSPC, EDQUOT, EIO, ...). what(): "cannot write PATH[ (DETAIL)]: REASON
// (FREE)", FREE as free_space_note(PATH) says it at the moment of the failure.
class WriteError : public RuntimeError {
 public:
  WriteError(const std::string& path, int err, const std::string& detail = "");
  const std::string& path() const { return path_; }
  int error() const { return err_; }  // the errno of the failed call

 private:
  std::string path_;
  int err_;
};

// "12.0 MiB free of 64.0 MiB" for the file system that holds `path` (its folder when `path`
// does not exist; statvfs, the space an unprivileged process may use), or "free space
// unknown: REASON".
std::string free_space_note(const std::string& path);

// Writes all `n` bytes to `fd` (retrying EINTR and short writes). Returns 0, or the errno of
// the call that failed (a write that wrote nothing counts as ENOSPC).
int write_fully(int fd, const void* data, size_t n);

// Opens `path` for weft to write without trusting what is already there: the last component
// is never followed if it is a symbolic link (O_NOFOLLOW), the open never blocks (a FIFO
// planted there is not waited on), and anything but a regular file (FIFO, socket, device) is
// refused. flags: the open(2) access and creation flags (O_CLOEXEC added); returns the
// descriptor (blocking again). InputError, one line naming the file and what it is, for a link
// or a file that is not regular; WriteError for the other failures of open(2).
int open_for_writing(const std::string& path, int flags, unsigned mode = 0644);
// Whether weft can create `path` (a file, or a folder when path_is_folder): tried for real by
// creating and removing a file in its folder, or, where that does not exist yet, in its nearest
// existing ancestor, which must be a folder (access() says yes to root on a read-only mount or
// in /proc; a file created for real does not); a folder target that exists as something else
// is refused. Creates nothing that stays. InputError naming `option`, the path and the reason.
void probe_writable(const std::string& path, const std::string& option, bool path_is_folder);
// The same checks for reading a file weft wrote (a lock file, a record): -1 with errno set
// when it cannot be opened (ENOENT ...), InputError for a link or a file that is not regular.
int open_for_reading(const std::string& path);

// A file opened for appending whole records (lines). Each record goes out in one write(); if
// that write fails or is short and the rest fails, the file is truncated back to its length
// before the record, so the file never ends in part of a record. Single writer (the run
// folder's lock, train/run_lock.h, guarantees it for a run folder).
class AppendFile {
 public:
  AppendFile() = default;
  // Opens (creates, 0644) `path` for appending. WriteError if it cannot.
  explicit AppendFile(const std::string& path);
  AppendFile(AppendFile&& o) noexcept;
  AppendFile& operator=(AppendFile&& o) noexcept;
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;
  ~AppendFile();

  bool is_open() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }
  // Appends `record` whole or not at all. WriteError on failure (the file keeps its length).
  void append(std::string_view record);
  // fdatasync: the records appended so far survive a crash of the machine. WriteError.
  void sync();
  // Closes the file, checking the result (network file systems report late errors here).
  void close();

 private:
  std::string path_;
  int fd_ = -1;
};

// Runs `append`, which appends to `path` by means of its own (an ofstream); if it throws,
// `path` is truncated back to its length before the call, and the exception is rethrown.
void append_or_roll_back(const std::string& path, const std::function<void()>& append);

}  // namespace weft
