#include "parallel/dp/zero3_gather.h"

#include <algorithm>
#include <cmath>

#include "comm/tracer.h"
#include "core/block_quant.h"
#include "core/error.h"
#include "parallel/dp/param_slots.h"

namespace weft {

namespace {


}  // namespace

Zero3Gather::Zero3Gather(const ParamLayout& layout, DeviceComm& shard, Backend& backend, const FlatShards& shards,
                         const DeviceBuffer& params, const ZeroPPConfig& zeropp, int prefetch, int slots,
                         bool training, const std::vector<int>& owned)
    : layout_(layout),
      shard_(shard),
      backend_(backend),
      shards_(shards),
      params_(params),
      zeropp_(zeropp),
      prefetch_(prefetch),
      L_(layout.model_layers()),
      training_(training),
      dt_(params.dtype()) {
  const SlotSizes sizes = slot_sizes(layout, owned);
  slots_.resize(static_cast<size_t>(slots));
  for (size_t s = 0; s < slots_.size(); ++s) {
    slots_[s].data = DeviceBuffer(backend, dt_, s == 0 ? sizes.group0 : sizes.other, MemCategory::kParams);
  }
  if (zeropp_.hpz > 1) setup_hpz(owned);
  if (zeropp_.quantized_weights) setup_qwz(owned);
}

Zero3Gather::~Zero3Gather() {
  try {
    for (auto& s : slots_) {
      if (s.pending) s.pending->wait();
    }
  } catch (...) {
  }
}

void Zero3Gather::setup_hpz(const std::vector<int>& owned) {
  const int P = shard_.size(), a = zeropp_.hpz;
  WEFT_CHECK(P % a == 0, "hpZ: {} ranks do not divide the data-parallel (dp_shard) group of {}", a, P);
  // Collective over the dp_shard group: consecutive ranks of it form one hpZ group.
  hpz_comm_ = split_device_comm(shard_, shard_.rank() / a, shard_.rank(), "dp-hpz");
  hpz_offset_.assign(static_cast<size_t>(layout_.num_groups()), -1);
  hpz_valid_.assign(static_cast<size_t>(layout_.num_groups()), 0);
  int64_t at = 0;
  for (auto it = owned.rbegin(); it != owned.rend(); ++it) {  // ascending groups
    hpz_offset_[static_cast<size_t>(*it)] = at;
    at += hpz_counts(*it)[static_cast<size_t>(hpz_comm_->rank())];
  }
  hpz_ = DeviceBuffer(backend_, dt_, at, MemCategory::kParams);
}

void Zero3Gather::setup_qwz(const std::vector<int>& owned) {
  // Wire buffers of each slot, for the largest group it may hold (sized as weft_memory counts them).
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (auto it = owned.rbegin(); it != owned.rend(); ++it) ranges.push_back(layout_.group_range(*it));  // group 0 first
  ZeroPPConfig only_qwz = zeropp_;
  only_qwz.hpz = 1;
  only_qwz.quantized_gradients = false;
  const ZeroPPBuffers sz = zeropp_buffers(only_qwz, ranges, shards_.n, shard_.rank(), shard_.size(),
                                          static_cast<int>(slots_.size()), training_, dt_);
  for (size_t s = 0; s < slots_.size(); ++s) {
    slots_[s].wire_send = DeviceBuffer(backend_, DType::kI8, sz.qwz_slot_wires[s].first, MemCategory::kComm);
    slots_[s].wire_recv = DeviceBuffer(backend_, DType::kI8, sz.qwz_slot_wires[s].second, MemCategory::kComm);
  }
  if (dt_ != DType::kF32 && sz.qwz_stage_elems > 0) {
    qwz_stage_ = DeviceBuffer(backend_, DType::kF32, sz.qwz_stage_elems, MemCategory::kComm);
  }
}

float* Zero3Gather::qwz_stage(int64_t n) {
  WEFT_CHECK(qwz_stage_.count() >= n, "qwZ staging of {} elements, {} reserved", n, qwz_stage_.count());
  return qwz_stage_.data<float>();
}

std::vector<int64_t> Zero3Gather::hpz_counts(int g) const {
  const auto [b, e] = layout_.group_range(g);
  const int64_t len = e - b, a = zeropp_.hpz, c = (len + a - 1) / a;
  std::vector<int64_t> counts(static_cast<size_t>(a));
  for (int64_t j = 0; j < a; ++j) counts[static_cast<size_t>(j)] = std::max<int64_t>(0, std::min(len, (j + 1) * c) - j * c);
  return counts;
}

void Zero3Gather::invalidate() {
  for (auto& s : slots_) s.valid = false;
  std::fill(hpz_valid_.begin(), hpz_valid_.end(), 0);
}

int Zero3Gather::find(int g) const { return find_gathered_slot(slots_, g); }

int Zero3Gather::gather(int g) {
  const int slot = choose_gather_slot(slots_, g);
  if (slot < 0) return -1;
  Slot& p = slots_[static_cast<size_t>(slot)];
  WEFT_CHECK(p.refs == 0 && !p.pending, "parameter slot {} of group {} is in use", slot, p.group);
  auto [b, e] = layout_.group_range(g);
  const CView send = CView(params_.raw(), dt_).at(shards_.offset_in_shard(b));
  const CommDType wire = comm_dtype_of(dt_);
  p.group = g;
  p.valid = true;
  p.last_use = ++clock_;
  p.dequantize = false;
  p.fill_hpz = false;
  if (hpz_comm_ && hpz_valid_[static_cast<size_t>(g)]) {
    // hpZ: from the secondary partition, inside the alpha group, unquantized.
    const CView slice = CView(hpz_.raw(), dt_).at(hpz_offset_[static_cast<size_t>(g)]);
    p.pending = hpz_comm_->iall_gather_v(slice.data, p.data.raw(), hpz_counts(g), wire);
  } else if (zeropp_.quantized_weights) {
    post_quantized(p, g, send);
  } else {
    p.pending = params_comm().iall_gather_v(send.data, p.data.raw(), shards_.counts(b, e), wire);
    p.fill_hpz = hpz_comm_ != nullptr;
  }
  return slot;
}

// qwZ: every rank's piece as quantized blocks, in one all-gather of bytes; while traced, the
// relative error of this rank's piece.
void Zero3Gather::post_quantized(Slot& p, int g, CView send_view) {
  auto [b, e] = layout_.group_range(g);
  const QuantSpec& q = zeropp_.weights;
  const std::vector<int64_t> counts = shards_.counts(b, e);
  std::vector<int64_t> wire(counts.size());
  for (size_t r = 0; r < counts.size(); ++r) wire[r] = quant_wire_bytes(counts[r], q);
  const int64_t mine = counts[static_cast<size_t>(shard_.rank())];
  // The quantizer reads fp32: 16-bit parameters widen into the staging scratch first.
  const float* send = static_cast<const float*>(send_view.data);
  if (dt_ != DType::kF32 && mine > 0) {
    float* x = qwz_stage(mine);
    backend_.convert(x, send_view, mine);
    send = x;
  }
  if (mine > 0) backend_.quantize_blocks(p.wire_send.raw(), send, mine, q, nullptr);
  Tracer* t = shard_.tracer();
  if (t != nullptr && t->enabled()) {
    if (mine > 0) {  // ||x - Q(x)|| of this rank's piece
      if (!qwz_scratch_ || qwz_scratch_.count() < mine) qwz_scratch_ = DeviceBuffer(backend_, DType::kF32, mine, MemCategory::kComm);
      float* d = qwz_scratch_.data<float>();
      backend_.dequantize_blocks(d, p.wire_send.raw(), mine, q, false);
      backend_.scale(d, -1.0f, mine);
      backend_.add(d, d, send, mine);
      const double err2 = backend_.sum_squares(d, mine), ref2 = backend_.sum_squares(send, mine);
      qwz_err2_ += err2;
      qwz_ref2_ += ref2;
      t->set_call_error(ref2 > 0 ? std::sqrt(err2 / ref2) : 0.0);
    } else {
      t->set_call_error(0.0);
    }
  }
  p.pending = shard_.iall_gather_v(p.wire_send.raw(), p.wire_recv.raw(), wire, CommDType::kU8);
  p.dequantize = true;
  p.fill_hpz = hpz_comm_ != nullptr;
}

void Zero3Gather::prefetch_after(int g, bool backward) {
  if (prefetch_ <= 0) return;
  int next = -1;
  if (!backward) {
    next = g <= L_ ? g + 1 : -1;  // 0 -> 1 -> ... -> L -> L+1
  } else if (g >= 2 && g <= L_) {
    next = g - 1;  // L -> ... -> 1
  } else if (g == L_ + 1) {
    next = L_;
  }
  if (next < 1 || next > L_ + 1 || !layout_.has_group(next)) return;
  if (find(next) >= 0) return;
  gather(next);  // -1 (no free slot) simply skips the prefetch
}

CView Zero3Gather::acquire(int g, bool backward) {
  int s = find(g);
  if (s < 0) s = gather(g);
  WEFT_CHECK(s >= 0, "no free parameter buffer to gather group {}", g);
  Slot& p = slots_[static_cast<size_t>(s)];
  if (p.pending) {
    const double t0 = Tracer::now();
    p.pending->wait();
    exposed_s_ += Tracer::now() - t0;
    p.pending.reset();
    finish(p);
  }
  ++p.refs;
  p.last_use = ++clock_;
  prefetch_after(g, backward);
  return CView(p.data.raw(), dt_);
}

void Zero3Gather::finish(Slot& p) {
  const int g = p.group;
  auto [b, e] = layout_.group_range(g);
  if (p.dequantize) {
    const std::vector<int64_t> counts = shards_.counts(b, e);
    int64_t at = 0, wat = 0;
    const View data(p.data.raw(), dt_);
    for (int64_t c : counts) {
      if (c > 0) {
        // 16-bit parameters: dequantized in fp32, rounded once into the slot.
        float* out = dt_ == DType::kF32 ? static_cast<float*>(data.at(at).data) : qwz_stage(c);
        backend_.dequantize_blocks(out, p.wire_recv.data<uint8_t>() + wat, c, zeropp_.weights, false);
        if (dt_ != DType::kF32) backend_.convert(data.at(at), out, c);
      }
      at += c;
      wat += quant_wire_bytes(c, zeropp_.weights);
    }
    p.dequantize = false;
  }
  if (p.fill_hpz) {
    // hpZ: this rank's 1/alpha of the gathered group (what every later gather reads).
    const std::vector<int64_t> counts = hpz_counts(g);
    const int j = hpz_comm_->rank();
    int64_t off = 0;
    for (int i = 0; i < j; ++i) off += counts[static_cast<size_t>(i)];
    const int64_t c = counts[static_cast<size_t>(j)];
    if (c > 0) {
      backend_.copy_device(hpz_.raw(), dtype_bytes(dt_, hpz_offset_[static_cast<size_t>(g)]), p.data.raw(),
                           dtype_bytes(dt_, off), dtype_bytes(dt_, c));
    }
    hpz_valid_[static_cast<size_t>(g)] = 1;
    p.fill_hpz = false;
  }
}

void Zero3Gather::release(int g) {
  const int s = find(g);
  WEFT_CHECK(s >= 0 && slots_[static_cast<size_t>(s)].refs > 0, "release of group {} that is not acquired", g);
  --slots_[static_cast<size_t>(s)].refs;
}

int64_t Zero3Gather::slot_bytes() const {
  int64_t b = 0;
  for (const auto& s : slots_) b += static_cast<int64_t>(s.data.bytes());
  return b;
}

int64_t Zero3Gather::wire_bytes() const {
  int64_t b = 0;
  for (const auto& s : slots_) b += static_cast<int64_t>(s.wire_send.bytes() + s.wire_recv.bytes());
  return b + static_cast<int64_t>(qwz_stage_.bytes());
}

double Zero3Gather::take_exposed_seconds() {
  const double s = exposed_s_;
  exposed_s_ = 0.0;
  return s;
}

double Zero3Gather::take_weight_error() {
  const double e = qwz_ref2_ > 0 ? std::sqrt(qwz_err2_ / qwz_ref2_) : -1.0;
  qwz_err2_ = qwz_ref2_ = 0.0;
  return e;
}

}  // namespace weft
