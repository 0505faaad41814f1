#include "data/text_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

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

std::string read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_input("cannot open {}: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    throw_input("cannot stat {}: {}", path, std::strerror(err));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    throw_input("{} is a folder, expected a file", path);
  }
  std::string data;
  data.reserve(st.st_size > 0 ? static_cast<size_t>(st.st_size) : 0);
  char buf[1 << 16];
  for (;;) {
    ssize_t got = ::read(fd, buf, sizeof(buf));
    if (got < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      throw_input("cannot read {}: {}", path, std::strerror(err));
    }
    if (got == 0) break;
    data.append(buf, static_cast<size_t>(got));
  }
  ::close(fd);
  return data;
}

void write_file_atomic(const std::string& path, std::string_view data) {
  write_file_atomic(
      path, [&](std::FILE* f) { return std::fwrite(data.data(), 1, data.size(), f) == data.size(); },
      fmt::format("{} bytes", data.size()));
}

void write_file_atomic(const std::string& path, const std::function<bool(std::FILE*)>& write, const std::string& what) {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw_runtime("cannot create {}: {}", tmp, std::strerror(errno));
  bool ok = write(f);
  int err = ok ? 0 : errno;
  if (std::fclose(f) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    std::remove(tmp.c_str());
    throw_runtime("cannot write {} ({}): {}", tmp, what, std::strerror(err));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    err = errno;
    std::remove(tmp.c_str());
    throw_runtime("cannot rename {} to {}: {}", tmp, path, std::strerror(err));
  }
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

}  // namespace weft
