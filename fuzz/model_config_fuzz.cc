// Fuzz target: a checkpoint's config.json (ckpt/checkpoint.h) as `weft generate --checkpoint`,
// `eval` and `--resume` read it: load_checkpoint_config parses the JSON and
// model_config_from_json checks every key; an accepted config then gets its parameter layout
// computed (the sizes every later allocation uses), without allocating it. InputError is the
// expected refusal; anything else is a finding (fuzz/fuzz_util.h).
#include "ckpt/checkpoint.h"
#include "fuzz_util.h"
#include "model/params.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weft;
  fuzz::write_scratch("config.json", fuzz::as_view(data, size));
  fuzz::expect_weft_errors([&] {
    const ModelConfig cfg = load_checkpoint_config(fuzz::scratch_dir().string());
    fuzz::require(cfg.n_layer > 0 && cfg.n_head > 0 && cfg.n_embd > 0 && cfg.n_ctx > 0 && cfg.vocab_size > 0 &&
                      cfg.ffn > 0 && cfg.padded_vocab >= cfg.vocab_size,
                  "an accepted model config has positive sizes");
    // The layout lists n_layer * 12 + 5 tensors: bounded so that a huge layer count is not a
    // memory finding of the fuzzer (it is refused later by the memory check, not here).
    if (cfg.n_layer <= 4096) {
      const ParamLayout layout = param_layout(cfg);
      fuzz::require(layout.total() > 0, "an accepted model has parameters");
    }
    const nlohmann::json back = checkpoint_config_json(cfg);
    const ModelConfig again = model_config_from_json(back, "round trip");
    fuzz::require(again.n_layer == cfg.n_layer && again.n_embd == cfg.n_embd && again.vocab_size == cfg.vocab_size &&
                      again.padded_vocab == cfg.padded_vocab && again.ffn == cfg.ffn,
                  "checkpoint_config_json round trip keeps the sizes");
  });
  return 0;
}
