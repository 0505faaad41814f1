#include "ckpt/checksum.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <charconv>

namespace weft::ckpt_io {

uint64_t checksum(const void* data, size_t n) { return XXH3_64bits(data, n); }

std::string format_checksum(uint64_t h) { return fmt::format("0x{:016x}", h); }

bool parse_checksum(const std::string& s, uint64_t* out) {
  if (s.size() != 18 || s[0] != '0' || s[1] != 'x') return false;
  for (size_t i = 2; i < s.size(); ++i) {
    const char c = s[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  const auto r = std::from_chars(s.data() + 2, s.data() + s.size(), *out, 16);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

}  // namespace weft::ckpt_io
