// Token shards in llm.c's format (karpathy/llm.c dev/data/data_common.py):
//
//   header: 256 little-endian int32 (1024 bytes): [0] magic, [1] version, [2] token count N,
//           [3..251] zero, [252..255] weft's record (below) or zero
//   body:   N tokens, uint16 (magic 20240520, version 1: GPT-2 and any vocabulary <= 65536)
//                  or uint32 (magic 20240801, version 7: larger vocabularies)
//
// weft's record: [252] marker 0x54464557 ("WEFT" as bytes), [253] record version 1, [254] the
// largest token id in the body (-1 for an empty shard), [255] FNV-1a of header ints 0, 1, 2,
// 252, 253, 254. llm.c reads only ints 0..2, so recorded shards stay llm.c shards; the record
// lets a reader check every id against the vocabulary in O(1) at open instead of scanning.
//
// A shard is written atomically (to a .tmp file, then renamed) and read through a read-only
// memory map. See docs/formats-data.md.
#pragma once
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace weft {

constexpr int32_t kShardMagicU16 = 20240520;
constexpr int32_t kShardVersionU16 = 1;
constexpr int32_t kShardMagicU32 = 20240801;
constexpr int32_t kShardVersionU32 = 7;
constexpr int64_t kShardHeaderInts = 256;
constexpr int64_t kShardHeaderBytes = kShardHeaderInts * 4;  // 1024
constexpr int kShardRecordSlot = 252;                  // first header int of weft's record
constexpr int32_t kShardRecordMarker = 0x54464557;      // bytes "WEFT"
constexpr int32_t kShardRecordVersion = 1;

// The check value of a record: FNV-1a (32 bit) over header ints 0, 1, 2 and 252..254.
int32_t shard_record_check(const int32_t* header);

// Bytes per token that write_shard uses for a vocabulary: 2 if vocab_size <= 65536, else 4.
int shard_token_bytes(int vocab_size);

// Writes `tokens` to `path` (uint16 or uint32 by vocab_size) via path + ".tmp" and a rename,
// with weft's record of the largest id in the header. Throws InputError for a token outside [0, vocab_size) (naming its index and value) or more
// than INT32_MAX tokens; RuntimeError when the file cannot be written.
void write_shard(const std::string& path, const std::vector<int32_t>& tokens, int vocab_size);
void write_shard(const std::string& path, const int32_t* tokens, int64_t count, int vocab_size);

// A read-only memory map of one shard, validated on open. Movable, not copyable; all const
// methods are thread-safe.
class ShardReader {
 public:
  // Maps and validates `path`. Throws InputError naming the path and the numbers when the file
  // is missing, shorter than the header, has an unknown magic or version (or a version that
  // does not belong to its magic), a negative count, a size that disagrees with the count, or
  // a weft record that does not check out. With vocab_size > 0 every id must lie in
  // [0, vocab_size): checked at open from the record (O(1)) or, without one, by scanning the
  // body; and checked again on every read (token, copy), so that a body corrupted after its
  // record was written cannot reach the model unnoticed. Errors name the path, the token
  // index and its value (unsigned).
  explicit ShardReader(const std::string& path, int vocab_size = 0);
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
  // Whether the header holds weft's record; the largest id it records (or the scan found);
  // -1 for an empty shard or when not known yet (no record, not scanned).
  bool has_record() const { return recorded_; }
  int64_t max_id() const { return max_id_; }
  int vocab_size() const { return vocab_; }  // 0: ids are not checked against a vocabulary

  // Token i; throws InputError when i is outside [0, size()) or the id is not valid (above).
  int32_t token(int64_t i) const;
  // Copies tokens [begin, begin + count) to out as int32. Throws InputError for a range
  // outside [0, size()) or an id that is not valid: outside [0, vocab_size()) when it is set,
  // above INT32_MAX (uint32 shards) always.
  void copy(int64_t begin, int64_t count, int32_t* out) const;
  // Checks every token id against [0, vocab_size): from the record when there is one, else by
  // scanning. Throws InputError naming the path, the first bad position and its value.
  void check_vocab(int vocab_size);
  // The largest id in the body, by reading all of it (no record used).
  int64_t scan_max_id() const;
  // XXH3-64 of the whole file (header and body), as `weft prepare` records it in meta.json.
  uint64_t checksum() const;
  size_t file_bytes() const { return map_bytes_; }

 private:
  void release() noexcept;
  void read_record(const int32_t* header);
  // The first index in [begin, begin + count) whose id is >= limit; -1 if none.
  int64_t first_at_or_above(int64_t begin, int64_t count, uint64_t limit) const;
  uint32_t raw(int64_t i) const;  // token i as stored
  [[noreturn]] void throw_bad_id(int64_t index, uint64_t limit) const;

  std::string path_;
  const unsigned char* map_ = nullptr;  // whole file
  size_t map_bytes_ = 0;
  int64_t count_ = 0;
  int token_bytes_ = 2;
  int32_t magic_ = 0;
  int32_t version_ = 0;
  bool recorded_ = false;
  int64_t max_id_ = -1;
  int vocab_ = 0;
};

// "0x" and 16 lower-case hex digits.
std::string format_shard_checksum(uint64_t h);

// meta.json's record of the shards `weft prepare` wrote in a folder: {"<file>": {"bytes": N,
// "xxh3": "0x..."}} under "shards".
nlohmann::json shard_records(const std::vector<std::string>& paths);

// Checks an opened shard against the record `weft prepare` wrote for it in meta.json beside it
// (`meta`: that file's parsed contents, null when there is none; a meta.json without "shards",
// from an older weft, or a shard it does not list, is not checked): its size and XXH3 must be
// the recorded ones. InputError naming the shard, both checksums and meta.json otherwise: its
// tokens changed after it was written (the ids are still checked against the vocabulary on every
// read; this catches a change that stays inside it).
void check_shard_record(const ShardReader& s, const nlohmann::json& meta, const std::string& meta_path);

}  // namespace weft
