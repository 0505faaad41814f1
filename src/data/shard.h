// Token shards in llm.c's format (karpathy/llm.c dev/data/data_common.py):
//
//   header: 256 little-endian int32 (1024 bytes): [0] magic, [1] version, [2] token count N,
//           [3..255] zero
//   body:   N tokens, uint16 (magic 20240520, version 1: GPT-2 and any vocabulary <= 65536)
//                  or uint32 (magic 20240801, version 7: larger vocabularies)
//
// A shard is written atomically (to a .tmp file, then renamed) and read through a read-only
// memory map. See docs/formats-data.md.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace weft {

constexpr int32_t kShardMagicU16 = 20240520;
constexpr int32_t kShardVersionU16 = 1;
constexpr int32_t kShardMagicU32 = 20240801;
constexpr int32_t kShardVersionU32 = 7;
constexpr int64_t kShardHeaderInts = 256;
constexpr int64_t kShardHeaderBytes = kShardHeaderInts * 4;  // 1024

// Bytes per token that write_shard uses for a vocabulary: 2 if vocab_size <= 65536, else 4.
int shard_token_bytes(int vocab_size);

// Writes `tokens` to `path` (uint16 or uint32 by vocab_size) via path + ".tmp" and a rename.
// Throws InputError for a token outside [0, vocab_size) (naming its index and value) or more
// than INT32_MAX tokens; RuntimeError when the file cannot be written.
void write_shard(const std::string& path, const std::vector<int32_t>& tokens, int vocab_size);
void write_shard(const std::string& path, const int32_t* tokens, int64_t count, int vocab_size);

// A read-only memory map of one shard, validated on open. Movable, not copyable; all const
// methods are thread-safe.
class ShardReader {
 public:
  // Maps and validates `path`. Throws InputError naming the path and the numbers when the file
  // is missing, shorter than the header, has an unknown magic or version (or a version that
  // does not belong to its magic), a negative count, or a size that disagrees with the count.
  explicit ShardReader(const std::string& path);
  ShardReader(ShardReader&& o) noexcept;
  ShardReader& operator=(ShardReader&& o) noexcept;
  ShardReader(const ShardReader&) = delete;
  ShardReader& operator=(const ShardReader&) = delete;
  ~ShardReader();

  const std::string& path() const { return path_; }
  int64_t size() const { return count_; }               // number of tokens N
  int token_bytes() const { return token_bytes_; }      // 2 or 4
  int32_t magic() const { return magic_; }
  int32_t version() const { return version_; }

  // Token i; throws InputError when i is outside [0, size()).
  int32_t token(int64_t i) const;
  // Copies tokens [begin, begin + count) to out as int32. Throws InputError for a range
  // outside [0, size()).
  void copy(int64_t begin, int64_t count, int32_t* out) const;
  // Checks every token id against [0, vocab_size); throws InputError naming the path, the
  // first bad position and its value.
  void check_vocab(int vocab_size) const;

 private:
  void release() noexcept;

  std::string path_;
  const unsigned char* map_ = nullptr;  // whole file
  size_t map_bytes_ = 0;
  int64_t count_ = 0;
  int token_bytes_ = 2;
  int32_t magic_ = 0;
  int32_t version_ = 0;
};

}  // namespace weft
