// `weft export --checkpoint DIR --out HF_DIR [--dtype bf16|fp16|fp32] [--overwrite]`: a checkpoint's
// weights as a Hugging Face folder in the chosen dtype (docs/formats-checkpoint.md): the fp32
// master weights rounded to nearest even into model.safetensors, config.json with torch_dtype
// saying which, no optimizer state. The folder is also a weft checkpoint (eval, generate and
// init_from read 16-bit tensors, widened exactly).
#include <fmt/format.h>

#include <filesystem>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "cli_util.h"
#include "commands.h"
#include "core/error.h"
#include "model/params.h"

namespace fs = std::filesystem;

namespace weft {

int cmd_export(CLI::App& app, int argc, char** argv, Communicator& world) {
  std::string ckpt, out, dtype = "bf16";
  bool overwrite = false;
  app.description("A checkpoint's weights as a Hugging Face folder in bf16, fp16 or fp32");
  add_checkpoint_option(app, ckpt);
  app.add_option("--out", out, "the folder to write")->required();
  app.add_option("--dtype", dtype, "element type of model.safetensors: bf16 (default), fp16 or fp32")
      ->check(CLI::IsMember({"bf16", "fp16", "fp32"}));
  app.add_flag("--overwrite", overwrite, "replace an existing --out folder");
  app.parse(argc - 1, argv + 1);
  if (world.size() > 1) {
    throw_input("weft export reads one checkpoint: run it as one process, not under mpirun ({} ranks)", world.size());
  }
  const std::string dir = checkpoint_dir_arg(ckpt);
  std::error_code ec;
  if (fs::exists(out, ec)) {
    if (fs::equivalent(out, dir, ec)) throw_input("--out {} is the checkpoint being exported", out);
    if (!overwrite) throw_input("--out {} exists: pass --overwrite to replace it", out);
  }
  const ModelConfig mc = load_checkpoint_config(dir);
  const ParamLayout layout = param_layout(mc);
  std::vector<float> params(static_cast<size_t>(layout.total()));
  load_checkpoint_params(dir, layout, params.data());
  check_finite_params(layout, params.data(), dir);
  CheckpointData data;
  data.model = &mc;
  data.layout = &layout;
  data.params = params.data();
  data.model_dtype = dtype == "bf16" ? StDType::kBF16 : dtype == "fp16" ? StDType::kF16 : StDType::kF32;
  data.trainer = {{"exported_from", fs::absolute(dir).lexically_normal().string()}, {"dtype", dtype}};
  save_checkpoint(out, data);
  const auto bytes = fs::file_size(fs::path(out) / kCheckpointModelFile);
  fmt::print("wrote {}: {} tensors of model '{}' in {} ({} bytes of model.safetensors) from {}\n", out,
             layout.tensors().size(), mc.name, dtype, bytes, dir);
  return 0;
}

}  // namespace weft
