// `weft generate`: samples text from a checkpoint and prints it as the tokens arrive.
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <cstdio>
#include <string>
#include <vector>

#include "cli_util.h"
#include "commands.h"
#include "core/error.h"
#include "data/tokenizer.h"
#include "plan/system.h"
#include "train/sample.h"
#include "ckpt/checkpoint.h"
#include "train/trainer.h"

namespace weft {

namespace {

// Whether `s` ends in the first bytes of a UTF-8 character whose other bytes are still to come.
bool ends_in_partial_character(const std::string& s) {
  size_t cut = s.size();
  int back = 0;
  while (cut > 0 && back < 4 && (static_cast<unsigned char>(s[cut - 1]) & 0xC0) == 0x80) --cut, ++back;
  if (cut > 0 && (static_cast<unsigned char>(s[cut - 1]) & 0x80)) {
    unsigned char lead = static_cast<unsigned char>(s[cut - 1]);
    int need = lead >= 0xF0 ? 3 : lead >= 0xE0 ? 2 : lead >= 0xC0 ? 1 : 0;
    return need > back;
  }
  return false;
}

// Prints tokens as they arrive; holds back the bytes of an unfinished UTF-8 character.
class TokenPrinter {
 public:
  explicit TokenPrinter(const Tokenizer& tok) : tok_(tok) {}
  void add(int32_t t) {
    pending_.push_back(t);
    std::string s = tok_.decode(pending_);
    if (ends_in_partial_character(s)) return;  // incomplete character: wait for more tokens
    fmt::print("{}", s);
    std::fflush(stdout);
    pending_.clear();
  }
  // Prints what is held back and ends the line.
  void finish() {
    if (!pending_.empty()) fmt::print("{}", tok_.decode(pending_));
    fmt::print("\n");
  }

 private:
  const Tokenizer& tok_;
  std::vector<int32_t> pending_;
};

}  // namespace

// Runs in any layout (mpirun -np tp*pp*dp weft generate --tp .. --pp ..); rank 0 prints.
int cmd_generate(CLI::App& app, int argc, char** argv, Communicator& world) {
  RunConfig layout = layout_defaults();
  std::string ckpt, prompt, tokenizer, backend = "cpu", comm;
  int64_t tokens = 128, top_k = 40, seed = 1337, threads = 0;
  double temperature = 1.0;
  add_checkpoint_option(app, ckpt);
  app.add_option("--prompt", prompt, "text to continue (default: start of a document)");
  app.add_option("--tokens", tokens, "tokens to generate");
  app.add_option("--temperature", temperature, "sampling temperature (> 0)");
  app.add_option("--top-k", top_k, "sample among the k most likely tokens (0: all)");
  app.add_option("--seed", seed, "sampling seed");
  add_threads_option(app, threads);
  add_backend_option(app, backend);
  add_comm_option(app, comm);
  app.add_option("--tokenizer", tokenizer, "a tokenizer.json, or a folder with GPT-2's tokenizer files or a tokenizer.json (default: GPT-2's vendored files)");
  add_layout_options(app, layout);
  std::string fp32_kernel;
  app.add_option("--fp32-kernel", fp32_kernel,
                 "the cpu backends' fp32 products, openblas or onednn (default: the system file's, as weft train; else "
                 "openblas)");
  app.parse(argc - 1, argv + 1);
  if (tokens < 0) throw_input("--tokens must be >= 0, got {}", tokens);
  if (!(temperature > 0)) throw_input("--temperature must be positive, got {}", temperature);
  if (!std::isfinite(temperature)) throw_input("--temperature must be finite, got {}", temperature);
  if (top_k < 0 || top_k > std::numeric_limits<int>::max()) throw_input("--top-k must lie in [0, {}], got {}", std::numeric_limits<int>::max(), top_k);
  if (seed < 0) throw_input("--seed must be >= 0, got {}", seed);
  check_threads_option(threads);
  check_layout_options(layout);
  set_threads(threads);
  const std::string dir = checkpoint_dir_arg(ckpt);
  EngineRequest req;
  req.model = load_checkpoint_config(dir);
  if (const ModelCapabilities& caps = req.model.capabilities(); !caps.generation) {
    throw_input("{} holds the {} model '{}', which does not sample text: {}", dir, caps.family, req.model.name,
                caps.generation_note);
  }
  Tokenizer tok = Tokenizer::load(tokenizer);
  req.seq = req.model.n_ctx;
  req.batch = 1;
  req.per_replica = true;
  req.training = false;
  req.fp32_kernel = fp32_kernel.empty() ? plan::implicit_fp32_kernel() : fp32_kernel;
  EngineRun run(layout_engine_config(layout, req, world.size()), world, backend, comm);
  load_checkpoint_into(*run.engine, dir);
  const bool rank0 = world.rank() == 0;
  std::vector<int32_t> ids = {tok.eot_token()};
  tok.encode_append(prompt, ids);
  SampleOptions so;
  so.max_tokens = tokens;
  so.temperature = temperature;
  so.top_k = top_k;
  so.seed = static_cast<uint64_t>(seed);
  if (rank0) fmt::print("{}", prompt);
  std::fflush(stdout);
  TokenPrinter printer(tok);
  sample_tokens(*run.engine, ids, so, [&](int32_t t) {
    if (rank0) printer.add(t);
  });
  if (rank0) printer.finish();
  return 0;
}

}  // namespace weft
