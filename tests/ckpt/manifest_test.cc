// The checkpoint manifest: every byte of a checkpoint is checked on load, and a flipped bit, a
// truncated file, a lost or damaged manifest is an InputError naming the file (and tensor).
#include "ckpt/manifest.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/checksum.h"
#include "ckpt/safetensors.h"
#include "ckpt_test_util.h"
#include "core/error.h"
#include "model/gpt/gpt_config.h"
#include "model/params.h"

namespace weft {
namespace {

namespace fs = std::filesystem;
using testing_ckpt::make_unverified;
using testing_ckpt::read_bytes;
using testing_ckpt::TempDir;
using testing_ckpt::write_bytes;

using testing_ckpt::input_error_message;

// A saved micro checkpoint (V=100, 2 layers, C=32) with optimizer state.
struct Saved {
  const ModelConfig layout_cfg = make_model_config("micro", 2, 2, 32, 16, 100, 0);
  ParamLayout layout = param_layout(layout_cfg);
  std::vector<float> params, m, v;
  std::string dir;
  explicit Saved(const std::string& d) : dir(d) {
    const size_t n = static_cast<size_t>(layout.total());
    params.resize(n);
    m.resize(n);
    v.resize(n);
    for (size_t i = 0; i < n; ++i) params[i] = 0.001f * static_cast<float>(i % 977), m[i] = -params[i], v[i] = 2 * params[i];
    save_checkpoint(dir, {&layout_cfg, &layout, params.data(), m.data(), v.data(), {{"step", 4}}});
  }
};

// Flips one bit of the byte at `offset` of `path`.
void flip_byte(const std::string& path, uint64_t offset) {
  std::string b = read_bytes(path);
  ASSERT_LT(offset, b.size());
  b[offset] = static_cast<char>(b[offset] ^ 0x10);
  write_bytes(path, b);
}

// The absolute file offset of a tensor's first byte.
uint64_t tensor_offset(const std::string& path, const std::string& name) {
  SafetensorsFile f(path);
  uint64_t header = 0;
  std::memcpy(&header, read_bytes(path).data(), 8);
  return 8 + header + f.info(name).begin;
}

TEST(Manifest, SavedCheckpointVerifiesAndListsEveryFileAndTensor) {
  TempDir tmp;
  Saved s(tmp / "ck");
  verify_checkpoint(s.dir);
  const auto j = nlohmann::json::parse(read_bytes(s.dir + "/manifest.json"));
  EXPECT_EQ(j["format"], "weft-checkpoint-manifest");
  EXPECT_EQ(j["hash"], "xxh3-64");
  for (const char* f : {"model.safetensors", "optimizer.safetensors", "config.json", "trainer.json"}) {
    ASSERT_TRUE(j["files"].contains(f)) << f;
    EXPECT_EQ(j["files"][f]["size"].get<uint64_t>(), fs::file_size(s.dir + "/" + f)) << f;
  }
  EXPECT_EQ(j["files"]["model.safetensors"]["tensors"].size(), s.layout.tensors().size());
  EXPECT_EQ(j["files"]["optimizer.safetensors"]["tensors"].size(), 2 * s.layout.tensors().size());
  // The recorded checksum of a small file is XXH3-64 of its bytes, computed independently here.
  const std::string cfg = read_bytes(s.dir + "/config.json");
  EXPECT_EQ(j["files"]["config.json"]["xxh3"], ckpt_io::format_checksum(ckpt_io::checksum(cfg.data(), cfg.size())));
  // And a tensor's checksum is that of its bytes in the caller's buffer.
  const ParamTensor& ln = s.layout.tensors().back();
  EXPECT_EQ(j["files"]["model.safetensors"]["tensors"][ln.name],
            ckpt_io::format_checksum(ckpt_io::checksum(s.params.data() + ln.offset, ln.numel * sizeof(float))));
}

TEST(Manifest, FlippedBitInTensorNamesFileAndTensor) {
  TempDir tmp;
  Saved s(tmp / "ck");
  const std::string file = s.dir + "/model.safetensors";
  const std::string tensor = "transformer.h.1.attn.c_attn.weight";
  flip_byte(file, tensor_offset(file, tensor) + 123);
  std::vector<float> out(s.params.size());
  const std::string msg = input_error_message([&] { load_checkpoint_params(s.dir, s.layout, out.data()); });
  EXPECT_NE(msg.find(file + ": tensor " + tensor + " checksum 0x"), std::string::npos) << msg;
  EXPECT_NE(msg.find("!= manifest 0x"), std::string::npos) << msg;
  EXPECT_NE(msg.find("the file is corrupted"), std::string::npos) << msg;
  EXPECT_EQ(input_error_message([&] { verify_checkpoint(s.dir); }), msg);
  // The optimizer file is verified too.
  const std::string opt = s.dir + "/optimizer.safetensors";
  flip_byte(opt, tensor_offset(opt, "exp_avg_sq.transformer.ln_f.bias"));
  const std::string m2 = input_error_message([&] { load_checkpoint_optimizer(s.dir, s.layout, out.data(), out.data()); });
  EXPECT_NE(m2.find(opt + ": tensor exp_avg_sq.transformer.ln_f.bias checksum"), std::string::npos) << m2;
}

TEST(Manifest, FlippedBitInHeaderOrJsonFile) {
  TempDir tmp;
  Saved s(tmp / "ck");
  flip_byte(s.dir + "/model.safetensors", 20);
  std::vector<float> out(s.params.size());
  const std::string msg = input_error_message([&] { load_checkpoint_params(s.dir, s.layout, out.data()); });
  EXPECT_NE(msg.find(s.dir + "/model.safetensors: header checksum 0x"), std::string::npos) << msg;
  // trainer.json: "step": 4 -> "step": 5 (same size, other checksum)
  std::string t = read_bytes(s.dir + "/trainer.json");
  t[t.find('4')] = '5';
  write_bytes(s.dir + "/trainer.json", t);
  const std::string m2 = input_error_message([&] { load_checkpoint_trainer(s.dir); });
  EXPECT_NE(m2.find(s.dir + "/trainer.json: checksum 0x"), std::string::npos) << m2;
}

TEST(Manifest, TruncatedOrMissingFileIsASizeError) {
  TempDir tmp;
  Saved s(tmp / "ck");
  const std::string file = s.dir + "/model.safetensors";
  const uint64_t size = fs::file_size(file);
  const std::string whole = read_bytes(file);
  fs::resize_file(file, size - 100);
  std::vector<float> out(s.params.size());
  EXPECT_EQ(input_error_message([&] { load_checkpoint_params(s.dir, s.layout, out.data()); }),
            fmt::format("{}: size {} bytes != manifest {} bytes: the file is truncated or corrupted", file, size - 100,
                        size));
  write_bytes(file, whole);
  fs::remove(s.dir + "/optimizer.safetensors");
  const std::string msg = input_error_message([&] { verify_checkpoint(s.dir); });
  EXPECT_NE(msg.find("optimizer.safetensors: missing, but the checkpoint's manifest lists it"), std::string::npos)
      << msg;
}

TEST(Manifest, CorruptedManifestIsNamedAsSuch) {
  TempDir tmp;
  Saved s(tmp / "ck");
  const std::string path = s.dir + "/manifest.json";
  const std::string good = read_bytes(path);
  // A digit of a recorded size changed: the manifest's own checksum catches it.
  std::string bad = good;
  const size_t at = bad.find("\"size\": ") + 8;
  bad[at] = bad[at] == '9' ? '8' : static_cast<char>(bad[at] + 1);
  write_bytes(path, bad);
  std::string msg = input_error_message([&] { verify_checkpoint(s.dir); });
  EXPECT_NE(msg.find(path + ": its 'files' object has checksum 0x"), std::string::npos) << msg;
  EXPECT_NE(msg.find("the manifest is corrupted"), std::string::npos) << msg;
  write_bytes(path, good.substr(0, good.size() / 2));
  msg = input_error_message([&] { verify_checkpoint(s.dir); });
  EXPECT_NE(msg.find(path + ": not valid JSON"), std::string::npos) << msg;
  write_bytes(path, "{\"format\": \"weft-checkpoint-manifest\", \"version\": \"one\"}");
  msg = input_error_message([&] { verify_checkpoint(s.dir); });
  EXPECT_NE(msg.find(path + ":"), std::string::npos) << msg;
  EXPECT_NE(msg.find("the manifest is corrupted"), std::string::npos) << msg;
  // Lost: config.json says format_version 2, which always has a manifest.
  fs::remove(path);
  msg = input_error_message([&] { verify_checkpoint(s.dir); });
  EXPECT_EQ(msg, s.dir + "/manifest.json: missing, but config.json says weft checkpoint format_version 2, which "
                         "always has one: the checkpoint is incomplete or corrupted");
}

TEST(Manifest, FoldersWithoutManifestLoadUnverified) {
  TempDir tmp;
  Saved s(tmp / "ck");
  make_unverified(s.dir);  // an older weft checkpoint
  flip_byte(s.dir + "/model.safetensors", tensor_offset(s.dir + "/model.safetensors", "transformer.ln_f.bias") + 1);
  std::vector<float> out(s.params.size());
  load_checkpoint_params(s.dir, s.layout, out.data());  // nothing to verify against: loads
  verify_checkpoint(s.dir);
  // A Hugging Face folder: config.json without the "weft" object.
  auto cfg = nlohmann::json::parse(read_bytes(s.dir + "/config.json"));
  cfg.erase("weft");
  write_bytes(s.dir + "/config.json", cfg.dump());
  EXPECT_EQ(load_checkpoint_config(s.dir).n_layer, 2);
  load_checkpoint_params(s.dir, s.layout, out.data());
}

TEST(Manifest, ChecksumTextRoundTrips) {
  uint64_t h = 0;
  EXPECT_TRUE(ckpt_io::parse_checksum("0x00000000deadbeef", &h));
  EXPECT_EQ(h, 0xdeadbeefu);
  EXPECT_EQ(ckpt_io::format_checksum(0xdeadbeefu), "0x00000000deadbeef");
  for (const char* bad : {"0xdeadbeef", "0X00000000deadbeef", "0x00000000DEADBEEF", "0x00000000deadbeeg", ""}) {
    EXPECT_FALSE(ckpt_io::parse_checksum(bad, &h)) << bad;
  }
}

}  // namespace
}  // namespace weft
