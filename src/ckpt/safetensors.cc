#include "ckpt/safetensors.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "ckpt/checksum.h"
#include "ckpt/fs_util.h"
#include "core/durable_file.h"
#include "core/error.h"

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; weft reads it in place");

namespace weft {

namespace {

struct DTypeEntry {
  StDType dtype;
  const char* name;
  size_t size;
};
constexpr DTypeEntry kDTypes[] = {
    {StDType::kBool, "BOOL", 1},      {StDType::kU8, "U8", 1},     {StDType::kI8, "I8", 1},
    {StDType::kF8E5M2, "F8_E5M2", 1}, {StDType::kF8E4M3, "F8_E4M3", 1},
    {StDType::kI16, "I16", 2},        {StDType::kU16, "U16", 2},   {StDType::kF16, "F16", 2},
    {StDType::kBF16, "BF16", 2},      {StDType::kI32, "I32", 4},   {StDType::kU32, "U32", 4},
    {StDType::kF32, "F32", 4},        {StDType::kF64, "F64", 8},   {StDType::kI64, "I64", 8},
    {StDType::kU64, "U64", 8},
};

const DTypeEntry& dtype_entry(StDType d) {
  for (const auto& e : kDTypes) {
    if (e.dtype == d) return e;
  }
  throw RuntimeError(fmt::format("internal error: unknown StDType {}", static_cast<int>(d)));
}

std::string known_dtype_names() {
  std::vector<std::string> names;
  for (const auto& e : kDTypes) names.emplace_back(e.name);
  return fmt::format("{}", fmt::join(names, ", "));
}

// A JSON value shortened for an error message.
std::string short_dump(const nlohmann::json& j) {
  std::string s = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

// Reads a non-negative JSON integer; false if `j` is anything else (negative, float, string).
bool json_to_u64(const nlohmann::json& j, uint64_t* out) {
  if (j.is_number_unsigned()) {
    *out = j.get<uint64_t>();
    return true;
  }
  if (j.is_number_integer()) {  // signed: only accept non-negative values
    const int64_t v = j.get<int64_t>();
    if (v < 0) return false;
    *out = static_cast<uint64_t>(v);
    return true;
  }
  return false;
}

}  // namespace

size_t dtype_size(StDType d) { return dtype_entry(d).size; }
const char* dtype_name(StDType d) { return dtype_entry(d).name; }

bool parse_dtype(const std::string& s, StDType* out) {
  for (const auto& e : kDTypes) {
    if (s == e.name) {
      *out = e.dtype;
      return true;
    }
  }
  return false;
}

std::string format_shape(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// ---------------------------------------------------------------------------------------
// Writer

SafetensorsDigest write_safetensors(const std::string& path, const std::vector<TensorRef>& tensors,
                                    const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header["__metadata__"] = std::move(meta);
  }
  std::set<std::string> seen;
  std::vector<uint64_t> nbytes(tensors.size());
  uint64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorRef& t = tensors[i];
    WEFT_CHECK(!t.name.empty() && t.name != "__metadata__", "{}: invalid tensor name '{}'", path, t.name);
    WEFT_CHECK(seen.insert(t.name).second, "{}: tensor name '{}' given twice", path, t.name);
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      WEFT_CHECK(d >= 0, "{}: tensor '{}' has a negative dimension in {}", path, t.name, format_shape(t.shape));
      WEFT_CHECK(!__builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel), "{}: tensor '{}' shape {} overflows",
                 path, t.name, format_shape(t.shape));
    }
    WEFT_CHECK(!__builtin_mul_overflow(numel, dtype_size(t.dtype), &nbytes[i]), "{}: tensor '{}' size overflows", path,
               t.name);
    WEFT_CHECK(nbytes[i] == 0 || t.data != nullptr, "{}: tensor '{}' has no data", path, t.name);
    nlohmann::ordered_json e;
    e["dtype"] = dtype_name(t.dtype);
    e["shape"] = t.shape;
    e["data_offsets"] = {offset, offset + nbytes[i]};
    header[t.name] = std::move(e);
    offset += nbytes[i];
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {  // e.g. a name that is not valid UTF-8
    throw_runtime("{}: cannot encode the header: {}", path, e.what());
  }
  // Pad with spaces so that the data buffer starts at a multiple of 8 bytes.
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t header_len = text.size();

  SafetensorsDigest digest;
  digest.file_size = 8 + header_len + offset;
  const std::string tmp = path + ".tmp";
  const int fd = open_for_writing(tmp, O_WRONLY | O_CREAT | O_TRUNC);  // never through a link or into a FIFO
  try {
    std::string head(8, '\0');
    std::memcpy(head.data(), &header_len, 8);  // little-endian host (static_assert above)
    head += text;
    ckpt_io::write_all(fd, head.data(), head.size(), tmp);
    digest.header_bytes = head.size();
    digest.header_checksum = ckpt_io::checksum(head.data(), head.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (nbytes[i] > 0) ckpt_io::write_all(fd, tensors[i].data, nbytes[i], tmp);
      digest.tensor_checksums.emplace_back(tensors[i].name, ckpt_io::checksum(nbytes[i] > 0 ? tensors[i].data : "", nbytes[i]));
    }
    if (::fsync(fd) != 0) throw_runtime("{}: fsync failed: {}", tmp, std::strerror(errno));
    if (::close(fd) != 0) {
      const int err = errno;
      ::unlink(tmp.c_str());
      throw_runtime("{}: close failed: {}", tmp, std::strerror(err));
    }
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw_runtime("cannot rename {} to {}: {}", tmp, path, std::strerror(err));
  }
  ckpt_io::fsync_path(ckpt_io::parent_dir(path));
  return digest;
}

// ---------------------------------------------------------------------------------------
// Reader

namespace {

// A whole file mapped read-only.
struct Mapping {
  void* data;
  uint64_t size;
};

// Opens `path`, checks that it is a regular file of at least 8 bytes and maps it read-only.
Mapping map_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_input("{}: cannot open safetensors file: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw_runtime("{}: stat failed: {}", path, std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw_input("{}: not a regular file", path);
  }
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < 8) {
    ::close(fd);
    throw_input("{}: file has {} bytes, too short for a safetensors file (8-byte header length first)", path,
                file_size);
  }
  void* m = ::mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  ::close(fd);
  if (m == MAP_FAILED) throw_runtime("{}: mmap of {} bytes failed: {}", path, file_size, std::strerror(map_err));
  return {m, file_size};
}

// The header length N (the first 8 bytes), checked against the limit and the file size.
uint64_t header_length(const std::string& path, const unsigned char* bytes, uint64_t file_size) {
  uint64_t n = 0;
  std::memcpy(&n, bytes, 8);
  if (n > SafetensorsFile::kMaxHeaderBytes) {
    throw_input("{}: header length {} bytes is above the limit of {} bytes (file size {}; not a safetensors file?)",
                path, n, SafetensorsFile::kMaxHeaderBytes, file_size);
  }
  if (n > file_size - 8) {
    throw_input("{}: header length {} bytes is more than the {} bytes that follow it (file size {}; truncated file?)",
                path, n, file_size - 8, file_size);
  }
  return n;
}

// The N bytes of header after the length, parsed: a JSON object.
nlohmann::json parse_header(const std::string& path, const unsigned char* bytes, uint64_t n) {
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes + 8, bytes + 8 + n);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number like 1e999
    throw_input("{}: header ({} bytes) is not valid JSON: {}", path, n, e.what());
  }
  if (!header.is_object()) {
    throw_input("{}: header is a JSON {}, a safetensors header is an object", path, header.type_name());
  }
  return header;
}

// The __metadata__ entry: null, or an object of strings (added to `out`).
void read_metadata(const std::string& path, const nlohmann::json& entry, std::map<std::string, std::string>& out) {
  if (entry.is_null()) return;
  if (!entry.is_object()) {
    throw_input("{}: __metadata__ is a JSON {}, expected an object of strings", path, entry.type_name());
  }
  for (const auto& [k, v] : entry.items()) {
    if (!v.is_string()) {
      throw_input("{}: __metadata__ value of '{}' is {}, expected a string", path, k, short_dump(v));
    }
    out[k] = v.get<std::string>();
  }
}

void check_entry_keys(const std::string& path, const std::string& name, const nlohmann::json& entry) {
  if (!entry.is_object()) {
    throw_input("{}: tensor '{}' entry is {}, expected an object with dtype, shape and data_offsets", path, name,
                short_dump(entry));
  }
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!entry.contains(key)) throw_input("{}: tensor '{}' lacks the key '{}'", path, name, key);
  }
}

StDType parse_entry_dtype(const std::string& path, const std::string& name, const nlohmann::json& jd) {
  if (!jd.is_string()) throw_input("{}: tensor '{}' has dtype {}, expected a string", path, name, short_dump(jd));
  StDType dtype = StDType::kF32;
  if (!parse_dtype(jd.get<std::string>(), &dtype)) {
    throw_input("{}: tensor '{}' has unknown dtype '{}' (known: {})", path, name, jd.get<std::string>(),
                known_dtype_names());
  }
  return dtype;
}

// Fills t.shape and t.numel from `js` (t.name and t.dtype set); returns the bytes they need.
uint64_t parse_entry_shape(const std::string& path, const nlohmann::json& js, SafetensorsTensorInfo& t) {
  const std::string& name = t.name;
  if (!js.is_array()) throw_input("{}: tensor '{}' has shape {}, expected an array", path, name, short_dump(js));
  uint64_t numel = 1;
  for (const auto& d : js) {
    uint64_t v = 0;
    if (!json_to_u64(d, &v) || v > static_cast<uint64_t>(INT64_MAX)) {
      throw_input("{}: tensor '{}' has shape {}, expected non-negative integers", path, name, short_dump(js));
    }
    t.shape.push_back(static_cast<int64_t>(v));
    if (__builtin_mul_overflow(numel, v, &numel)) {
      throw_input("{}: tensor '{}' shape {} has too many elements", path, name, format_shape(t.shape));
    }
  }
  uint64_t need = 0;
  if (numel > static_cast<uint64_t>(INT64_MAX) || __builtin_mul_overflow(numel, dtype_size(t.dtype), &need)) {
    throw_input("{}: tensor '{}' shape {} has too many elements", path, name, format_shape(t.shape));
  }
  t.numel = static_cast<int64_t>(numel);
  return need;
}

// Fills t.begin and t.end from `jo`: inside the data buffer and spanning exactly `need` bytes.
void parse_entry_offsets(const std::string& path, const nlohmann::json& jo, uint64_t need, uint64_t buffer_size,
                         SafetensorsTensorInfo& t) {
  const std::string& name = t.name;
  if (!jo.is_array() || jo.size() != 2 || !json_to_u64(jo[0], &t.begin) || !json_to_u64(jo[1], &t.end)) {
    throw_input("{}: tensor '{}' has data_offsets {}, expected [begin, end] with non-negative integers", path,
                name, short_dump(jo));
  }
  if (t.begin > t.end) {
    throw_input("{}: tensor '{}' has data_offsets [{}, {}]: begin is after end", path, name, t.begin, t.end);
  }
  if (t.end > buffer_size) {
    throw_input("{}: tensor '{}' has data_offsets [{}, {}] beyond the data buffer of {} bytes (truncated file?)",
                path, name, t.begin, t.end, buffer_size);
  }
  if (t.end - t.begin != need) {
    throw_input("{}: tensor '{}' ({} {}) needs {} bytes but its data_offsets [{}, {}] span {} bytes", path, name,
                dtype_name(t.dtype), format_shape(t.shape), need, t.begin, t.end, t.end - t.begin);
  }
}

// One tensor's header entry, validated against a data buffer of `buffer_size` bytes.
SafetensorsTensorInfo parse_tensor_entry(const std::string& path, const std::string& name,
                                         const nlohmann::json& entry, uint64_t buffer_size) {
  check_entry_keys(path, name, entry);
  SafetensorsTensorInfo t;
  t.name = name;
  t.dtype = parse_entry_dtype(path, name, entry.at("dtype"));
  const uint64_t need = parse_entry_shape(path, entry.at("shape"), t);
  parse_entry_offsets(path, entry.at("data_offsets"), need, buffer_size, t);
  return t;
}

// The tensors must tile the buffer: sorted by offset, each starts where the previous ends.
// Sorts `tensors` so.
void check_tiling(const std::string& path, std::vector<SafetensorsTensorInfo>& tensors, uint64_t buffer_size) {
  std::sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    if (t.begin < covered) {
      const auto& p = tensors[i - 1];
      throw_input("{}: tensors '{}' (data_offsets [{}, {}]) and '{}' (data_offsets [{}, {}]) overlap", path, p.name,
                  p.begin, p.end, t.name, t.begin, t.end);
    }
    if (t.begin > covered) {
      throw_input("{}: bytes [{}, {}) of the data buffer belong to no tensor (gap before '{}')", path, covered,
                  t.begin, t.name);
    }
    covered = t.end;
  }
  if (covered != buffer_size) {
    throw_input("{}: the tensors cover {} bytes but the data buffer has {} bytes (trailing bytes [{}, {}))", path,
                covered, buffer_size, covered, buffer_size);
  }
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  const Mapping m = map_file(path);
  map_ = m.data;
  map_size_ = m.size;
  try {
    const auto* bytes = static_cast<const unsigned char*>(map_);
    const uint64_t n = header_length(path, bytes, m.size);
    const uint64_t buffer_size = m.size - 8 - n;
    buffer_ = bytes + 8 + n;
    const nlohmann::json header = parse_header(path, bytes, n);
    for (const auto& [name, entry] : header.items()) {
      if (name == "__metadata__") {
        read_metadata(path, entry, metadata_);
      } else {
        tensors_.push_back(parse_tensor_entry(path, name, entry, buffer_size));
      }
    }
    check_tiling(path, tensors_, buffer_size);
    for (size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
  } catch (...) {
    unmap();
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() { unmap(); }

SafetensorsFile::SafetensorsFile(SafetensorsFile&& o) noexcept
    : path_(std::move(o.path_)),
      map_(std::exchange(o.map_, nullptr)),
      map_size_(std::exchange(o.map_size_, 0)),
      buffer_(std::exchange(o.buffer_, nullptr)),
      tensors_(std::move(o.tensors_)),
      index_(std::move(o.index_)),
      metadata_(std::move(o.metadata_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& o) noexcept {
  if (this != &o) {
    unmap();
    path_ = std::move(o.path_);
    map_ = std::exchange(o.map_, nullptr);
    map_size_ = std::exchange(o.map_size_, 0);
    buffer_ = std::exchange(o.buffer_, nullptr);
    tensors_ = std::move(o.tensors_);
    index_ = std::move(o.index_);
    metadata_ = std::move(o.metadata_);
  }
  return *this;
}

void SafetensorsFile::unmap() noexcept {
  if (map_ != nullptr) ::munmap(map_, map_size_);
  map_ = nullptr;
  map_size_ = 0;
  buffer_ = nullptr;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& t : tensors_) out.push_back(t.name);
  return out;
}

const SafetensorsTensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) {
    throw_input("{}: tensor '{}' is missing (the file has {} tensors)", path_, name, tensors_.size());
  }
  return tensors_[it->second];
}

const void* SafetensorsFile::data(const std::string& name) const { return buffer_ + info(name).begin; }

void SafetensorsFile::read_f32(const std::string& name, const std::vector<int64_t>& expected_shape,
                               float* out) const {
  const SafetensorsTensorInfo& t = info(name);
  if (t.shape != expected_shape) {
    throw_input("{}: {} has shape {}, the model expects {}", path_, name, format_shape(t.shape),
                format_shape(expected_shape));
  }
  if (t.dtype != StDType::kF32 && t.dtype != StDType::kF64 && t.dtype != StDType::kF16 && t.dtype != StDType::kBF16) {
    throw_input("{}: {} has dtype {}, expected a floating-point dtype (F32, F64, F16 or BF16)", path_, name,
                dtype_name(t.dtype));
  }
  const int64_t n = t.numel;
  if (n == 0) return;
  const unsigned char* src = buffer_ + t.begin;
  const StDType dt = t.dtype;
  const size_t es = dtype_size(dt);
  // Chunks of 1M elements: reading a large mapped tensor is page-fault bound, so spread it.
  constexpr int64_t kChunk = int64_t{1} << 20;
  const int64_t nchunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (nchunks > 1)
  for (int64_t c = 0; c < nchunks; ++c) {
    const int64_t lo = c * kChunk;
    const int64_t hi = std::min(n, lo + kChunk);
    const unsigned char* s = src + static_cast<size_t>(lo) * es;
    float* o = out + lo;
    switch (dt) {
      case StDType::kF32:
        std::memcpy(o, s, static_cast<size_t>(hi - lo) * sizeof(float));
        break;
      case StDType::kF64:
        for (int64_t i = 0; i < hi - lo; ++i) {
          double v;
          std::memcpy(&v, s + i * 8, 8);
          o[i] = static_cast<float>(v);
        }
        break;
      case StDType::kF16:
        for (int64_t i = 0; i < hi - lo; ++i) {
          uint16_t v;
          std::memcpy(&v, s + i * 2, 2);
          o[i] = f16_to_f32(v);
        }
        break;
      case StDType::kBF16:
        for (int64_t i = 0; i < hi - lo; ++i) {
          uint16_t v;
          std::memcpy(&v, s + i * 2, 2);
          o[i] = bf16_to_f32(v);
        }
        break;
      default:
        break;  // rejected above
    }
  }
}

}  // namespace weft
