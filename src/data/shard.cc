#include "data/shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "data/text_util.h"

namespace weft {

static_assert(std::endian::native == std::endian::little,
              "shards are little-endian; a big-endian host needs byte swapping here");

int shard_token_bytes(int vocab_size) { return vocab_size <= 65536 ? 2 : 4; }

void write_shard(const std::string& path, const std::vector<int32_t>& tokens, int vocab_size) {
  write_shard(path, tokens.data(), static_cast<int64_t>(tokens.size()), vocab_size);
}

void write_shard(const std::string& path, const int32_t* tokens, int64_t count, int vocab_size) {
  if (vocab_size <= 0) throw_input("{}: vocab_size must be positive, got {}", path, vocab_size);
  if (count < 0 || count > INT32_MAX) {
    throw_input("{}: a shard holds at most {} tokens (int32 count in the header), got {}", path,
                INT32_MAX, count);
  }
  for (int64_t i = 0; i < count; ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab_size) {
      throw_input("{}: token {} of {} is {}, outside the vocabulary [0, {})", path, i, count,
                  tokens[i], vocab_size);
    }
  }
  const int width = shard_token_bytes(vocab_size);
  int32_t header[kShardHeaderInts] = {};
  header[0] = width == 2 ? kShardMagicU16 : kShardMagicU32;
  header[1] = width == 2 ? kShardVersionU16 : kShardVersionU32;
  header[2] = static_cast<int32_t>(count);

  write_file_atomic(
      path,
      [&](std::FILE* f) {
        bool ok = std::fwrite(header, sizeof(header), 1, f) == 1;
        if (width == 4) return ok && std::fwrite(tokens, 4, static_cast<size_t>(count), f) == static_cast<size_t>(count);
        constexpr int64_t kChunk = 1 << 16;
        std::vector<uint16_t> buf(static_cast<size_t>(std::min(count, kChunk)));
        for (int64_t b = 0; ok && b < count; b += kChunk) {
          const int64_t n = std::min(kChunk, count - b);
          for (int64_t i = 0; i < n; ++i) buf[i] = static_cast<uint16_t>(tokens[b + i]);
          ok = std::fwrite(buf.data(), 2, static_cast<size_t>(n), f) == static_cast<size_t>(n);
        }
        return ok;
      },
      fmt::format("shard of {} tokens", count));
}

ShardReader::ShardReader(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_input("cannot open token shard {}: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    throw_input("cannot stat token shard {}: {}", path, std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw_input("token shard {} is not a regular file", path);
  }
  const int64_t file_bytes = st.st_size;
  if (file_bytes < kShardHeaderBytes) {
    ::close(fd);
    throw_input("{}: file holds {} bytes, shorter than the {}-byte shard header", path, file_bytes,
                kShardHeaderBytes);
  }
  void* m = ::mmap(nullptr, static_cast<size_t>(file_bytes), PROT_READ, MAP_SHARED, fd, 0);
  int err = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (m == MAP_FAILED) {
    throw_runtime("cannot mmap token shard {} ({} bytes): {}", path, file_bytes, std::strerror(err));
  }
  map_ = static_cast<const unsigned char*>(m);
  map_bytes_ = static_cast<size_t>(file_bytes);

  try {
    int32_t header[3];
    std::memcpy(header, map_, sizeof(header));
    magic_ = header[0];
    version_ = header[1];
    const int32_t count = header[2];
    if (magic_ == kShardMagicU16) {
      if (version_ != kShardVersionU16) {
        throw_input("{}: magic {} (uint16 tokens) goes with version {}, but the header says "
                    "version {}{}",
                    path, magic_, kShardVersionU16, version_,
                    version_ == kShardVersionU32 ? " (the uint32 format's version)" : "");
      }
      token_bytes_ = 2;
    } else if (magic_ == kShardMagicU32) {
      if (version_ != kShardVersionU32) {
        throw_input("{}: magic {} (uint32 tokens) goes with version {}, but the header says "
                    "version {}{}",
                    path, magic_, kShardVersionU32, version_,
                    version_ == kShardVersionU16 ? " (the uint16 format's version)" : "");
      }
      token_bytes_ = 4;
    } else {
      throw_input("{}: bad magic number {} in the shard header (expected {} for uint16 tokens or "
                  "{} for uint32 tokens): not an llm.c/weft token shard",
                  path, magic_, kShardMagicU16, kShardMagicU32);
    }
    if (count < 0) throw_input("{}: header says {} tokens (negative)", path, count);
    count_ = count;
    const int64_t expected = count_ * token_bytes_;
    const int64_t body = file_bytes - kShardHeaderBytes;
    if (body != expected) {
      throw_input("{}: header says {} tokens ({} bytes) but the file holds {} bytes after the "
                  "header ({})",
                  path, count_, expected, body,
                  body < expected ? "truncated" : "trailing bytes");
    }
  } catch (...) {
    release();
    throw;
  }
}

ShardReader::ShardReader(ShardReader&& o) noexcept
    : path_(std::move(o.path_)),
      map_(o.map_),
      map_bytes_(o.map_bytes_),
      count_(o.count_),
      token_bytes_(o.token_bytes_),
      magic_(o.magic_),
      version_(o.version_) {
  o.map_ = nullptr;
  o.map_bytes_ = 0;
  o.count_ = 0;
}

ShardReader& ShardReader::operator=(ShardReader&& o) noexcept {
  if (this != &o) {
    release();
    path_ = std::move(o.path_);
    map_ = o.map_;
    map_bytes_ = o.map_bytes_;
    count_ = o.count_;
    token_bytes_ = o.token_bytes_;
    magic_ = o.magic_;
    version_ = o.version_;
    o.map_ = nullptr;
    o.map_bytes_ = 0;
    o.count_ = 0;
  }
  return *this;
}

ShardReader::~ShardReader() { release(); }

void ShardReader::release() noexcept {
  if (map_) ::munmap(const_cast<unsigned char*>(map_), map_bytes_);
  map_ = nullptr;
  map_bytes_ = 0;
}

int32_t ShardReader::token(int64_t i) const {
  if (i < 0 || i >= count_) {
    throw_input("{}: token index {} is outside [0, {})", path_, i, count_);
  }
  const unsigned char* p = map_ + kShardHeaderBytes + i * token_bytes_;
  if (token_bytes_ == 2) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
  }
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

void ShardReader::copy(int64_t begin, int64_t count, int32_t* out) const {
  if (begin < 0 || count < 0 || begin > count_ - count) {
    throw_input("{}: token range [{}, {}) is outside [0, {})", path_, begin, begin + count, count_);
  }
  if (count == 0) return;  // `out` may then be null (an empty vector's data()): no memcpy with null
  const unsigned char* p = map_ + kShardHeaderBytes + begin * token_bytes_;
  if (token_bytes_ == 2) {
    const auto* src = reinterpret_cast<const uint16_t*>(p);  // the body starts 1024-aligned
    for (int64_t i = 0; i < count; ++i) out[i] = src[i];
  } else {
    std::memcpy(out, p, static_cast<size_t>(count) * 4);
  }
}

void ShardReader::check_vocab(int vocab_size) const {
  constexpr int64_t kChunk = 1 << 16;
  std::vector<int32_t> buf(static_cast<size_t>(std::min<int64_t>(std::max<int64_t>(count_, 1), kChunk)));
  for (int64_t b = 0; b < count_; b += kChunk) {
    const int64_t n = std::min(kChunk, count_ - b);
    copy(b, n, buf.data());
    for (int64_t i = 0; i < n; ++i) {
      if (buf[i] < 0 || buf[i] >= vocab_size) {
        throw_input("{}: token {} is {}, outside the vocabulary [0, {})", path_, b + i, buf[i],
                    vocab_size);
      }
    }
  }
}

}  // namespace weft
