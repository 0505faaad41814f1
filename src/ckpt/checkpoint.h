// Checkpoints: one folder per checkpoint, readable by Hugging Face transformers as it is
// (GPT2LMHeadModel.from_pretrained(dir)). See docs/formats-checkpoint.md.
//
//   <dir>/model.safetensors      every parameter under its Hugging Face GPT-2 name, F32 (BF16 or
//                                F16 for `weft export --dtype`),
//                                hf_shape (wte keeps only the V real rows); metadata {"format": "pt"}
//   <dir>/config.json            Hugging Face GPT2Config keys plus a "weft" object
//   <dir>/optimizer.safetensors  (optional) AdamW moments "exp_avg.<name>", "exp_avg_sq.<name>"
//   <dir>/trainer.json           the caller's training state (opaque here)
//   <dir>/feedback.safetensors   (optional) error-feedback residuals: per-rank state of one
//                                layout, named and described by the caller (train/feedback_state.h)
//   <dir>/manifest.json          size and XXH3 checksum of every file and tensor (ckpt/manifest.h)
//
// Saving is atomic: the folder is written as <dir>.tmp-<host>-<pid>, then swapped into place,
// so a crash at any moment leaves the previous complete checkpoint or the new one (recovery
// rule in resolve_checkpoint_dir). One process saves a given <dir> at a time. Loading verifies
// each file it reads against the manifest (InputError naming the file and tensor).
#pragma once
#include <nlohmann/json.hpp>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/safetensors.h"
#include "model/config.h"
#include "params/param_layout.h"

namespace weft {

inline constexpr const char* kCheckpointModelFile = "model.safetensors";
inline constexpr const char* kCheckpointConfigFile = "config.json";
inline constexpr const char* kCheckpointOptimizerFile = "optimizer.safetensors";
inline constexpr const char* kCheckpointTrainerFile = "trainer.json";
inline constexpr const char* kCheckpointFeedbackFile = "feedback.safetensors";

struct CheckpointData {
  const ModelConfig* model = nullptr;  // written as config.json
  const ParamLayout* layout = nullptr;
  const float* params = nullptr;      // layout->total() floats (the flat parameter buffer)
  const float* exp_avg = nullptr;     // AdamW first moments, same layout; both null: no optimizer file
  const float* exp_avg_sq = nullptr;  // AdamW second moments, same layout
  nlohmann::json trainer;             // written as trainer.json (null is written as {})
  // Written as feedback.safetensors with feedback_meta as its metadata when not empty.
  std::vector<TensorRef> feedback;
  std::map<std::string, std::string> feedback_meta;
  // The element type of model.safetensors: F32 (checkpoints: the fp32 master weights), or BF16 /
  // F16 (`weft export`: params rounded to nearest even; config.json's torch_dtype says which).
  StDType model_dtype = StDType::kF32;
};

// Writes the checkpoint folder `dir` atomically (see above). Creates missing parent folders.
// Before writing, cleans up after an interrupted earlier save of the same `dir` (restores
// <dir>.old-* when <dir> is missing, removes stale <dir>.tmp-* / <dir>.old-*), touching only
// leftovers of this process or of dead processes on this host (ckpt_io::writer_gone).
// Throws RuntimeError on I/O failure (the previous checkpoint, if any, stays in place).
void save_checkpoint(const std::string& dir, const CheckpointData& data);

// The folder to read a checkpoint from: `dir` itself when it exists; when it does not, the
// <dir>.old-<host>-<pid> folder that a save interrupted between its two renames left (the previous
// complete checkpoint; the newest if several). <dir>.tmp-* folders are never used: they may
// be incomplete. Throws InputError if neither exists. Read-only: changes nothing on disk.
std::string resolve_checkpoint_dir(const std::string& dir);

// The config.json object for a model (Hugging Face GPT2Config keys plus "weft").
nlohmann::json checkpoint_config_json(const ModelConfig& cfg);
// Parses such an object (or a plain Hugging Face GPT-2 config.json); `source` names the file
// in errors. Throws InputError naming the key for a missing or invalid key.
ModelConfig model_config_from_json(const nlohmann::json& j, const std::string& source);

// Verifies every file of the checkpoint `dir` against its manifest (ckpt/manifest.h):
// InputError naming the file (and the tensor) on a mismatch. A folder without a manifest that
// does not claim one (Hugging Face, older weft) passes unverified.
void verify_checkpoint(const std::string& dir);
// What `weft train --resume` checks before it changes anything: the checkpoint's format version
// is one this weft reads, it has an optimizer state, and every file the resume loads (config.json,
// the model, the optimizer, the trainer state, and the feedback residuals when present) is listed
// in the manifest and matches it (each hashed once). InputError naming the file otherwise. A
// checkpoint without a manifest: as verify_manifest (an older weft's loads unverified).
void verify_resume_checkpoint(const std::string& dir);

// Whether a loader checks its file against the manifest. kAlreadyVerified: the caller ran
// verify_checkpoint on this folder just before (so each byte is hashed once).
enum class CheckpointVerify { kVerify, kAlreadyVerified };

// Reads <dir>/config.json (verified). Throws InputError if it is missing, not JSON, or lacks a key.
ModelConfig load_checkpoint_config(const std::string& dir);

// Fills `params` (layout.total() floats) from <dir>/model.safetensors. Checks every tensor
// before writing anything: a missing tensor, a shape other than hf_shape, a non-float dtype or
// a tensor the model does not have is an InputError naming the file, the tensor and both shapes.
// Accepts F16/BF16/F64 data and the family's foreign files as its ParamTable::foreign describes
// them (GPT-2's Hugging Face files: names with or without "transformer.", the ".attn.bias" /
// ".attn.masked_bias" buffers ignored, an "lm_head.weight" equal to the token embedding).
// Elements beyond a tensor's checkpoint shape (wte's padded vocabulary rows) are set to 0.
void load_checkpoint_params(const std::string& dir, const ParamLayout& layout, float* params,
                            CheckpointVerify verify = CheckpointVerify::kVerify);
// RuntimeError naming the tensor and element of `layout` whose value in `params` (as loaded from
// checkpoint `dir`) is not finite: a diverged run's weights are refused before use.
void check_finite_params(const ParamLayout& layout, const float* params, const std::string& dir);

// Fills the AdamW moments from <dir>/optimizer.safetensors; returns false (and writes nothing)
// when the checkpoint has no optimizer file. Same checks as load_checkpoint_params.
bool load_checkpoint_optimizer(const std::string& dir, const ParamLayout& layout, float* exp_avg,
                               float* exp_avg_sq, CheckpointVerify verify = CheckpointVerify::kVerify);

// Opens <dir>/feedback.safetensors (verified against the manifest unless kAlreadyVerified);
// null when the checkpoint has none.
std::unique_ptr<SafetensorsFile> open_checkpoint_feedback(const std::string& dir,
                                                          CheckpointVerify verify = CheckpointVerify::kVerify);

// Reads <dir>/trainer.json (verified). Throws InputError if it is missing or not JSON.
nlohmann::json load_checkpoint_trainer(const std::string& dir);

}  // namespace weft
