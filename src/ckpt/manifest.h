// The checkpoint manifest: <dir>/manifest.json records the size and XXH3-64 checksum of every
// file of a checkpoint folder, and for a safetensors file the checksum of its header region
// and of each tensor's bytes, so that a flipped bit is reported with the file and the tensor
// it hit. Written last into the temporary folder, so it is swapped in atomically with the
// files it describes. See docs/formats-checkpoint.md ("Manifest and verification").
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ckpt/safetensors.h"

namespace weft {

inline constexpr const char* kCheckpointManifestFile = "manifest.json";
// config.json's "weft" object carries "format_version". Version 2 and later always have a
// manifest (a missing one is an error); weft checkpoints without a version predate manifests
// and, like Hugging Face folders (no "weft" object), load unverified.
inline constexpr int kCheckpointFormatVersion = 2;

// Collects the records of the files written into a checkpoint folder.
class ManifestWriter {
 public:
  void add_file(const std::string& name, const std::string& contents);
  void add_safetensors(const std::string& name, const SafetensorsDigest& d);
  // Writes <dir>/manifest.json (fsynced). Throws RuntimeError on I/O failure.
  void write(const std::string& dir) const;

 private:
  nlohmann::json files_ = nlohmann::json::object();
};

enum class ManifestCheck { kVerified, kNoManifest };

// Verifies the files `names` of the (resolved) checkpoint folder `dir` against its manifest;
// empty `names`: every file the manifest lists. Throws InputError naming the file (and the
// tensor) for a size or checksum mismatch, a listed file that is missing, a requested file the
// manifest does not list, or a manifest that is not valid (it has its own checksum). Without
// a manifest: an InputError if config.json says format_version >= 2 (the manifest was lost),
// else kNoManifest (a Hugging Face folder or an older weft checkpoint: nothing to verify).
ManifestCheck verify_manifest(const std::string& dir, const std::vector<std::string>& names = {});

}  // namespace weft
