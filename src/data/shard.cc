#include "data/shard.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <utility>

#include "core/error.h"
#include "data/text_util.h"

namespace weft {

static_assert(std::endian::native == std::endian::little,
              "shards are little-endian; a big-endian host needs byte swapping here");

int shard_token_bytes(int vocab_size) { return vocab_size <= 65536 ? 2 : 4; }

void write_shard(const std::string& path, const std::vector<int32_t>& tokens, int vocab_size) {
  write_shard(path, tokens.data(), static_cast<int64_t>(tokens.size()), vocab_size);
}

int32_t shard_record_check(const int32_t* header) {
  uint32_t h = 2166136261u;
  for (int i : {0, 1, 2, kShardRecordSlot, kShardRecordSlot + 1, kShardRecordSlot + 2}) {
    const auto v = static_cast<uint32_t>(header[i]);
    for (int b = 0; b < 4; ++b) h = (h ^ ((v >> (8 * b)) & 0xffu)) * 16777619u;
  }
  return static_cast<int32_t>(h);
}

namespace {

// Checks every id against [0, vocab_size) and returns the largest (-1 for no tokens).
int32_t checked_max_id(const std::string& path, const int32_t* tokens, int64_t count, int vocab_size) {
  int32_t most = -1;
  for (int64_t i = 0; i < count; ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab_size) {
      throw_input("{}: token {} of {} is {}, outside the vocabulary [0, {})", path, i, count,
                  tokens[i], vocab_size);
    }
    most = std::max(most, tokens[i]);
  }
  return most;
}

}  // namespace

void write_shard(const std::string& path, const int32_t* tokens, int64_t count, int vocab_size) {
  if (vocab_size <= 0) throw_input("{}: vocab_size must be positive, got {}", path, vocab_size);
  if (count < 0 || count > INT32_MAX) {
    throw_input("{}: a shard holds at most {} tokens (int32 count in the header), got {}", path,
                INT32_MAX, count);
  }
  const int32_t most = checked_max_id(path, tokens, count, vocab_size);
  const int width = shard_token_bytes(vocab_size);
  int32_t header[kShardHeaderInts] = {};
  header[0] = width == 2 ? kShardMagicU16 : kShardMagicU32;
  header[1] = width == 2 ? kShardVersionU16 : kShardVersionU32;
  header[2] = static_cast<int32_t>(count);
  header[kShardRecordSlot] = kShardRecordMarker;
  header[kShardRecordSlot + 1] = kShardRecordVersion;
  header[kShardRecordSlot + 2] = most;
  header[kShardRecordSlot + 3] = shard_record_check(header);

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

ShardReader::ShardReader(const std::string& path, int vocab_size) : path_(path) {
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
    int32_t header[kShardHeaderInts];
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
    read_record(header);
    if (vocab_size != 0) check_vocab(vocab_size);
  } catch (...) {
    release();
    throw;
  }
}

ShardReader::ShardReader(ShardReader&& o) noexcept
    : path_(std::move(o.path_)),
      map_(std::exchange(o.map_, nullptr)),
      map_bytes_(std::exchange(o.map_bytes_, 0)),
      count_(std::exchange(o.count_, 0)),
      token_bytes_(o.token_bytes_),
      magic_(o.magic_),
      version_(o.version_),
      recorded_(o.recorded_),
      max_id_(o.max_id_),
      vocab_(o.vocab_) {}

ShardReader& ShardReader::operator=(ShardReader&& o) noexcept {
  if (this != &o) {
    release();
    path_ = std::move(o.path_);
    map_ = std::exchange(o.map_, nullptr);
    map_bytes_ = std::exchange(o.map_bytes_, 0);
    count_ = std::exchange(o.count_, 0);
    token_bytes_ = o.token_bytes_;
    magic_ = o.magic_;
    version_ = o.version_;
    recorded_ = o.recorded_;
    max_id_ = o.max_id_;
    vocab_ = o.vocab_;
  }
  return *this;
}

ShardReader::~ShardReader() { release(); }

uint64_t ShardReader::checksum() const { return XXH3_64bits(map_, map_bytes_); }

std::string format_shard_checksum(uint64_t h) { return fmt::format("0x{:016x}", h); }

nlohmann::json shard_records(const std::vector<std::string>& paths) {
  nlohmann::json j = nlohmann::json::object();
  for (const std::string& p : paths) {
    const ShardReader s(p);
    j[std::filesystem::path(p).filename().string()] = {{"bytes", s.file_bytes()},
                                                       {"xxh3", format_shard_checksum(s.checksum())}};
  }
  return j;
}

void check_shard_record(const ShardReader& s, const nlohmann::json& meta, const std::string& meta_path) {
  if (!meta.is_object() || !meta.contains("shards") || !meta["shards"].is_object()) return;
  const std::string name = std::filesystem::path(s.path()).filename().string();
  const nlohmann::json& shards = meta["shards"];
  if (!shards.contains(name)) return;
  const nlohmann::json& r = shards[name];
  const std::string want = r.is_object() && r.contains("xxh3") && r["xxh3"].is_string() ? r["xxh3"].get<std::string>() : "";
  const int64_t want_bytes = r.is_object() && r.contains("bytes") && r["bytes"].is_number_integer() ? r["bytes"].get<int64_t>() : -1;
  if (want.empty() || want_bytes < 0) {
    throw_input("{}: the record of {} is not {{\"bytes\": N, \"xxh3\": \"0x...\"}}: prepare the corpus again", meta_path,
                name);
  }
  const std::string got = format_shard_checksum(s.checksum());
  if (got != want || static_cast<int64_t>(s.file_bytes()) != want_bytes) {
    throw_input("{}: {} bytes with XXH3 {}, but `weft prepare` recorded {} bytes with {} in {}: the shard changed after "
                "it was written; prepare the corpus again",
                s.path(), s.file_bytes(), got, want_bytes, want, meta_path);
  }
}

void ShardReader::release() noexcept {
  if (map_) ::munmap(const_cast<unsigned char*>(map_), map_bytes_);
  map_ = nullptr;
  map_bytes_ = 0;
}

// A header without weft's marker is a plain llm.c shard (its reader writes zeros there); one
// with the marker must check out completely, since its recorded max id replaces a scan.
void ShardReader::read_record(const int32_t* header) {
  const int32_t* rec = header + kShardRecordSlot;
  if (rec[0] != kShardRecordMarker) return;
  const char* fix = "rewrite the shard with `weft prepare`, or zero header ints 252..255 to have it scanned";
  if (rec[1] != kShardRecordVersion) {
    throw_input("{}: weft record version {} in header int 253 is unknown (this weft reads version {}); {}", path_,
                rec[1], kShardRecordVersion, fix);
  }
  const int32_t check = shard_record_check(header);
  if (rec[3] != check) {
    throw_input("{}: weft record check {} in header int 255 does not match the header ({}): the header was changed "
                "after the record was written; {}",
                path_, static_cast<uint32_t>(rec[3]), static_cast<uint32_t>(check), fix);
  }
  const int64_t most = rec[2];
  const int64_t top = token_bytes_ == 2 ? 65535 : INT32_MAX;
  if (count_ == 0 ? most != -1 : (most < 0 || most > top)) {
    throw_input("{}: weft record says the largest id is {}, impossible for {} tokens of {} bytes; {}", path_, most,
                count_, token_bytes_, fix);
  }
  recorded_ = true;
  max_id_ = most;
}

uint32_t ShardReader::raw(int64_t i) const {
  const unsigned char* p = map_ + kShardHeaderBytes + i * token_bytes_;
  if (token_bytes_ == 2) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
  }
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

int64_t ShardReader::first_at_or_above(int64_t begin, int64_t count, uint64_t limit) const {
  for (int64_t i = begin; i < begin + count; ++i) {
    if (raw(i) >= limit) return i;
  }
  return -1;
}

// Values are printed unsigned: a uint32 id above INT32_MAX would read as negative as int32.
void ShardReader::throw_bad_id(int64_t index, uint64_t limit) const {
  const uint32_t v = raw(index);
  const std::string range =
      vocab_ > 0 ? fmt::format("outside the vocabulary [0, {})", vocab_) : "above INT32_MAX, not a token id";
  const std::string corrupt =
      recorded_ && max_id_ < static_cast<int64_t>(limit)
          ? fmt::format(", but the header records {} as the largest id: the shard is corrupted (rewrite it)", max_id_)
          : std::string();
  throw_input("{}: token {} is {}, {}{}", path_, index, v, range, corrupt);
}

int32_t ShardReader::token(int64_t i) const {
  if (i < 0 || i >= count_) {
    throw_input("{}: token index {} is outside [0, {})", path_, i, count_);
  }
  const uint32_t v = raw(i);
  const uint64_t limit = vocab_ > 0 ? static_cast<uint64_t>(vocab_) : uint64_t{1} << 31;
  if (v >= limit) throw_bad_id(i, limit);
  return static_cast<int32_t>(v);
}

// The check costs one max per token in the copy loop, so a corrupted id is
// caught where it is read, whatever the header records.
void ShardReader::copy(int64_t begin, int64_t count, int32_t* out) const {
  if (begin < 0 || count < 0 || begin > count_ - count) {
    throw_input("{}: token range [{}, {}) is outside [0, {})", path_, begin, begin + count, count_);
  }
  if (count == 0) return;  // `out` may then be null (an empty vector's data()): no memcpy with null
  const unsigned char* p = map_ + kShardHeaderBytes + begin * token_bytes_;
  const uint64_t limit = vocab_ > 0 ? static_cast<uint64_t>(vocab_) : uint64_t{1} << 31;
  uint32_t most = 0;
  if (token_bytes_ == 2) {
    const auto* src = reinterpret_cast<const uint16_t*>(p);  // the body starts 1024-aligned
    for (int64_t i = 0; i < count; ++i) {
      out[i] = src[i];
      most = std::max<uint32_t>(most, src[i]);
    }
  } else {
    std::memcpy(out, p, static_cast<size_t>(count) * 4);
    const auto* src = reinterpret_cast<const uint32_t*>(p);
    for (int64_t i = 0; i < count; ++i) most = std::max(most, src[i]);
  }
  if (count > 0 && most >= limit) throw_bad_id(first_at_or_above(begin, count, limit), limit);
}

int64_t ShardReader::scan_max_id() const {
  if (count_ == 0) return -1;
  const unsigned char* body = map_ + kShardHeaderBytes;
  uint32_t most = 0;
  if (token_bytes_ == 2) {
    const auto* src = reinterpret_cast<const uint16_t*>(body);
    for (int64_t i = 0; i < count_; ++i) most = std::max<uint32_t>(most, src[i]);
  } else {
    const auto* src = reinterpret_cast<const uint32_t*>(body);
    for (int64_t i = 0; i < count_; ++i) most = std::max(most, src[i]);
  }
  return most;
}

void ShardReader::check_vocab(int vocab_size) {
  if (vocab_size <= 0) throw_input("{}: vocab_size must be positive, got {}", path_, vocab_size);
  vocab_ = vocab_size;
  if (!recorded_ && max_id_ < 0) max_id_ = scan_max_id();
  if (max_id_ < vocab_size) return;
  const int64_t bad = first_at_or_above(0, count_, static_cast<uint64_t>(vocab_size));
  if (bad < 0) {
    throw_input("{}: the header records {} as the largest id, but no token is at or above the vocabulary size {}: "
                "the shard is corrupted (rewrite it with `weft prepare`)",
                path_, max_id_, vocab_size);
  }
  throw_bad_id(bad, static_cast<uint64_t>(vocab_size));
}

}  // namespace weft
