#include "ckpt/manifest.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>

#include "ckpt/checksum.h"
#include "ckpt/fs_util.h"
#include "core/error.h"
#include "core/log.h"

namespace weft {

namespace fs = std::filesystem;

namespace {

constexpr const char* kManifestFormat = "weft-checkpoint-manifest";
constexpr int kManifestVersion = 1;

// One file's record, read back from the manifest.
struct FileRecord {
  uint64_t size = 0;
  uint64_t checksum = 0;      // whole file; for safetensors the header region only
  uint64_t header_bytes = 0;  // safetensors: 8 + N; 0 for other files
  std::map<std::string, uint64_t> tensors;
  bool safetensors = false;
};

struct Manifest {
  std::string path;
  std::map<std::string, FileRecord> files;
};

[[noreturn]] void corrupt_manifest(const std::string& path, const std::string& what) {
  throw_input("{}: {}: the manifest is corrupted (re-save the checkpoint, or resume another one)", path, what);
}

uint64_t manifest_u64(const std::string& path, const nlohmann::json& rec, const std::string& file, const char* key) {
  if (!rec.contains(key)) corrupt_manifest(path, fmt::format("key 'files.{}.{}' is missing", file, key));
  const auto& v = rec.at(key);
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return static_cast<uint64_t>(v.get<int64_t>());
  corrupt_manifest(path, fmt::format("key 'files.{}.{}' is {}, expected a non-negative integer", file, key, v.dump()));
}

uint64_t manifest_checksum(const std::string& path, const nlohmann::json& v, const std::string& where) {
  uint64_t h = 0;
  if (!v.is_string() || !ckpt_io::parse_checksum(v.get<std::string>(), &h)) {
    corrupt_manifest(path, fmt::format("key '{}' is {}, expected a checksum \"0x\" + 16 hex digits", where, v.dump()));
  }
  return h;
}

FileRecord parse_record(const std::string& path, const std::string& file, const nlohmann::json& rec) {
  if (!rec.is_object()) corrupt_manifest(path, fmt::format("key 'files.{}' is not an object", file));
  FileRecord r;
  r.size = manifest_u64(path, rec, file, "size");
  r.safetensors = rec.contains("tensors");
  const char* hash_key = r.safetensors ? "header_xxh3" : "xxh3";
  if (!rec.contains(hash_key)) corrupt_manifest(path, fmt::format("key 'files.{}.{}' is missing", file, hash_key));
  r.checksum = manifest_checksum(path, rec.at(hash_key), "files." + file + "." + hash_key);
  if (!r.safetensors) return r;
  r.header_bytes = manifest_u64(path, rec, file, "header_bytes");
  if (r.header_bytes < 8 || r.header_bytes > r.size) {
    corrupt_manifest(path, fmt::format("files.{}.header_bytes {} is outside 8..size {}", file, r.header_bytes, r.size));
  }
  const auto& t = rec.at("tensors");
  if (!t.is_object()) corrupt_manifest(path, fmt::format("key 'files.{}.tensors' is not an object", file));
  for (const auto& [name, v] : t.items()) r.tensors[name] = manifest_checksum(path, v, "files." + file + ".tensors." + name);
  return r;
}

// Reads and checks <dir>/manifest.json: its own checksum (of the "files" object) first, so a
// damaged manifest is named as such rather than blamed on the files it lists.
Manifest read_manifest(const std::string& dir) {
  Manifest m;
  m.path = (fs::path(dir) / kCheckpointManifestFile).string();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(ckpt_io::read_text_file(m.path, "the checkpoint manifest"));
  } catch (const nlohmann::json::exception& e) {
    corrupt_manifest(m.path, fmt::format("not valid JSON ({})", e.what()));
  }
  if (!j.is_object() || j.value("format", "") != kManifestFormat) {
    corrupt_manifest(m.path, fmt::format("\"format\" is not \"{}\"", kManifestFormat));
  }
  if (j.value("version", -1) != kManifestVersion || j.value("hash", "") != ckpt_io::kChecksumName) {
    corrupt_manifest(m.path, fmt::format("version {} / hash {}: this weft reads version {} with {}",
                                         j.contains("version") ? j["version"].dump() : "missing",
                                         j.contains("hash") ? j["hash"].dump() : "missing", kManifestVersion,
                                         ckpt_io::kChecksumName));
  }
  if (!j.contains("files") || !j["files"].is_object() || !j.contains("files_xxh3")) {
    corrupt_manifest(m.path, "the keys 'files' and 'files_xxh3' are required");
  }
  const std::string canonical = j["files"].dump();
  const uint64_t want = manifest_checksum(m.path, j["files_xxh3"], "files_xxh3");
  const uint64_t got = ckpt_io::checksum(canonical.data(), canonical.size());
  if (got != want) {
    corrupt_manifest(m.path, fmt::format("its 'files' object has checksum {} != files_xxh3 {}",
                                         ckpt_io::format_checksum(got), ckpt_io::format_checksum(want)));
  }
  for (const auto& [file, rec] : j["files"].items()) m.files[file] = parse_record(m.path, file, rec);
  return m;
}

// The first `n` bytes of `path` (n is at most the file size, checked by the caller).
std::string read_prefix(const std::string& path, uint64_t n) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_input("{}: cannot open: {}", path, std::strerror(errno));
  std::string out(n, '\0');
  uint64_t got = 0;
  while (got < n) {
    const ssize_t r = ::pread(fd, out.data() + got, n - got, static_cast<off_t>(got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      const int err = errno;
      ::close(fd);
      throw_runtime("{}: read failed at byte {}: {}", path, got, r == 0 ? "unexpected end of file" : std::strerror(err));
    }
    got += static_cast<uint64_t>(r);
  }
  ::close(fd);
  return out;
}

void check_size(const std::string& path, const FileRecord& r) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    throw_input("{}: missing, but the checkpoint's manifest lists it ({} bytes): the checkpoint is incomplete", path,
                r.size);
  }
  const uint64_t size = fs::file_size(path, ec);
  if (ec) throw_runtime("{}: cannot read its size: {}", path, ec.message());
  if (size != r.size) {
    throw_input("{}: size {} bytes != manifest {} bytes: the file is truncated or corrupted", path, size, r.size);
  }
}

void check_tensors(const SafetensorsFile& f, const FileRecord& r) {
  const std::vector<std::string> names = f.names();
  for (const auto& [name, h] : r.tensors) {
    if (!f.has(name)) throw_input("{}: tensor {} is listed in the manifest but not in the file: the file is corrupted", f.path(), name);
  }
  if (names.size() != r.tensors.size()) {
    throw_input("{}: {} tensors, the manifest lists {}: the file is corrupted", f.path(), names.size(), r.tensors.size());
  }
  // Tensors hash independently: spread them over the threads, report the first bad one in file order.
  std::vector<uint64_t> got(names.size());
  const int64_t n = static_cast<int64_t>(names.size());
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < n; ++i) {
    got[i] = ckpt_io::checksum(f.data(names[i]), f.info(names[i]).nbytes());
  }
  for (size_t i = 0; i < names.size(); ++i) {
    const uint64_t want = r.tensors.at(names[i]);
    if (got[i] != want) {
      throw_input("{}: tensor {} checksum {} != manifest {}: the file is corrupted", f.path(), names[i],
                  ckpt_io::format_checksum(got[i]), ckpt_io::format_checksum(want));
    }
  }
}

void verify_file(const std::string& dir, const std::string& name, const FileRecord& r) {
  const std::string path = (fs::path(dir) / name).string();
  check_size(path, r);
  const std::string head = read_prefix(path, r.safetensors ? r.header_bytes : r.size);
  const uint64_t h = ckpt_io::checksum(head.data(), head.size());
  if (h != r.checksum) {
    throw_input("{}: {}checksum {} != manifest {}: the file is corrupted", path, r.safetensors ? "header " : "",
                ckpt_io::format_checksum(h), ckpt_io::format_checksum(r.checksum));
  }
  if (r.safetensors) check_tensors(SafetensorsFile(path), r);
}

// No manifest: an error for a checkpoint whose config.json says it was written with one.
ManifestCheck no_manifest(const std::string& dir) {
  const std::string cfg_path = (fs::path(dir) / "config.json").string();
  nlohmann::json cfg;
  try {
    cfg = nlohmann::json::parse(ckpt_io::read_text_file(cfg_path, "the model config"));
  } catch (const std::exception&) {
    return ManifestCheck::kNoManifest;  // the config loader reports a missing or broken config.json
  }
  const nlohmann::json* w = cfg.is_object() && cfg.contains("weft") ? &cfg["weft"] : nullptr;
  if (w != nullptr && w->is_object() && w->contains("format_version")) {
    const auto& v = (*w)["format_version"];
    if (!v.is_number_integer() || v.get<int64_t>() >= kCheckpointFormatVersion) {
      throw_input("{}/{}: missing, but config.json says weft checkpoint format_version {}, which always has one: the "
                  "checkpoint is incomplete or corrupted", dir, kCheckpointManifestFile, v.dump());
    }
  }
  if (w != nullptr) log_warn("checkpoint {}: written by an older weft without a manifest; loaded unverified", dir);
  return ManifestCheck::kNoManifest;
}

}  // namespace

void ManifestWriter::add_file(const std::string& name, const std::string& contents) {
  files_[name] = {{"size", contents.size()},
                  {"xxh3", ckpt_io::format_checksum(ckpt_io::checksum(contents.data(), contents.size()))}};
}

void ManifestWriter::add_safetensors(const std::string& name, const SafetensorsDigest& d) {
  nlohmann::json tensors = nlohmann::json::object();
  for (const auto& [t, h] : d.tensor_checksums) tensors[t] = ckpt_io::format_checksum(h);
  files_[name] = {{"size", d.file_size}, {"header_bytes", d.header_bytes},
                  {"header_xxh3", ckpt_io::format_checksum(d.header_checksum)}, {"tensors", std::move(tensors)}};
}

void ManifestWriter::write(const std::string& dir) const {
  const std::string canonical = files_.dump();
  nlohmann::ordered_json j;
  j["format"] = kManifestFormat;
  j["version"] = kManifestVersion;
  j["hash"] = ckpt_io::kChecksumName;
  j["files_xxh3"] = ckpt_io::format_checksum(ckpt_io::checksum(canonical.data(), canonical.size()));
  j["files"] = nlohmann::ordered_json::parse(canonical);
  ckpt_io::write_file_synced((fs::path(dir) / kCheckpointManifestFile).string(), j.dump(1) + "\n");
}

ManifestCheck verify_manifest(const std::string& dir, const std::vector<std::string>& names) {
  std::error_code ec;
  if (!fs::exists(fs::path(dir) / kCheckpointManifestFile, ec)) return no_manifest(dir);
  Manifest m;
  try {
    m = read_manifest(dir);
  } catch (const nlohmann::json::exception& e) {  // a key of the wrong JSON type
    corrupt_manifest((fs::path(dir) / kCheckpointManifestFile).string(), e.what());
  }
  if (names.empty()) {
    for (const auto& [name, rec] : m.files) verify_file(dir, name, rec);
    return ManifestCheck::kVerified;
  }
  for (const std::string& name : names) {
    auto it = m.files.find(name);
    if (it == m.files.end()) {
      throw_input("{}/{}: present but not listed in the checkpoint's manifest {}: the checkpoint is corrupted", dir,
                  name, m.path);
    }
    verify_file(dir, name, it->second);
  }
  return ManifestCheck::kVerified;
}

}  // namespace weft
