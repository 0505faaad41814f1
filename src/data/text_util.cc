#include "data/text_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <random>

#include "core/durable_file.h"
#include "core/error.h"

namespace weft {

namespace {

// Length of the well-formed UTF-8 sequence starting at s[i], or, if it is ill-formed, minus
// the length of its maximal ill-formed subpart (always >= 1 byte).
inline int utf8_sequence(std::string_view s, size_t i) {
  const auto b = static_cast<uint8_t>(s[i]);
  if (b < 0x80) return 1;
  int need;
  uint8_t lo = 0x80, hi = 0xBF;
  if (b >= 0xC2 && b <= 0xDF) {
    need = 1;
  } else if (b >= 0xE0 && b <= 0xEF) {
    need = 2;
    if (b == 0xE0) lo = 0xA0;  // no overlongs
    if (b == 0xED) hi = 0x9F;  // no surrogates
  } else if (b >= 0xF0 && b <= 0xF4) {
    need = 3;
    if (b == 0xF0) lo = 0x90;  // no overlongs
    if (b == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return -1;
  }
  size_t j = i + 1;
  for (int k = 0; k < need; ++k, ++j) {
    if (j >= s.size()) return -static_cast<int>(j - i);
    const auto c = static_cast<uint8_t>(s[j]);
    if (c < lo || c > hi) return -static_cast<int>(j - i);
    lo = 0x80;
    hi = 0xBF;
  }
  return need + 1;
}

}  // namespace

size_t utf8_invalid_offset(std::string_view s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    // Fast path over ASCII, 8 bytes at a time.
    while (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, s.data() + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    int len = utf8_sequence(s, i);
    if (len < 0) return i;
    i += static_cast<size_t>(len);
  }
  return std::string_view::npos;
}

std::string sanitize_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 16);
  size_t i = 0;
  while (i < s.size()) {
    int len = utf8_sequence(s, i);
    if (len > 0) {
      out.append(s.data() + i, static_cast<size_t>(len));
      i += static_cast<size_t>(len);
    } else {
      out.append("\xEF\xBF\xBD");  // U+FFFD
      i += static_cast<size_t>(-len);
    }
  }
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

namespace {

// Opens `path` for reading, refusing a folder: the descriptor and its size.
std::pair<int, int64_t> open_text(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_input("cannot open {}: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
    const int err = errno;
    ::close(fd);
    if (S_ISDIR(st.st_mode)) throw_input("{} is a folder, expected a file", path);
    throw_input("cannot stat {}: {}", path, std::strerror(err));
  }
  return {fd, static_cast<int64_t>(st.st_size)};
}

// Reads up to n bytes (retrying EINTR); InputError naming the path on an error.
size_t read_some(int fd, char* buf, size_t n, const std::string& path) {
  for (;;) {
    const ssize_t got = ::read(fd, buf, n);
    if (got >= 0) return static_cast<size_t>(got);
    if (errno == EINTR) continue;
    const int err = errno;
    ::close(fd);
    throw_input("cannot read {}: {}", path, std::strerror(err));
  }
}

}  // namespace

std::string read_file(const std::string& path) {
  const auto [fd, size] = open_text(path);
  std::string data;
  data.reserve(size > 0 ? static_cast<size_t>(size) : 0);
  char buf[1 << 16];
  while (const size_t got = read_some(fd, buf, sizeof(buf), path)) data.append(buf, got);
  ::close(fd);
  return data;
}


std::string read_text_file(const std::string& path, int64_t max_bytes) {
  const auto [fd, size] = open_text(path);
  if (size > max_bytes) {
    ::close(fd);
    throw_input("{}: {} bytes, more than the {} a file of this kind can hold: not one weft wrote, or damaged", path,
                size, max_bytes);
  }
  std::string data;
  char buf[1 << 16];
  while (const size_t got = read_some(fd, buf, sizeof(buf), path)) {
    if (const void* z = std::memchr(buf, '\0', got)) {
      ::close(fd);
      throw_input("{}: a NUL byte at offset {}: not text (a file extended with zeros, or damaged)", path,
                  data.size() + static_cast<size_t>(static_cast<const char*>(z) - buf));
    }
    if (static_cast<int64_t>(data.size() + got) > max_bytes) {
      ::close(fd);
      throw_input("{}: more than the {} bytes a file of this kind can hold (it grew while read?)", path, max_bytes);
    }
    data.append(buf, got);
  }
  ::close(fd);
  return data;
}

void for_each_file_line(const std::string& path, int64_t max_line,
                        const std::function<void(std::string_view, int64_t)>& fn) {
  const int fd = open_text(path).first;
  std::string line;
  int64_t no = 1;
  char buf[1 << 16];
  auto finish = [&] {
    try {
      fn(line, no);
    } catch (...) {
      ::close(fd);
      throw;
    }
    line.clear();
    ++no;
  };
  while (const size_t got = read_some(fd, buf, sizeof(buf), path)) {
    for (size_t i = 0; i < got; ++i) {
      const char c = buf[i];
      if (c == '\n') {
        finish();
      } else if (c == '\0') {
        ::close(fd);
        throw_input("{}:{}: a NUL byte: not text (a file extended with zeros, or damaged)", path, no);
      } else {
        if (static_cast<int64_t>(line.size()) >= max_line) {
          ::close(fd);
          throw_input("{}:{}: a line longer than {} bytes: not a file weft wrote, or damaged", path, no, max_line);
        }
        line += c;
      }
    }
  }
  if (!line.empty()) finish();
  ::close(fd);
}

namespace {

// "<path>.tmp-<host>-<pid>-<random>": two processes (on one machine or sharing a file system)
// never pick the same name, so one's cleanup can never remove the other's file.
std::string unique_temp_name(const std::string& path) {
  char host[256] = {0};
  if (::gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') std::strcpy(host, "host");
  std::string h(host);
  for (char& c : h) {
    if (c == '/' || c == ' ') c = '_';
  }
  static thread_local std::mt19937_64 rng{std::random_device{}() ^ static_cast<uint64_t>(::getpid())};
  return fmt::format("{}.tmp-{}-{}-{:08x}", path, h, ::getpid(), static_cast<uint32_t>(rng()));
}

// Writes a fresh temporary file with `write` (returns 0 or an errno), syncs it and renames it
// over `path`. Only the temporary file this call created is ever removed.
void replace_file(const std::string& path, const std::function<int(int fd)>& write, const std::string& what) {
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {
    tmp = unique_temp_name(path);
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);  // never someone else's file
    if (fd < 0 && (errno != EEXIST || attempt >= 3)) throw WriteError(path, errno, what);
  }
  int err = write(fd);
  if (err == 0 && ::fsync(fd) != 0 && errno != EINVAL && errno != EROFS) err = errno;
  if (::close(fd) != 0 && err == 0 && errno != EINTR) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    throw WriteError(path, err, what);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    err = errno;
    ::unlink(tmp.c_str());
    throw WriteError(path, err, "renaming " + tmp + " over it");
  }
}

}  // namespace

void write_file_atomic(const std::string& path, std::string_view data) {
  replace_file(path, [&](int fd) { return write_fully(fd, data.data(), data.size()); }, "");
}

void write_file_atomic(const std::string& path, const std::function<bool(std::FILE*)>& write, const std::string& what) {
  replace_file(
      path,
      [&](int fd) {
        const int own = ::dup(fd);  // fclose closes its own descriptor; replace_file closes fd
        std::FILE* f = own >= 0 ? ::fdopen(own, "wb") : nullptr;
        if (f == nullptr) {
          const int err = errno;
          if (own >= 0) ::close(own);
          return err;
        }
        errno = 0;
        const bool ok = write(f) && std::fflush(f) == 0;
        const int err = ok ? 0 : (errno != 0 ? errno : EIO);
        if (std::fclose(f) != 0 && ok) return errno != 0 ? errno : EIO;
        return err;
      },
      what);
}

void for_each_line(std::string_view text, const std::function<void(std::string_view, int64_t)>& fn) {
  size_t pos = 0;
  int64_t line_no = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    fn(text.substr(pos, eol - pos), ++line_no);
    pos = eol + 1;
  }
}

std::vector<std::string> split_comma_list(std::string_view list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t end = std::min(list.find(',', start), list.size());
    const std::string_view item = list.substr(start, end - start);
    const size_t b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
    if (b != std::string_view::npos) out.emplace_back(item.substr(b, e - b + 1));
    start = end + 1;
  }
  return out;
}

std::vector<std::string> parse_name_list(std::string_view list, const std::string& what) {
  std::vector<std::string> out;
  if (list.empty()) return out;
  size_t start = 0;
  for (int k = 1; start <= list.size(); ++k) {
    const size_t end = std::min(list.find(',', start), list.size());
    const std::string_view item = list.substr(start, end - start);
    const size_t b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
    if (b == std::string_view::npos) {
      throw_input("{} '{}': name {} of the comma-separated list is empty", what, list, k);
    }
    out.emplace_back(item.substr(b, e - b + 1));
    start = end + 1;
  }
  return out;
}

}  // namespace weft
