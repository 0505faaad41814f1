#include "parallel/dp/qgz.h"

#include <algorithm>
#include <cmath>

#include "comm/tracer.h"
#include "core/error.h"

namespace weft {

namespace {

constexpr size_t kF = sizeof(float);

}  // namespace

QuantizedReduceScatter::QuantizedReduceScatter(DeviceComm& dp, const ZeroPPConfig& cfg, Backend& be, int64_t n,
                                               int64_t shard, const std::vector<std::pair<int64_t, int64_t>>& groups)
    : dp_(dp), cfg_(cfg), be_(be), n_(n), shard_(shard) {
  const int P = dp.size(), me = dp.rank();
  const std::vector<GradHop> hops = grad_hops(me, P, cfg.levels);
  for (size_t k = 0; k < hops.size(); ++k) {
    Hop h;
    h.h = hops[k];
    for (int m = 0; m < h.h.size; ++m) h.to.push_back(chunks_to_member(me, P, cfg.levels, static_cast<int>(k), m));
    // Collective over dp: every rank splits once per hop, in the same order.
    const std::string axis = k < cfg.level_names.size() ? "dp-" + cfg.level_names[k] : std::string("dp-net");
    h.comm = split_device_comm(dp, h.h.color, me, hops.size() == 1 ? dp.axis() : axis);
    WEFT_CHECK(h.comm->size() == h.h.size, "qgZ hop {}: the group has {} ranks, {} expected", k, h.comm->size(), h.h.size);
    hops_.push_back(std::move(h));
  }
  // Buffer sizes: the largest any group needs at any hop, as the planner's weft_memory counts them.
  ZeroPPConfig only_qgz = cfg;
  only_qgz.quantized_weights = false;
  only_qgz.hpz = 1;
  const ZeroPPBuffers sz = zeropp_buffers(only_qgz, groups, n, me, P, 0, true);
  staging_ = DeviceBuffer(be, DType::kF32, sz.qgz_group_elems, MemCategory::kComm);
  cur_ = DeviceBuffer(be, DType::kF32, sz.qgz_group_elems, MemCategory::kComm);
  next_ = DeviceBuffer(be, DType::kF32, sz.qgz_group_elems, MemCategory::kComm);
  wire_send_ = DeviceBuffer(be, DType::kI8, sz.qgz_send_bytes, MemCategory::kComm);
  wire_recv_ = DeviceBuffer(be, DType::kI8, sz.qgz_recv_bytes, MemCategory::kComm);
  if (cfg.error_feedback) {
    residual_ = DeviceBuffer(be, DType::kF32, n, MemCategory::kGrads);
    residual_.zero();
  }
}

QuantizedReduceScatter::~QuantizedReduceScatter() = default;

std::pair<int64_t, int64_t> QuantizedReduceScatter::chunk(int q, int64_t b, int64_t e) const {
  const int64_t ob = std::min(n_, q * shard_), oe = std::min(n_, (q + 1) * shard_);
  const int64_t cb = std::clamp(ob, b, e), ce = std::clamp(oe, b, e);
  return {cb - b, std::max(cb, ce) - b};
}

bool QuantizedReduceScatter::measuring() const {
  Tracer* t = dp_.tracer();
  return t != nullptr && t->enabled();
}

int64_t QuantizedReduceScatter::comm_bytes() const {
  return static_cast<int64_t>(staging_.bytes() + cur_.bytes() + next_.bytes() + wire_send_.bytes() + wire_recv_.bytes() +
                              scratch_.bytes());
}

std::vector<double> QuantizedReduceScatter::take_rel_errors() {
  std::vector<double> out;
  for (Hop& h : hops_) {
    out.push_back(h.ref2 > 0 ? std::sqrt(h.err2 / h.ref2) : -1.0);
    h.err2 = h.ref2 = 0.0;
  }
  return out;
}

void QuantizedReduceScatter::reduce_add(const float* grad, int64_t b, int64_t e, float* shard_out) {
  const int P = dp_.size(), me = dp_.rank();
  const QuantSpec& spec = cfg_.gradients;
  const bool measure = measuring();
  if (measure && !scratch_) scratch_ = DeviceBuffer(be_, DType::kF32, staging_.count(), MemCategory::kComm);
  // cur holds the chunks in `held` (ascending), concatenated.
  const float* cur = grad;
  std::vector<int> held(static_cast<size_t>(P));
  for (int q = 0; q < P; ++q) held[static_cast<size_t>(q)] = q;
  auto len = [&](int q) {
    const auto [cb, ce] = chunk(q, b, e);
    return ce - cb;
  };
  for (size_t k = 0; k < hops_.size(); ++k) {
    Hop& hop = hops_[k];
    const int n = hop.h.size;
    std::vector<int64_t> pos(static_cast<size_t>(P), -1);
    int64_t at = 0;
    for (int q : held) {
      pos[static_cast<size_t>(q)] = at;
      at += len(q);
    }
    // One block per member: the chunks its position selects, in ascending order.
    const std::vector<std::vector<int>>& to = hop.to;
    std::vector<int> order;
    std::vector<int64_t> E(static_cast<size_t>(n), 0), W(static_cast<size_t>(n), 0), eoff(static_cast<size_t>(n) + 1, 0),
        woff(static_cast<size_t>(n) + 1, 0);
    for (int m = 0; m < n; ++m) {
      for (int q : to[static_cast<size_t>(m)]) {
        E[static_cast<size_t>(m)] += len(q);
        order.push_back(q);
      }
      W[static_cast<size_t>(m)] = quant_wire_bytes(E[static_cast<size_t>(m)], spec);
      eoff[static_cast<size_t>(m) + 1] = eoff[static_cast<size_t>(m)] + E[static_cast<size_t>(m)];
      woff[static_cast<size_t>(m) + 1] = woff[static_cast<size_t>(m)] + W[static_cast<size_t>(m)];
    }
    // The swizzle: blocks in member order (none when the held order is already that order).
    const float* src = cur;
    if (order != held) {
      int64_t so = 0;
      for (int q : order) {
        const int64_t l = len(q);
        if (l > 0) be_.copy_device(staging_.raw(), so * kF, cur, pos[static_cast<size_t>(q)] * kF, l * kF);
        so += l;
      }
      src = staging_.data<float>();
    }
    float* res = k == 0 && residual_ ? residual_.data<float>() + b : nullptr;
    uint8_t* ws = wire_send_.data<uint8_t>();
    for (int m = 0; m < n; ++m) {
      const size_t mm = static_cast<size_t>(m);
      if (E[mm] == 0) continue;
      be_.quantize_blocks(ws + woff[mm], src + eoff[mm], E[mm], spec, res ? res + eoff[mm] : nullptr);
      if (measure) {  // ||x - Q(x)|| against ||x|| of what this hop sends
        float* d = scratch_.data<float>();
        be_.dequantize_blocks(d, ws + woff[mm], E[mm], spec, false);
        be_.scale(d, -1.0f, E[mm]);
        be_.add(d, d, src + eoff[mm], E[mm]);
        hop.err2 += be_.sum_squares(d, E[mm]);
        hop.ref2 += be_.sum_squares(src + eoff[mm], E[mm]);
      }
    }
    std::vector<int64_t> counts(static_cast<size_t>(n) * static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      for (int m = 0; m < n; ++m) counts[static_cast<size_t>(i * n + m)] = W[static_cast<size_t>(m)];
    }
    if (measure) {
      Tracer* t = dp_.tracer();
      t->set_call_error(hop.ref2 > 0 ? std::sqrt(hop.err2 / hop.ref2) : 0.0);
    }
    hop.comm->all_to_all_v(ws, wire_recv_.raw(), counts, CommDType::kU8);
    // Every member's block for this rank: dequantized and summed in fp32, in member order.
    const size_t mine = static_cast<size_t>(hop.h.index);
    float* nx = cur == cur_.data<float>() ? next_.data<float>() : cur_.data<float>();
    const uint8_t* wr = wire_recv_.data<uint8_t>();
    for (int i = 0; i < n && E[mine] > 0; ++i) {
      be_.dequantize_blocks(nx, wr + static_cast<int64_t>(i) * W[mine], E[mine], spec, i > 0);
    }
    cur = nx;
    held = to[mine];
  }
  WEFT_CHECK(held.size() == 1 && held[0] == me, "qgZ: after the last hop rank {} holds {} chunks", me, held.size());
  const int64_t c = len(me);
  if (c > 0) be_.add(shard_out, shard_out, cur, c);
}

}  // namespace weft
