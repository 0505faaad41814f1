// The engine's layout-free state: initialisation, and the whole model's parameters and AdamW
// moments (the tp = 1 layout of every layer, what checkpoints hold) scattered to and gathered
// from the chunks, tensor-parallel parts and ZeRO shards of every rank.
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/buffer.h"
#include "core/error.h"
#include "engine/engine_chunk.h"

namespace weft {

void Engine::to_local(const Chunk& ch, const float* whole, float* local) const {
  if (cfg_.layout.tp == 1 && cfg_.layout.pp == 1) {
    std::memcpy(local, whole, static_cast<size_t>(ch.n()) * sizeof(float));
  } else {
    extract_tp_part(ch.model->layout(), *whole_, whole, local);
  }
}

void Engine::to_whole(const Chunk& ch, const float* local, float* whole) {
  const int64_t nc = ch.n();
  const int tp = cfg_.layout.tp;
  if (tp == 1) {
    if (cfg_.layout.pp == 1) {
      std::memcpy(whole, local, static_cast<size_t>(nc) * sizeof(float));
    } else {
      insert_tp_part(ch.model->layout(), *whole_, local, whole);
    }
    return;
  }
  Buffer<float> parts(static_cast<size_t>(nc * tp));
  comm(Axis::kTp).all_gather(local, parts.data(), nc, CommDType::kF32);
  for (int r = 0; r < tp; ++r) {
    insert_tp_part(param_layout(cfg_.model, tp, r, ch.spec), *whole_, parts.data() + r * nc, whole);
  }
}

// The whole model from every chunk of every stage: each contributes its tensors (the tied
// embedding from chunk 0 only) and the pipeline group sums them. `local(ch, buf)` fills a
// chunk's part.
void Engine::to_whole_model(const std::function<void(Chunk&, float*)>& local, float* whole) {
  if (cfg_.layout.pp == 1) {
    Buffer<float> part(static_cast<size_t>(chunks_[0]->n()));
    local(*chunks_[0], part.data());
    to_whole(*chunks_[0], part.data(), whole);
    return;
  }
  const int64_t n_full = whole_->total();
  std::fill(whole, whole + n_full, 0.0f);
  // Last chunk first: a later chunk's copy of the tied embedding is cleared before chunk 0
  // (if here) writes the one that counts.
  for (int c = num_chunks() - 1; c >= 0; --c) {
    Chunk& ch = *chunks_[static_cast<size_t>(c)];
    Buffer<float> part(static_cast<size_t>(ch.n()));
    local(ch, part.data());
    to_whole(ch, part.data(), whole);
    if (ch.global != 0) {  // its copy of the front group (the head's tied tensors)
      const auto [b, e] = whole_->group_range(0);
      std::fill(whole + b, whole + e, 0.0f);
    }
  }
  comm(Axis::kPp).all_reduce_sum(whole, n_full);
}

// A chunk's parameters from fp32 values (this rank's part, whole): with 16-bit storage the
// optimizer keeps the fp32 values of its range as master weights, the model the rounded ones
// (the store's 16-bit working parameters).
void Engine::load_params(Chunk& ch, const float* fp32) {
  if (ch.optim) ch.optim->use_master_weights(cfg_.precision, fp32 + ch.optim->begin(), /*from_host=*/true);
  ch.store->load_full_params(fp32);
}

void Engine::init_params(uint64_t seed) {
  for (auto& chp : chunks_) {
    Chunk& ch = *chp;
    if (cfg_.layout.zero == 3) {
      // This rank's shard only: computed on the host, uploaded into the store's shard.
      const int64_t n = ch.store->shard_end() - ch.store->shard_begin();
      std::vector<float> shard(static_cast<size_t>(n));
      init_params_range(ch.model->layout(), seed, ch.store->shard_begin(), ch.store->shard_end(), shard.data());
      if (ch.optim) ch.optim->use_master_weights(cfg_.precision, shard.data(), /*from_host=*/true);
      ch.store->load_shard_params(shard.data());  // rounded to the working parameters' dtype
    } else {
      Buffer<float> full(static_cast<size_t>(ch.n()));
      weft::init_params(ch.model->layout(), seed, full.data());
      load_params(ch, full.data());
    }
  }
}

void Engine::load_state(const float* params, const float* exp_avg, const float* exp_avg_sq) {
  for (auto& chp : chunks_) {
    Chunk& ch = *chp;
    Buffer<float> local(static_cast<size_t>(ch.n()));
    to_local(ch, params, local.data());
    load_params(ch, local.data());
    if (!exp_avg || !ch.optim) continue;
    Buffer<float> local_sq(static_cast<size_t>(ch.n()));  // (this rank's shard of the moments)
    to_local(ch, exp_avg, local.data());
    to_local(ch, exp_avg_sq, local_sq.data());
    ch.optim->load_moments(local.data() + ch.optim->begin(), local_sq.data() + ch.optim->begin());
  }
}

void Engine::gather_state(float* params, float* exp_avg, float* exp_avg_sq) {
  WEFT_CHECK(cfg_.training, "Engine::gather_state on an inference-only engine");
  // The fp32 master weights when the model computes with 16-bit copies.
  to_whole_model(
      [](Chunk& ch, float* out) {
        if (ch.optim->uses_master()) {  // every rank alike: the gather is collective
          ch.store->gather_opt_range(ch.optim->master(), out);
        } else {
          ch.store->gather_full_params(out);
        }
      },
      params);
  to_whole_model([](Chunk& ch, float* out) { ch.store->gather_opt_range(ch.optim->exp_avg(), out); }, exp_avg);
  to_whole_model([](Chunk& ch, float* out) { ch.store->gather_opt_range(ch.optim->exp_avg_sq(), out); }, exp_avg_sq);
}

}  // namespace weft
