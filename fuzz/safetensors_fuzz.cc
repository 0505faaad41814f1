// Fuzz target: a safetensors file (ckpt/safetensors.h), read as the checkpoint loader reads
// model.safetensors. Opens the bytes as SafetensorsFile (header validation), reads every
// tensor (as float where the dtype converts), then loads the file as the model.safetensors of a
// 1-layer GPT-2 checkpoint (name mapping, shape checks, the tied head). InputError is the
// expected refusal; anything else is a finding (fuzz/fuzz_util.h).
#include <cstring>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/safetensors.h"
#include "fuzz_util.h"
#include "model/config.h"
#include "model/gpt/gpt_config.h"
#include "model/params.h"

namespace {

using namespace weft;

// Every tensor's bytes and, for the float dtypes, its values: touches the whole mapping.
void read_every_tensor(const SafetensorsFile& f) {
  for (const std::string& name : f.names()) {
    const SafetensorsTensorInfo& info = f.info(name);
    fuzz::require(info.end >= info.begin, "tensor offsets in order for " + name);
    std::vector<unsigned char> bytes(info.nbytes());
    if (!bytes.empty()) std::memcpy(bytes.data(), f.data(name), bytes.size());
    if (info.dtype == StDType::kF32 || info.dtype == StDType::kF64 || info.dtype == StDType::kF16 ||
        info.dtype == StDType::kBF16) {
      std::vector<float> out(static_cast<size_t>(info.numel));
      f.read_f32(name, info.shape, out.data());
    }
  }
  // The metadata strings are copied out of the parsed header: touch them (ASan checks).
  std::string all_metadata;
  for (const auto& [k, v] : f.metadata()) all_metadata += k + v;
}

// The smallest GPT-2 the checkpoint loader accepts: 1 layer, width 4, 8 tokens of context and
// vocabulary (fuzz/make_corpus.py writes its model.safetensors as a seed).
const ParamLayout& tiny_layout() {
  static const ParamLayout layout = param_layout(make_model_config("gpt2", 1, 1, 4, 4, 8, 0));
  return layout;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_scratch("model.safetensors", fuzz::as_view(data, size));
  fuzz::expect_weft_errors([&] {
    SafetensorsFile f(path);
    read_every_tensor(f);
  });
  fuzz::expect_weft_errors([&] {
    std::vector<float> params(static_cast<size_t>(tiny_layout().total()));
    load_checkpoint_params(fuzz::scratch_dir().string(), tiny_layout(), params.data());
  });
  return 0;
}
