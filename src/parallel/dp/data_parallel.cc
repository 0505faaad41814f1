#include "parallel/dp/data_parallel.h"

#include <algorithm>
#include <cmath>

#include "comm/compressed_comm.h"
#include "comm/tracer.h"
#include "core/block_quant.h"
#include "core/error.h"
#include "parallel/dp/grad_buckets.h"
#include "parallel/dp/param_slots.h"
#include "parallel/dp/qgz.h"

namespace weft {

namespace {

constexpr size_t kF = sizeof(float);

size_t fbytes(int64_t n) { return static_cast<size_t>(n) * kF; }

}  // namespace

DataParallel::DataParallel(const ParamLayout& layout, DeviceComm& dp, const DataParallelConfig& cfg,
                           Backend& backend)
    : layout_(layout), dp_(dp), backend_(backend), cfg_(cfg) {
  WEFT_CHECK(&dp.backend() == &backend, "DataParallel: the dp communicator is paired with backend {}, the store runs on {}",
             dp.backend().name(), backend.name());
  if (cfg.zero < 0 || cfg.zero > 3) throw_input("zero stage must be 0, 1, 2 or 3, got {}", cfg.zero);
  if (cfg.bucket_bytes <= 0) throw_input("bucket size must be positive, got {} bytes", cfg.bucket_bytes);
  if (cfg.dp_replicate < 1 || dp.size() % cfg.dp_replicate != 0) {
    throw_input("dp_replicate {} does not divide dp {} (dp = dp_shard x dp_replicate)", cfg.dp_replicate, dp.size());
  }
  shard_comm_ = &dp;
  if (cfg.dp_replicate > 1) {
    // Collective over dp, in this order on every rank: dp rank = shard + S * replica.
    const int S = dp.size() / cfg.dp_replicate, shard_index = dp.rank() % S, replica = dp.rank() / S;
    shard_owned_ = split_device_comm(dp, replica, shard_index, "dp-shard");
    replicate_owned_ = split_device_comm(dp, shard_index, replica, "dp-replicate");
    shard_comm_ = shard_owned_.get();
    replicate_comm_ = replicate_owned_.get();
    WEFT_CHECK(shard_comm_->size() == S && shard_comm_->rank() == shard_index &&
                   replicate_comm_->size() == cfg.dp_replicate && replicate_comm_->rank() == replica,
               "HSDP: dp rank {} of {} split into shard {} of {} and replica {} of {}", dp.rank(), dp.size(),
               shard_comm_->rank(), shard_comm_->size(), replicate_comm_->rank(), replicate_comm_->size());
  }
  n_ = layout.total();
  L_ = layout.model_layers();
  const int64_t P = shard_comm_->size(), me = shard_comm_->rank();
  shards_ = FlatShards(n_, static_cast<int>(P), static_cast<int>(me));
  shard_ = shards_.shard;
  shard_begin_ = shards_.begin();
  shard_end_ = shards_.end();
  const int G = layout.num_groups();

  WEFT_CHECK(dtype_is_float(cfg.param_dtype), "DataParallel: parameters of dtype {}", dtype_name(cfg.param_dtype));
  params_ = DeviceBuffer(backend, cfg.param_dtype, cfg.zero == 3 ? shard_end_ - shard_begin_ : n_, MemCategory::kParams);
  if (cfg.zero <= 1 && cfg.training) {
    grads_ = DeviceBuffer(backend, DType::kF32, n_, MemCategory::kGrads);
    grads_.zero();
  }
  if (cfg.zero >= 1 && cfg.training) {
    // ZeRO-1: the reduce-scatter's output (counted as communication); ZeRO-2/3: the gradients.
    shard_grads_ = DeviceBuffer(backend, DType::kF32, shard_end_ - shard_begin_,
                                cfg.zero == 1 ? MemCategory::kComm : MemCategory::kGrads);
    shard_grads_.zero();
  }

  // The groups this part of the model holds (a pipeline stage holds some), in the order
  // backward completes them: L+1, L, ..., 1, 0. They are adjacent in the flat buffer.
  const std::vector<int> owned = groups_in_backward_order(layout);
  if (cfg.zero <= 1) {
    bucket_of_group_.assign(G, -1);
    // zero 0 and 1: the embedding's gradient travels as (token, row) pairs (the GPT's tied embedding)
    split_embedding_ = dp.size() > 1 && layout.sparse_rows_tensor() != nullptr;
    // The embedding group is a bucket of its own (it is reduced early, see head_done).
    for (const GradBucket& gb : gradient_buckets(layout, cfg.bucket_bytes)) {
      for (int x : gb.groups) bucket_of_group_[x] = static_cast<int>(buckets_.size());
      buckets_.push_back(Bucket{gb, 0});
    }
  } else {
    const SlotSizes sizes = slot_sizes(layout, owned);
    grad_slots_.resize(cfg.training ? 1 + DataParallel::kGradSlots : 0);
    for (size_t s = 0; s < grad_slots_.size(); ++s) {
      const int64_t size = s == 0 ? sizes.group0 : sizes.other;
      grad_slots_[s].data = DeviceBuffer(backend, DType::kF32, size, MemCategory::kGrads);
      grad_slots_[s].recv =
          DeviceBuffer(backend, DType::kF32, std::max<int64_t>(1, std::min(size, shard_)), MemCategory::kComm);
    }
    grad_slot_of_group_.assign(G, -1);
  }
  if (cfg.zeropp.active() && cfg.zero != 3) {
    throw_input("ZeRO++ ({}) needs zero 3, got zero {}", cfg.zeropp.describe(dp_shard()), cfg.zero);
  }
  if (cfg.zero == 3) {
    gather_ = std::make_unique<Zero3Gather>(layout, *shard_comm_, backend, shards_, params_, cfg.zeropp, cfg.prefetch,
                                            param_slots(cfg.prefetch), cfg.training, owned);
  }
  if (cfg.zeropp.quantized_gradients && cfg.training) {
    std::vector<std::pair<int64_t, int64_t>> ranges;
    for (int g : owned) ranges.push_back(layout_.group_range(g));
    qgz_ = std::make_unique<QuantizedReduceScatter>(*shard_comm_, cfg.zeropp, backend_, n_, shard_, ranges);
  }
}

DeviceBuffer* DataParallel::qgz_residual() { return qgz_ ? qgz_->residual() : nullptr; }

DataParallel::QuantErrors DataParallel::take_quant_errors() {
  QuantErrors q;
  if (gather_) q.weights = gather_->take_weight_error();
  if (qgz_) q.gradient_hops = qgz_->take_rel_errors();
  return q;
}

DataParallel::~DataParallel() {
  // Outstanding requests must finish before their buffers go away.
  try {
    while (!inflight_.empty()) complete_oldest(false);
    gather_.reset();  // waits for its gathers
  } catch (...) {
  }
}

std::vector<int64_t> DataParallel::owner_counts(int64_t b, int64_t e) const { return shards_.counts(b, e); }

View DataParallel::opt_params() {
  const View p(params_.raw(), params_.dtype());
  return cfg_.zero == 3 || !p ? p : p.at(opt_begin());
}

float* DataParallel::opt_grads() { return cfg_.zero == 0 ? grads_.data<float>() : shard_grads_.data<float>(); }

void DataParallel::upload_params(const float* host, int64_t n) {
  if (n <= 0) return;
  const DType dt = params_.dtype();
  if (dt == DType::kF32) {
    backend_.copy_to_device(params_.raw(), 0, host, fbytes(n));
    return;
  }
  std::vector<uint16_t> bits(static_cast<size_t>(n));
  cast_to_16_ref(bits.data(), host, n, dt);
  backend_.copy_to_device(params_.raw(), 0, bits.data(), dtype_bytes(dt, n));
}

void DataParallel::download_f32(CView src, int64_t n, float* out) const {
  if (src.f32()) {
    backend_.copy_to_host(out, src.data, 0, fbytes(n));
    return;
  }
  std::vector<uint16_t> bits(static_cast<size_t>(n));
  backend_.copy_to_host(bits.data(), src.data, 0, dtype_bytes(src.dtype, n));
  cast_from_16_ref(out, bits.data(), n, src.dtype, false);
}

void DataParallel::load_full_params(const float* full) {
  if (cfg_.zero == 3) {
    upload_params(full + shard_begin_, params_.count());
    gather_->invalidate();
  } else {
    upload_params(full, n_);
  }
}

void DataParallel::load_shard_params(const float* shard) {
  WEFT_CHECK(cfg_.zero == 3, "load_shard_params with zero {}", cfg_.zero);
  upload_params(shard, params_.count());
  gather_->invalidate();
}

void DataParallel::gather_full_params(float* out) {
  const CView mine(params_.raw(), params_.dtype());
  if (cfg_.zero == 3) {
    gather_opt_range(mine, out);
  } else {
    download_f32(mine, n_, out);
  }
}

void DataParallel::gather_opt_range(CView mine, float* out) {
  if (cfg_.zero == 0) {
    download_f32(mine, n_, out);
    return;
  }
  DeviceBuffer all(backend_, mine.dtype, n_, MemCategory::kComm);
  shard().all_gather_v(mine.data, all.raw(), owner_counts(0, n_), comm_dtype_of(mine.dtype));
  download_f32(CView(all.raw(), mine.dtype), n_, out);
}

void DataParallel::begin_step() {
  WEFT_CHECK(inflight_.empty(), "{} reductions still in flight at the start of a step", inflight_.size());
  if (cfg_.zero <= 1) grads_.zero();
  // zero 1: the bucket reduce-scatters overwrite every element of the shard; 2/3 accumulate.
  if (cfg_.zero >= 2) shard_grads_.zero();
}

void DataParallel::begin_micro_batch(bool last) {
  last_micro_ = last;
  backward_ = false;
  embedding_posted_ = false;
  for (auto& b : buckets_) b.pending = static_cast<int>(b.groups.size());
}

// zero 0/1, the step's last micro-batch (or the end of the step for the tied embedding): the
// bucket's reduction over the dp_shard group, then (HSDP) over dp_replicate.
void DataParallel::post_bucket(Bucket& b) {
  InFlight f;
  if (cfg_.zero == 0) {
    feedback_for(b.begin);
    f.handle = grads_comm().iall_reduce(grads_.data<float>() + b.begin, b.end - b.begin, CommDType::kF32,
                                        ReduceOp::kSum);
    f.replicate = grads_.data<float>() + b.begin;
    f.replicate_count = b.end - b.begin;
  } else {
    float* recv = shard_grads_.data<float>() + shards_.offset_in_shard(b.begin);
    feedback_for(b.begin);
    const std::vector<int64_t> counts = owner_counts(b.begin, b.end);
    f.handle = grads_comm().ireduce_scatter_v(grads_.data<float>() + b.begin, recv, counts, CommDType::kF32,
                                              ReduceOp::kSum);
    f.replicate = recv;
    f.replicate_count = counts[static_cast<size_t>(shard().rank())];
  }
  inflight_.push_back(std::move(f));
}

void DataParallel::post_replicate(float* p, int64_t count) {
  // The ranks of one dp_replicate group share the shard index, so they agree on the count.
  if (replicate_comm_ == nullptr || count <= 0) return;
  InFlight r;
  r.handle = replicate_comm_->iall_reduce(p, count, CommDType::kF32, ReduceOp::kSum);
  inflight_.push_back(std::move(r));
}

void DataParallel::progress() {
  dp_.progress();
  if (shard_comm_ != &dp_) shard_comm_->progress();
  if (replicate_comm_ != nullptr) replicate_comm_->progress();
}

void DataParallel::complete_oldest(bool follow) {
  InFlight f = std::move(inflight_.front());
  inflight_.pop_front();
  const double t0 = Tracer::now();
  f.handle->wait();
  exposed_s_ += Tracer::now() - t0;
  if (f.recv && f.recv_count > 0) {  // the received part of the group's gradient, into the shard's
    float* dst = shard_grads_.data<float>() + f.shard_offset;
    backend_.add(dst, dst, f.recv, f.recv_count);
  }
  if (f.slot >= 0) grad_slots_[f.slot].busy = false;
  if (follow) post_replicate(f.replicate, f.replicate_count);
}

void DataParallel::set_traffic(DeviceComm* grads, DeviceComm* params, bool error_feedback) {
  if ((grads != nullptr || params != nullptr) && cfg_.dp_replicate > 1) {
    throw_input("[compression] with dp_replicate {}: compressed data-parallel collectives run over the whole dp group "
                "of {} ranks, not yet over dp_shard {} x dp_replicate {}; set compression.dp and compression.params "
                "to \"off\" or dp_replicate to 1",
                cfg_.dp_replicate, dp_.size(), dp_shard(), cfg_.dp_replicate);
  }
  for (DeviceComm* c : {grads, params}) {
    WEFT_CHECK(c == nullptr || (c->size() == dp_.size() && c->rank() == dp_.rank() && &c->backend() == &backend_),
               "DataParallel::set_traffic: a communicator that is not the dp group on this backend");
  }
  grad_comm_ = grads;
  param_comm_ = params;
  if (gather_) gather_->set_params_comm(params);
  grad_codec_ = nullptr;
  ef_residual_ = DeviceBuffer();
  if (!error_feedback || !cfg_.training || dp_.size() == 1) return;
  grad_codec_ = dynamic_cast<CompressedComm*>(grads);
  WEFT_CHECK(grad_codec_ != nullptr && grad_codec_->codec() != nullptr,
             "DataParallel: error feedback needs a compressing gradient communicator");
  ef_residual_ = DeviceBuffer(backend_, DType::kF32, n_, MemCategory::kGrads);
  ef_residual_.zero();
}

void DataParallel::feedback_for(int64_t b) {
  if (grad_codec_ != nullptr) grad_codec_->set_next_residual(ef_residual_.data<float>() + b);
}

void DataParallel::set_tied_embedding(DeviceComm* tied) {
  if (tied == nullptr) return;
  if (cfg_.zero > 1) throw_input("ZeRO stage {} does not combine with pipeline parallelism here; use zero 0 or 1", cfg_.zero);
  WEFT_CHECK(layout_.has_group(0), "a stage without the embedding cannot share it");
  WEFT_CHECK(buckets_[bucket_of_group_[0]].groups.size() == 1, "the embedding bucket holds other groups");
  WEFT_CHECK(&tied->backend() == &backend_, "the tied-embedding communicator is paired with backend {}, the store runs on {}",
             tied->backend().name(), backend_.name());
  tied_ = tied;
  split_embedding_ = false;
}

void DataParallel::finish_step_gradients() {
  while (!inflight_.empty()) complete_oldest();
  if (tied_ != nullptr) {
    // The tied embedding: sum the two stages' local gradients, then reduce over dp.
    Bucket& b = buckets_[bucket_of_group_[0]];
    const double t0 = Tracer::now();
    tied_->all_reduce_sum(grads_.data<float>() + b.begin, b.end - b.begin);
    b.pending = 0;
    post_bucket(b);
    while (!inflight_.empty()) complete_oldest();
    exposed_s_ += Tracer::now() - t0;
  }
  if (cfg_.zero <= 1) {
    for (const auto& b : buckets_) {
      WEFT_CHECK(b.pending == 0, "bucket [{}, {}) was never reduced ({} groups not ready)", b.begin, b.end, b.pending);
    }
  }
}

void DataParallel::set_norm_skip(std::vector<std::pair<int64_t, int64_t>> ranges) {
  std::sort(ranges.begin(), ranges.end());
  norm_skip_.clear();
  for (const auto& [b, e] : ranges) {  // merged: sorted, disjoint, not adjacent
    if (b >= e) continue;
    if (!norm_skip_.empty() && b <= norm_skip_.back().second) {
      norm_skip_.back().second = std::max(norm_skip_.back().second, e);
    } else {
      norm_skip_.emplace_back(b, e);
    }
  }
}

double DataParallel::grad_norm_sq() {
  // The sum of squares of each kept sub-range of [opt_begin, opt_end) (the range minus the
  // skipped ranges), in order: no cancellation, unlike the total minus the skipped part.
  const float* g = opt_grads();
  const int64_t ob = opt_begin(), oe = opt_end();
  double s = 0.0;
  int64_t at = ob;
  auto add = [&](int64_t b, int64_t e) {
    if (e > b) s += backend_.sum_squares(g + (b - ob), e - b);
  };
  for (const auto& [b0, e0] : norm_skip_) {
    const int64_t b = std::clamp(b0, ob, oe), e = std::clamp(e0, ob, oe);
    add(at, b);
    at = std::max(at, e);
  }
  add(at, oe);
  if (cfg_.zero >= 1) {
    const double t0 = Tracer::now();
    shard().host().all_reduce_sum(&s, 1);  // a host double; the replicas hold the same shards
    exposed_s_ += Tracer::now() - t0;
  }
  return s;
}

void DataParallel::after_optimizer_step() {
  if (cfg_.zero == 1 || cfg_.zero == 2) {
    const double t0 = Tracer::now();
    // In place: this rank's shard is already in its block of params_.
    const DType dt = params_.dtype();
    params_comm().all_gather_v(static_cast<char*>(params_.raw()) + dtype_bytes(dt, shard_begin_), params_.raw(),
                               owner_counts(0, n_), comm_dtype_of(dt));
    exposed_s_ += Tracer::now() - t0;
  } else if (cfg_.zero == 3) {
    gather_->invalidate();
  }
}

// --- ParamStore ---

CView DataParallel::acquire(int g) {
  progress();
  if (cfg_.zero < 3) return CView(params_.raw(), params_.dtype()).at(layout_.group_range(g).first);
  return gather_->acquire(g, backward_);
}

void DataParallel::release(int g) {
  if (cfg_.zero < 3) return;
  gather_->release(g);
}

float* DataParallel::grads(int g) {
  WEFT_CHECK(cfg_.training, "DataParallel::grads on an inference-only store (DataParallelConfig::training = false)");
  backward_ = true;
  if (cfg_.zero <= 1) return grads_.data<float>() + layout_.group_range(g).first;
  int s = grad_slot_of_group_[g];
  if (s >= 0) return grad_slots_[s].data.data<float>();
  if (g == 0) {
    while (grad_slots_[0].busy) complete_oldest();
    s = 0;
  } else {
    for (;;) {
      for (size_t i = 1; i < grad_slots_.size() && s < 0; ++i) {
        if (!grad_slots_[i].busy) s = static_cast<int>(i);
      }
      if (s >= 0) break;
      WEFT_CHECK(!inflight_.empty(), "every gradient buffer is busy and nothing is in flight");
      complete_oldest();
    }
  }
  GradSlot& slot = grad_slots_[s];
  auto [b, e] = layout_.group_range(g);
  slot.data.fill(0.0f, 0, e - b);
  slot.busy = true;
  slot.group = g;
  grad_slot_of_group_[g] = s;
  return slot.data.data<float>();
}

void DataParallel::head_done() {
  if (!split_embedding_ || !last_micro_) return;
  Bucket& b = buckets_[bucket_of_group_[0]];
  WEFT_CHECK(b.groups.size() == 1, "the embedding bucket holds {} groups", b.groups.size());
  b.pending = 0;
  post_bucket(b);
  embedding_posted_ = true;
}

bool DataParallel::embedding_backward(const int32_t* tokens, CView dres, int64_t B, int64_t T, int64_t v0,
                                      int64_t vrows) {
  if (!split_embedding_ || !last_micro_ || !embedding_posted_) return false;
  const int P = dp_.size();
  const int64_t C = layout_.sparse_rows_tensor()->full_shape.back(), N = B * T;
  DeviceBuffer all_tokens(backend_, DType::kI32, N * P, MemCategory::kComm);
  // The rows in their storage dtype (a 16-bit residual stream's gradient travels in 16 bits),
  // or widened to fp32 (exact) for a compressing communicator ([compression] dp: its codecs read
  // fp32).
  DeviceBuffer wide;
  if (grad_comm_ != nullptr && !dres.f32()) {
    wide = DeviceBuffer(backend_, DType::kF32, N * C, MemCategory::kComm);
    backend_.convert(View(wide.raw(), DType::kF32), dres, N * C);
    dres = CView(wide.raw(), DType::kF32);
  }
  DeviceBuffer all_dres(backend_, dres.dtype, N * C * P, MemCategory::kComm);
  const double t0 = Tracer::now();
  // Every dp rank's rows (HSDP too: the rows are not reduced, each rank applies all of them).
  dp_.all_gather(tokens, all_tokens.raw(), N, CommDType::kI32);
  rows_comm().all_gather(dres.data, all_dres.raw(), N * C, comm_dtype_of(dres.dtype));
  while (!inflight_.empty()) complete_oldest();  // the head part's reduction included
  exposed_s_ += Tracer::now() - t0;
  // (not a structured binding: the lambda below captures e0, which clang < 16 refuses)
  const int64_t e0 = layout_.group_range(0).first, e1 = layout_.group_range(0).second;
  // The rows of every rank, in rank order (the same order on every rank: identical gradients).
  auto apply_all = [&](float* base) {
    float *dwte, *dwpe;
    layout_.embedding_ptrs(base + e0, &dwte, &dwpe);
    for (int r = 0; r < P; ++r) {
      backend_.embedding_backward(dwte, dwpe, CView(all_dres.raw(), dres.dtype).at(r * N * C), all_tokens.data<int32_t>() + r * N,
                                  B, T, C, v0, vrows);
    }
  };
  if (cfg_.zero == 0) {
    apply_all(grads_.data<float>());
    return true;
  }
  // zero 1: the rows go into the part of the embedding gradient this rank owns. grads_ (the
  // whole accumulator) is free now, every bucket has been reduced: the shard's part of the
  // embedding is copied to its flat offsets there, the rows are applied to the whole
  // embedding (each element accumulates the rows in (rank, row) order, exactly as adding them
  // to the shard one by one), and the shard's part is copied back.
  const int64_t b = std::max(e0, shard_begin_), e = std::min(e1, shard_end_);
  if (b >= e) return true;  // this rank owns none of the embedding
  backend_.copy_device(grads_.raw(), fbytes(b), shard_grads_.raw(), fbytes(b - shard_begin_), fbytes(e - b));
  apply_all(grads_.data<float>());
  backend_.copy_device(shard_grads_.raw(), fbytes(b - shard_begin_), grads_.raw(), fbytes(b), fbytes(e - b));
  return true;
}

void DataParallel::ready(int g) {
  if (cfg_.zero <= 1) {
    if (g == 0 && embedding_posted_) return;  // reduced already (head_done)
    if (g == 0 && tied_ != nullptr) return;   // reduced at the end of the step
    if (last_micro_) {
      Bucket& b = buckets_[bucket_of_group_[g]];
      if (--b.pending == 0) post_bucket(b);
    }
    progress();
    return;
  }
  const int s = grad_slot_of_group_[g];
  WEFT_CHECK(s >= 0, "group {} is ready but has no gradient buffer", g);
  GradSlot& slot = grad_slots_[s];
  auto [b, e] = layout_.group_range(g);
  if (qgz_) {
    // qgZ: the quantized hops, blocking; the sum of this rank's part goes into its shard.
    const double t0 = Tracer::now();
    float* dst = shard_grads_.data<float>() + shards_.offset_in_shard(b);
    qgz_->reduce_add(slot.data.data<float>(), b, e, dst);
    exposed_s_ += Tracer::now() - t0;
    grad_slot_of_group_[g] = -1;
    slot.busy = false;
    // HSDP: the step's last micro-batch has summed the group's part of the shard.
    if (last_micro_) {
      post_replicate(dst, shards_.offset_in_shard(e) - shards_.offset_in_shard(b));
    }
    return;
  }
  std::vector<int64_t> counts = owner_counts(b, e);
  InFlight f;
  f.slot = s;
  f.recv = slot.recv.data<float>();
  f.recv_count = counts[static_cast<size_t>(shard().rank())];
  f.shard_offset = shards_.offset_in_shard(b);
  if (last_micro_) {  // HSDP: once added, the group's part of the shard is the shard group's sum
    f.replicate = shard_grads_.data<float>() + f.shard_offset;
    f.replicate_count = f.recv_count;
  }
  feedback_for(b);
  f.handle = grads_comm().ireduce_scatter_v(slot.data.raw(), slot.recv.raw(), counts, CommDType::kF32, ReduceOp::kSum);
  inflight_.push_back(std::move(f));
  grad_slot_of_group_[g] = -1;
  progress();
}

double DataParallel::take_exposed_seconds() {
  const double s = exposed_s_ + (gather_ ? gather_->take_exposed_seconds() : 0.0);
  exposed_s_ = 0.0;
  return s;
}

DataParallelMemory DataParallel::memory() const {
  DataParallelMemory m;
  m.params = static_cast<int64_t>(params_.bytes());
  m.grads = static_cast<int64_t>(grads_.bytes());
  if (cfg_.zero >= 2) m.grads += static_cast<int64_t>(shard_grads_.bytes());
  if (cfg_.zero == 1) m.comm += static_cast<int64_t>(shard_grads_.bytes());
  for (const auto& s : grad_slots_) {
    m.grads_transient += static_cast<int64_t>(s.data.bytes());
    m.comm += static_cast<int64_t>(s.recv.bytes());
  }
  if (gather_) {
    m.params_transient += gather_->slot_bytes();
    m.comm += gather_->wire_bytes();
    m.hpz = gather_->hpz_bytes();
  }
  m.params += m.params_transient;
  m.grads += m.grads_transient;
  m.params += m.hpz;
  if (qgz_) {
    m.comm += qgz_->comm_bytes();
    m.residual = qgz_->residual_bytes();
    m.grads += m.residual;
  }
  if (ef_residual_) {
    m.residual += static_cast<int64_t>(ef_residual_.bytes());
    m.grads += static_cast<int64_t>(ef_residual_.bytes());
  }
  return m;
}

}  // namespace weft
