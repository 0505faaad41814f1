#include "ckpt/fs_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <signal.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/durable_file.h"
#include "core/error.h"

namespace weft::ckpt_io {

void write_all(int fd, const void* data, size_t n, const std::string& path) {
  if (const int err = write_fully(fd, data, n); err != 0) {
    throw_runtime("{}: write failed: {}", path, std::strerror(err));
  }
}

void write_file_synced(const std::string& path, const std::string& contents) {
  // Never through a link or into a FIFO planted at the path (InputError naming it).
  const int fd = open_for_writing(path, O_WRONLY | O_CREAT | O_TRUNC);
  try {
    write_all(fd, contents.data(), contents.size(), path);
    if (::fsync(fd) != 0) throw_runtime("{}: fsync failed: {}", path, std::strerror(errno));
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0) throw_runtime("{}: close failed: {}", path, std::strerror(errno));
}

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_runtime("{}: cannot open for fsync: {}", path, std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0 && err != EINVAL && err != EROFS) {
    throw_runtime("{}: fsync failed: {}", path, std::strerror(err));
  }
}

std::string parent_dir(const std::string& path) {
  std::filesystem::path p(path);
  std::filesystem::path parent = p.parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

std::string read_text_file(const std::string& path, const char* what) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw_input("{}: cannot read {}: it is a folder", path, what);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_input("{}: cannot read {}: {}", path, what, std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw_runtime("{}: read failed", path);
  return ss.str();
}

namespace {

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "unknown-host";
  std::string h(buf);
  for (char& c : h) {
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.')) c = '_';
  }
  return h.empty() ? std::string("unknown-host") : h;
}

}  // namespace

std::string writer_suffix() { return host_name() + "-" + std::to_string(::getpid()); }

bool writer_gone(const std::string& suffix) {
  const size_t dash = suffix.rfind('-');
  if (dash == std::string::npos || dash == 0 || dash + 1 == suffix.size()) return false;  // no host: unknown writer
  const std::string pid_text = suffix.substr(dash + 1);
  if (pid_text.size() > 9 || pid_text.find_first_not_of("0123456789") != std::string::npos) return false;
  if (suffix.substr(0, dash) != host_name()) return false;  // another machine's process: cannot tell
  const pid_t pid = static_cast<pid_t>(std::stol(pid_text));
  if (pid == ::getpid()) return true;
  if (pid <= 0) return false;
  return ::kill(pid, 0) != 0 && errno == ESRCH;  // EPERM: alive, owned by another user
}

}  // namespace weft::ckpt_io
