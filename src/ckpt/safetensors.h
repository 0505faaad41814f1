// The safetensors file format (Hugging Face), read and written directly.
//
// Layout: 8 bytes little-endian u64 N, then N bytes of UTF-8 JSON (padded with spaces so that
// the byte buffer starts 8-aligned), then the byte buffer:
//   {"__metadata__": {"format": "pt"},
//    "transformer.wte.weight": {"dtype": "F32", "shape": [50257, 768], "data_offsets": [0, 154389504]},
//    ...}
// data_offsets are [begin, end) relative to the start of the buffer; the tensors tile the
// buffer exactly (no gap, no overlap, nothing after the last one). Data is row-major and
// little-endian. See docs/formats-checkpoint.md.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/precision.h"

namespace weft {

// Element types of the safetensors format, named as in its header ("F32", "BF16", ...); the
// file's tags, not core/dtype.h's DType (the element types of device buffers).
enum class StDType {
  kBool, kU8, kI8, kF8E5M2, kF8E4M3, kI16, kU16, kF16, kBF16, kI32, kU32, kF32, kF64, kI64, kU64,
};

size_t dtype_size(StDType d);       // bytes per element
const char* dtype_name(StDType d);  // "F32", "BF16", ...
bool parse_dtype(const std::string& s, StDType* out);  // false for an unknown name

// IEEE half and bfloat16 conversions: core/precision.h.

// "[50257, 768]"
std::string format_shape(const std::vector<int64_t>& shape);

// One tensor to write: `data` holds numel(shape) * dtype_size(dtype) bytes, row-major.
struct TensorRef {
  std::string name;
  StDType dtype = StDType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
};

// The checksums of a written file (ckpt/checksum.h), for the checkpoint manifest: the
// header region (the 8 length bytes and the header) and each tensor's bytes, so that every
// byte of the file is hashed exactly once (the tensors tile the data buffer).
struct SafetensorsDigest {
  uint64_t file_size = 0;
  uint64_t header_bytes = 0;  // 8 + N
  uint64_t header_checksum = 0;
  std::vector<std::pair<std::string, uint64_t>> tensor_checksums;  // in file order
};

// Writes a safetensors file. Tensors are laid out in the given order; the data is streamed
// from the caller's buffers (no copy). Atomic: writes `path.tmp`, fsyncs it, renames it to
// `path` and fsyncs the folder, so `path` is either the old file or the complete new one.
// Empty `metadata` writes no "__metadata__" entry. Throws RuntimeError on an I/O failure and
// on an invalid request (empty or duplicate name, negative dimension, null data). Returns the
// checksums of what it wrote (computed from the caller's buffers while writing).
SafetensorsDigest write_safetensors(const std::string& path, const std::vector<TensorRef>& tensors,
                       const std::map<std::string, std::string>& metadata);

struct SafetensorsTensorInfo {
  std::string name;
  StDType dtype = StDType::kF32;
  std::vector<int64_t> shape;
  int64_t numel = 0;
  uint64_t begin = 0;  // byte offsets in the data buffer, [begin, end)
  uint64_t end = 0;
  uint64_t nbytes() const { return end - begin; }
};

// A safetensors file mapped read-only. The constructor validates the whole header against
// the file size and throws InputError naming the path and the offending values: file shorter
// than 8 bytes, header length beyond the file or above 100 MB, invalid JSON, an entry missing
// a key or with an unknown dtype, a shape whose byte size differs from its offsets, offsets
// outside the buffer, overlapping, or not covering the buffer exactly.
class SafetensorsFile {
 public:
  static constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // as the reference implementation

  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  SafetensorsFile(SafetensorsFile&& o) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& o) noexcept;

  const std::string& path() const { return path_; }
  // Tensor names in the order of their data in the file.
  std::vector<std::string> names() const;
  size_t size() const { return tensors_.size(); }
  bool has(const std::string& name) const { return index_.count(name) != 0; }
  // Throws InputError naming the path and the tensor if absent.
  const SafetensorsTensorInfo& info(const std::string& name) const;
  // The tensor's bytes inside the mapping (valid while this object lives). Not necessarily
  // aligned to the element size for files written by other tools: copy with memcpy.
  const void* data(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Converts an F32/F64/F16/BF16 tensor to float into `out` (numel(expected_shape) floats).
  // Throws InputError naming the path and the tensor when it is absent, has another shape
  // ("<path>: <name> has shape [a, b], the model expects [c, d]") or another dtype.
  void read_f32(const std::string& name, const std::vector<int64_t>& expected_shape, float* out) const;

 private:
  void unmap() noexcept;

  std::string path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  const unsigned char* buffer_ = nullptr;  // start of the data buffer inside the mapping
  std::vector<SafetensorsTensorInfo> tensors_;  // sorted by begin offset
  std::unordered_map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace weft
