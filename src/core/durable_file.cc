#include "core/durable_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <utility>

namespace weft {

namespace {

std::string bytes_text(uint64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes < 1024) return fmt::format("{} B", bytes);
  if (bytes < (uint64_t{1} << 20)) return fmt::format("{:.1f} KiB", b / 1024.0);
  if (bytes < (uint64_t{1} << 30)) return fmt::format("{:.1f} MiB", b / (1024.0 * 1024.0));
  return fmt::format("{:.1f} GiB", b / (1024.0 * 1024.0 * 1024.0));
}

std::string write_error_message(const std::string& path, int err, const std::string& detail) {
  return fmt::format("cannot write {}{}: {} ({})", path, detail.empty() ? "" : " (" + detail + ")", std::strerror(err),
                     free_space_note(path));
}

// Length of the open file `fd`, or -1.
off_t file_length(int fd) {
  struct stat st {};
  return ::fstat(fd, &st) == 0 ? st.st_size : -1;
}

}  // namespace

WriteError::WriteError(const std::string& path, int err, const std::string& detail)
    : RuntimeError(write_error_message(path, err, detail)), path_(path), err_(err) {}

std::string free_space_note(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path p(path);
  // The nearest existing ancestor: a file that was never created lives on its folder's file system.
  while (!p.empty() && !fs::exists(p, ec) && p.has_parent_path() && p.parent_path() != p) p = p.parent_path();
  if (p.empty()) p = ".";
  struct statvfs sv {};
  if (::statvfs(p.c_str(), &sv) != 0) return fmt::format("free space unknown: {}", std::strerror(errno));
  const uint64_t unit = sv.f_frsize != 0 ? sv.f_frsize : sv.f_bsize;
  return fmt::format("{} free of {}", bytes_text(static_cast<uint64_t>(sv.f_bavail) * unit),
                     bytes_text(static_cast<uint64_t>(sv.f_blocks) * unit));
}

int write_fully(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  constexpr size_t kMaxWrite = size_t{1} << 30;  // Linux writes at most ~2 GB per call
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n < kMaxWrite ? n : kMaxWrite);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (w == 0) return ENOSPC;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return 0;
}

namespace {

const char* file_kind(mode_t m) {
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISDIR(m)) return "a folder";
  if (S_ISLNK(m)) return "a symbolic link";
  return "not a regular file";
}

// fd (opened O_NONBLOCK) checked to be a regular file and made blocking again; closes it and
// throws otherwise.
int checked_regular(int fd, const std::string& path, const char* what) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw_input("cannot {} {}: {}", what, path, std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw_input("{} is {}, not a regular file: weft does not {} it; remove it", path, file_kind(st.st_mode), what);
  }
  const int fl = ::fcntl(fd, F_GETFL);
  if (fl >= 0) ::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  return fd;
}

[[noreturn]] void refuse_link(const std::string& path, const char* what) {
  throw_input("{} is a symbolic link: weft does not {} through a link; remove it", path, what);
}

}  // namespace

int open_for_writing(const std::string& path, int flags, unsigned mode) {
  const int fd = ::open(path.c_str(), flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, static_cast<mode_t>(mode));
  if (fd < 0) {
    const int err = errno;
    if (err == ELOOP) refuse_link(path, "write");
    // O_NONBLOCK on a FIFO without a reader: ENXIO. A device or socket: whatever it says.
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
      throw_input("{} is {}, not a regular file: weft does not write it; remove it", path, file_kind(st.st_mode));
    }
    throw WriteError(path, err);
  }
  return checked_regular(fd, path, "write");
}

int open_for_reading(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ELOOP) refuse_link(path, "read");
    return -1;
  }
  return checked_regular(fd, path, "read");
}

AppendFile::AppendFile(const std::string& path) : path_(path) {
  fd_ = open_for_writing(path, O_WRONLY | O_CREAT | O_APPEND);
}

AppendFile::AppendFile(AppendFile&& o) noexcept : path_(std::move(o.path_)), fd_(std::exchange(o.fd_, -1)) {}

AppendFile& AppendFile::operator=(AppendFile&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(o.path_);
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

AppendFile::~AppendFile() {
  if (fd_ >= 0) ::close(fd_);
}

void AppendFile::append(std::string_view record) {
  WEFT_CHECK(fd_ >= 0, "append to {}: the file is not open", path_);
  const off_t before = file_length(fd_);
  const int err = write_fully(fd_, record.data(), record.size());
  if (err == 0) return;
  // Part of the record may be on disk (a short write before ENOSPC): cut it off again.
  if (before >= 0 && ::ftruncate(fd_, before) != 0) {
    const int terr = errno;
    throw WriteError(path_, err, fmt::format("and truncating it back to {} bytes failed: {}", before, std::strerror(terr)));
  }
  throw WriteError(path_, err);
}

void AppendFile::sync() {
  if (fd_ >= 0 && ::fdatasync(fd_) != 0 && errno != EINVAL && errno != EROFS) throw WriteError(path_, errno);
}

void AppendFile::close() {
  if (fd_ < 0) return;
  const int rc = ::close(std::exchange(fd_, -1));
  if (rc != 0 && errno != EINTR) throw WriteError(path_, errno);
}

void append_or_roll_back(const std::string& path, const std::function<void()>& append) {
  std::error_code ec;
  const auto before = std::filesystem::exists(path, ec) ? std::filesystem::file_size(path, ec) : 0;
  try {
    append();
  } catch (...) {
    std::filesystem::resize_file(path, before, ec);  // best effort: the error in flight says what went wrong
    throw;
  }
}

void probe_writable(const std::string& path, const std::string& option, bool path_is_folder) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(path, ec);
  if (path_is_folder && fs::exists(st) && !fs::is_directory(st)) {
    throw_input("{} {}: exists and is not a folder", option, path);
  }
  fs::path dir = fs::absolute(path, ec);
  if (!path_is_folder) dir = dir.parent_path();
  while (!dir.empty() && !fs::exists(fs::symlink_status(dir, ec)) && dir != dir.parent_path()) dir = dir.parent_path();
  if (!fs::is_directory(dir, ec)) throw_input("{} {}: {} is not a folder", option, path, dir.string());
  const std::string probe = (dir / fmt::format(".weft-probe-{}", ::getpid())).string();
  int fd = -1;
  try {
    fd = open_for_writing(probe, O_WRONLY | O_CREAT | O_EXCL, 0600);
  } catch (const WriteError& e) {
    throw_input("{} {}: cannot create a file in {} ({})", option, path, dir.string(), std::strerror(e.error()));
  } catch (const InputError& e) {
    throw_input("{} {}: cannot create a file in {} ({})", option, path, dir.string(), e.what());
  }
  ::close(fd);
  ::unlink(probe.c_str());
}


}  // namespace weft
