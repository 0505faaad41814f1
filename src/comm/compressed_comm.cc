#include "comm/compressed_comm.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <functional>
#include <numeric>

#include "comm/comm_detail.h"
#include "comm/tracer.h"
#include "core/error.h"

namespace weft {

namespace {

// Tracing off for the transport calls underneath a compressed call (restored on exit).
class TraceOff {
 public:
  explicit TraceOff(Tracer* t) : t_(t != nullptr && t->enabled() ? t : nullptr) {
    if (t_) t_->set_enabled(false);
  }
  ~TraceOff() {
    if (t_) t_->set_enabled(true);
  }
  TraceOff(const TraceOff&) = delete;
  TraceOff& operator=(const TraceOff&) = delete;

 private:
  Tracer* t_;
};

std::vector<int64_t> prefix(const std::vector<int64_t>& v) {
  std::vector<int64_t> o(v.size() + 1, 0);
  for (size_t i = 0; i < v.size(); ++i) o[i + 1] = o[i] + v[i];
  return o;
}

// count split over n ranks as evenly as it goes (the first count % n one element more).
std::vector<int64_t> even_split(int64_t count, int n) {
  std::vector<int64_t> c(static_cast<size_t>(n), count / n);
  for (int64_t q = 0; q < count % n; ++q) c[static_cast<size_t>(q)] += 1;
  return c;
}

char* at(const DeviceBuffer& b, int64_t off) { return static_cast<char*>(b.raw()) + off; }

bool is_16bit(CommDType t) { return t == CommDType::kBF16 || t == CommDType::kF16; }
int64_t elem_bytes(CommDType t) { return static_cast<int64_t>(comm_dtype_size(t)); }

}  // namespace

// One compressed call: its buffers, the transport's handle, what remains to do once the
// transport is done (`finish`), and its trace event.
class CompressedComm::Op {
 public:
  // measure: compute the relative error of what this op encodes (while tracing).
  Op(CompressedComm& c, bool measure) : c_(c), be_(c.backend()), codec_(*c.codec_), measure_(measure) {}

  void begin_trace(const char* kind, int64_t raw_bytes, const std::string& group, bool async) {
    trace_.begin(c_.tracer(), kind, c_.axis(), raw_bytes, group, async);
  }

  // --- codec calls, timed ---
  int64_t encode(void* wire, const float* x, int64_t n, float* residual) {
    const double t0 = Tracer::now();
    const int64_t b = codec_.encode(wire, x, n, residual);
    if (measure_) {
      be_.synchronize();
      measure_error(wire, b, x, n);
    }
    codec_s_ += Tracer::now() - t0;
    return b;
  }
  void decode(float* out, const void* wire, int64_t bytes, int64_t n, bool accumulate) {
    const double t0 = Tracer::now();
    codec_.decode(out, wire, bytes, n, accumulate);
    if (measure_) be_.synchronize();
    codec_s_ += Tracer::now() - t0;
  }

  DeviceBuffer& buffer(DeviceBuffer& b, DType dt, int64_t n) {
    b = DeviceBuffer(be_, dt, std::max<int64_t>(n, 1), MemCategory::kComm);
    return b;
  }

  // Waits for the transport, then finishes (decodes, and for an all-reduce runs its second
  // phase), with the transport's tracing off; then records the event.
  void complete() {
    if (done_) return;
    {
      TraceOff off(c_.tracer());
      if (inner_) inner_->wait();
      inner_.reset();
      if (finish_) finish_();
      if (narrow_) narrow_();
    }
    done_ = true;
    record();
  }
  // Completes if the transport is done and nothing is left that must run at wait().
  bool test() {
    if (done_) return true;
    if (two_phase_) return false;
    if (inner_) {
      TraceOff off(c_.tracer());
      if (!inner_->test()) return false;
    }
    complete();
    return true;
  }
  bool done() const { return done_; }

  void record() {
    if (trace_.tracer == nullptr) return;
    trace_.ev.wire_bytes = wire_bytes_;
    trace_.ev.codec = codec_.spec().name();
    trace_.ev.codec_s = codec_s_;
    trace_.ev.rel_err = ref2_ > 0 ? std::sqrt(err2_ / ref2_) : (measure_ ? 0.0 : -1.0);
    trace_.finish();
  }

  // Adds another op's codec time and error into this one's (an all-reduce's phases).
  void absorb(const Op& o) {
    codec_s_ += o.codec_s_;
    err2_ += o.err2_;
    ref2_ += o.ref2_;
  }

  CompressedComm& c_;
  Backend& be_;
  Codec& codec_;
  detail::CallTrace trace_;
  bool measure_;
  bool done_ = false;
  bool two_phase_ = false;  // work left that must run at wait() (a collective, or a blocking receive)
  double codec_s_ = 0.0, err2_ = 0.0, ref2_ = 0.0;
  int64_t wire_bytes_ = 0;
  DeviceBuffer wsend_, wrecv_, own_, chunk_, measure_buf_;
  DeviceBuffer wide_in_, wide_out_;  // a 16-bit payload's fp32 copies (the codecs read fp32)
  std::vector<int64_t> matrix_, sizes_;
  int64_t size_msg_ = 0;  // zstd point-to-point: the payload's bytes
  CommHandle inner_;
  std::unique_ptr<Op> sub_;  // an all-reduce's reduce-scatter
  std::function<void()> finish_;
  std::function<void()> narrow_;  // a 16-bit payload: the fp32 result rounded into the caller's buffer

 private:
  // ||x - decode(wire)||^2 and ||x||^2 (DEVICE scratch, backend ops).
  void measure_error(const void* wire, int64_t bytes, const float* x, int64_t n) {
    if (measure_buf_.count() < n) measure_buf_ = DeviceBuffer(be_, DType::kF32, n, MemCategory::kComm);
    float* d = measure_buf_.data<float>();
    codec_.decode(d, wire, bytes, n, false);
    be_.scale(d, -1.0f, n);
    be_.add(d, x, d, n);
    err2_ += be_.sum_squares(d, n);
    ref2_ += be_.sum_squares(x, n);
  }
};

namespace {

class CompressedRequest final : public CommRequest {
 public:
  explicit CompressedRequest(std::unique_ptr<CompressedComm::Op> op) : op_(std::move(op)) {}
  ~CompressedRequest() override {
    if (op_ && !op_->done() && std::uncaught_exceptions() == 0) {
      try {
        op_->complete();
      } catch (...) {  // a destructor must not throw; the error was (or will be) seen by wait()
      }
    }
  }
  void wait() override { op_->complete(); }
  bool test() override { return op_->test(); }

 private:
  std::unique_ptr<CompressedComm::Op> op_;
};

}  // namespace

CompressedComm::CompressedComm(DeviceComm& inner, std::unique_ptr<Codec> codec)
    : inner_(inner), codec_(std::move(codec)) {
  WEFT_CHECK(!codec_ || &codec_->backend() == &inner.backend(),
             "CompressedComm on axis {}: the codec's backend is not the communicator's", inner.axis());
}

CompressedComm::CompressedComm(std::unique_ptr<DeviceComm> inner, std::unique_ptr<Codec> codec)
    : owned_(std::move(inner)), inner_(*owned_), codec_(std::move(codec)) {}

CompressedComm::~CompressedComm() = default;

// --- the three compressed collectives ---

std::unique_ptr<CompressedComm::Op> CompressedComm::start_reduce_scatter(const float* send, float* recv,
                                                                          const std::vector<int64_t>& counts,
                                                                          const char* kind, bool async, int64_t elem) {
  const int P = size(), r = rank();
  auto op = std::make_unique<Op>(*this, tracing());
  const int64_t total = detail::checked_total(counts, P, "compressed reduce_scatter_v");
  if (kind) op->begin_trace(kind, total * elem, detail::group_label(world_ranks()), async);
  float* residual = next_residual_;
  next_residual_ = nullptr;
  const std::vector<int64_t> off = prefix(counts);
  int64_t cap = 0;
  for (int q = 0; q < P; ++q) cap += q == r ? 0 : codec_->max_wire_bytes(counts[static_cast<size_t>(q)]);
  op->buffer(op->wsend_, DType::kI8, cap);
  // This rank's block, kept apart (recv may alias it).
  const int64_t mine = counts[static_cast<size_t>(r)];
  op->buffer(op->own_, DType::kF32, mine);
  if (mine > 0)
    backend().copy_device(op->own_.raw(), 0, send + off[static_cast<size_t>(r)], 0, static_cast<size_t>(mine) * 4);
  std::vector<int64_t> row(static_cast<size_t>(P), 0);
  int64_t woff = 0, sent = 0, sent_raw = 0;
  for (int q = 0; q < P; ++q) {
    if (q == r) continue;
    const size_t qs = static_cast<size_t>(q);
    const int64_t b = op->encode(at(op->wsend_, woff), send + off[qs], counts[qs],
                                 residual ? residual + off[qs] : nullptr);
    row[qs] = b;
    woff += b;
    sent += b;
    sent_raw += counts[qs] * elem;
  }
  // The whole matrix of wire sizes: computed where the codec's sizes are fixed, else gathered.
  op->matrix_.assign(static_cast<size_t>(P) * P, 0);
  if (codec_->spec().fixed_size()) {
    for (int i = 0; i < P; ++i)
      for (int j = 0; j < P; ++j)
        if (i != j) op->matrix_[static_cast<size_t>(i * P + j)] = codec_->max_wire_bytes(counts[static_cast<size_t>(j)]);
  } else {
    TraceOff off_trace(tracer());
    host().all_gather(row.data(), op->matrix_.data(), P, CommDType::kI64);
  }
  int64_t in = 0;
  for (int i = 0; i < P; ++i) in += op->matrix_[static_cast<size_t>(i * P + r)];
  op->buffer(op->wrecv_, DType::kI8, in);
  // Wire bytes in the reduce-scatter convention (the whole input as this rank compressed it):
  // what it sent, plus its own block at the ratio it reached.
  op->wire_bytes_ = sent + (sent_raw > 0 ? static_cast<int64_t>(static_cast<double>(sent) / sent_raw * mine * elem) : mine * elem);
  {
    TraceOff off_trace(tracer());
    op->inner_ = inner_.iall_to_all_v(op->wsend_.raw(), op->wrecv_.raw(), op->matrix_, CommDType::kU8);
  }
  Op* o = op.get();
  op->finish_ = [this, o, recv, mine, P, r]() {
    int64_t roff = 0;
    bool first = true;
    for (int q = 0; q < P; ++q) {
      if (q == r) {
        if (mine > 0) {
          if (first) {
            backend().copy_device(recv, 0, o->own_.raw(), 0, static_cast<size_t>(mine) * 4);
          } else {
            backend().add(recv, recv, o->own_.data<float>(), mine);
          }
        }
      } else {
        const int64_t b = o->matrix_[static_cast<size_t>(q * P + r)];
        o->decode(recv, at(o->wrecv_, roff), b, mine, !first);
        roff += b;
      }
      first = false;
    }
  };
  return op;
}

std::unique_ptr<CompressedComm::Op> CompressedComm::start_all_gather(const float* send, float* recv,
                                                                      const std::vector<int64_t>& counts,
                                                                      const char* kind, bool async, int64_t elem) {
  const int P = size(), r = rank();
  auto op = std::make_unique<Op>(*this, tracing());
  const int64_t total = detail::checked_total(counts, P, "compressed all_gather_v");
  if (kind) op->begin_trace(kind, total * elem, detail::group_label(world_ranks()), async);
  const int64_t mine = counts[static_cast<size_t>(r)];
  op->buffer(op->wsend_, DType::kI8, codec_->max_wire_bytes(mine));
  const int64_t b = op->encode(op->wsend_.raw(), send, mine, nullptr);
  op->sizes_.assign(static_cast<size_t>(P), 0);
  if (codec_->spec().fixed_size()) {
    for (int q = 0; q < P; ++q) op->sizes_[static_cast<size_t>(q)] = codec_->max_wire_bytes(counts[static_cast<size_t>(q)]);
  } else {
    TraceOff off_trace(tracer());
    host().all_gather(&b, op->sizes_.data(), 1, CommDType::kI64);
  }
  const std::vector<int64_t> woff = prefix(op->sizes_);
  op->buffer(op->wrecv_, DType::kI8, woff.back());
  op->wire_bytes_ = woff.back();
  {
    TraceOff off_trace(tracer());
    op->inner_ = inner_.iall_gather_v(op->wsend_.raw(), op->wrecv_.raw(), op->sizes_, CommDType::kU8);
  }
  Op* o = op.get();
  const std::vector<int64_t> off = prefix(counts);
  op->finish_ = [o, recv, counts, off, woff, P]() {
    for (int q = 0; q < P; ++q) {
      const size_t qs = static_cast<size_t>(q);
      o->decode(recv + off[qs], at(o->wrecv_, woff[qs]), o->sizes_[qs], counts[qs], false);
    }
  };
  return op;
}

std::unique_ptr<CompressedComm::Op> CompressedComm::start_all_reduce(float* buf, int64_t count, bool async,
                                                                      int64_t elem) {
  const int P = size(), r = rank();
  auto op = std::make_unique<Op>(*this, tracing());
  op->begin_trace("all_reduce", count * elem, detail::group_label(world_ranks()), async);
  const std::vector<int64_t> counts = even_split(count, P);
  const std::vector<int64_t> off = prefix(counts);
  const int64_t mine = counts[static_cast<size_t>(r)];
  op->buffer(op->chunk_, DType::kF32, mine);
  op->sub_ = start_reduce_scatter(buf, op->chunk_.data<float>(), counts, nullptr, async, elem);
  op->two_phase_ = true;
  Op* o = op.get();
  op->finish_ = [this, o, buf, counts]() {
    o->sub_->complete();
    std::unique_ptr<Op> gather = start_all_gather(o->chunk_.data<float>(), buf, counts, nullptr, false, 4);
    gather->complete();
    o->absorb(*o->sub_);
    o->absorb(*gather);
    o->wire_bytes_ = (o->sub_->wire_bytes_ + gather->wire_bytes_) / 2;
  };
  return op;
}

// --- Communicator ---
//
// A 16-bit payload (bf16, f16: the storage of a 16-bit run's activations, working parameters and
// pipeline messages) is widened exactly into fp32 comm buffers for the codec (which reads and
// writes fp32), and what the call delivers is rounded once into the caller's 16-bit buffer; the
// trace counts its raw bytes at 2 an element (what an uncompressed call would move).

DeviceBuffer CompressedComm::widen(const void* src, int64_t n, CommDType t, bool copy) {
  DeviceBuffer w(backend(), DType::kF32, std::max<int64_t>(n, 1), MemCategory::kComm);
  if (copy && n > 0) backend().convert(View(w.raw(), DType::kF32), CView(src, float_dtype_of(t)), n);
  return w;
}

void CompressedComm::narrow_into(Op& op, DeviceBuffer in, DeviceBuffer out, void* dst, int64_t n, CommDType t) {
  op.wide_in_ = std::move(in);
  op.wide_out_ = std::move(out);
  if (dst == nullptr) return;
  Op* o = &op;
  Backend& be = backend();
  op.narrow_ = [o, &be, dst, n, t]() {
    if (n > 0) be.convert(View(dst, float_dtype_of(t)), CView(o->wide_out_.raw(), DType::kF32), n);
  };
}

std::unique_ptr<CompressedComm::Op> CompressedComm::post_all_reduce(void* buf, int64_t count, CommDType t, bool async) {
  if (!is_16bit(t)) return start_all_reduce(static_cast<float*>(buf), count, async, 4);
  DeviceBuffer w = widen(buf, count, t, true);
  std::unique_ptr<Op> op = start_all_reduce(w.data<float>(), count, async, elem_bytes(t));
  narrow_into(*op, DeviceBuffer(), std::move(w), buf, count, t);
  return op;
}

std::unique_ptr<CompressedComm::Op> CompressedComm::post_reduce_scatter(const void* send, void* recv,
                                                                         const std::vector<int64_t>& counts,
                                                                         CommDType t, bool async) {
  if (!is_16bit(t)) {
    return start_reduce_scatter(static_cast<const float*>(send), static_cast<float*>(recv), counts, "reduce_scatter",
                                async, 4);
  }
  const int64_t total = detail::checked_total(counts, size(), "compressed reduce_scatter_v");
  DeviceBuffer in = widen(send, total, t, true);
  DeviceBuffer out = widen(nullptr, counts.at(static_cast<size_t>(rank())), t, false);
  std::unique_ptr<Op> op =
      start_reduce_scatter(in.data<float>(), out.data<float>(), counts, "reduce_scatter", async, elem_bytes(t));
  narrow_into(*op, std::move(in), std::move(out), recv, counts.at(static_cast<size_t>(rank())), t);
  return op;
}

std::unique_ptr<CompressedComm::Op> CompressedComm::post_all_gather(const void* send, void* recv,
                                                                     const std::vector<int64_t>& counts, CommDType t,
                                                                     bool async) {
  if (!is_16bit(t)) {
    return start_all_gather(static_cast<const float*>(send), static_cast<float*>(recv), counts, "all_gather", async,
                            4);
  }
  const int64_t total = detail::checked_total(counts, size(), "compressed all_gather_v");
  DeviceBuffer in = widen(send, counts.at(static_cast<size_t>(rank())), t, true);
  DeviceBuffer out = widen(nullptr, total, t, false);
  std::unique_ptr<Op> op =
      start_all_gather(in.data<float>(), out.data<float>(), counts, "all_gather", async, elem_bytes(t));
  narrow_into(*op, std::move(in), std::move(out), recv, total, t);
  return op;
}

void CompressedComm::all_reduce(void* buf, int64_t count, CommDType t, ReduceOp op) {
  if (!compresses_sum(t, op)) return inner_.all_reduce(buf, count, t, op);
  detail::check_count(count, "all_reduce");
  post_all_reduce(buf, count, t, false)->complete();
}

void CompressedComm::reduce_scatter(const void* send, void* recv, int64_t count, CommDType t, ReduceOp op) {
  if (!compresses_sum(t, op)) return inner_.reduce_scatter(send, recv, count, t, op);
  detail::check_count(count, "reduce_scatter");
  post_reduce_scatter(send, recv, std::vector<int64_t>(static_cast<size_t>(size()), count), t, false)->complete();
}

void CompressedComm::reduce_scatter_v(const void* send, void* recv, const std::vector<int64_t>& counts, CommDType t,
                                      ReduceOp op) {
  if (!compresses_sum(t, op)) return inner_.reduce_scatter_v(send, recv, counts, t, op);
  post_reduce_scatter(send, recv, counts, t, false)->complete();
}

void CompressedComm::all_gather(const void* send, void* recv, int64_t count, CommDType t) {
  if (!compresses(t)) return inner_.all_gather(send, recv, count, t);
  detail::check_count(count, "all_gather");
  post_all_gather(send, recv, std::vector<int64_t>(static_cast<size_t>(size()), count), t, false)->complete();
}

void CompressedComm::all_gather_v(const void* send, void* recv, const std::vector<int64_t>& counts, CommDType t) {
  if (!compresses(t)) return inner_.all_gather_v(send, recv, counts, t);
  post_all_gather(send, recv, counts, t, false)->complete();
}

CommHandle CompressedComm::iall_reduce(void* buf, int64_t count, CommDType t, ReduceOp op) {
  if (!compresses_sum(t, op)) return inner_.iall_reduce(buf, count, t, op);
  detail::check_count(count, "iall_reduce");
  return std::make_unique<CompressedRequest>(post_all_reduce(buf, count, t, true));
}

CommHandle CompressedComm::ireduce_scatter_v(const void* send, void* recv, const std::vector<int64_t>& counts,
                                             CommDType t, ReduceOp op) {
  if (!compresses_sum(t, op)) return inner_.ireduce_scatter_v(send, recv, counts, t, op);
  return std::make_unique<CompressedRequest>(post_reduce_scatter(send, recv, counts, t, true));
}

CommHandle CompressedComm::iall_gather_v(const void* send, void* recv, const std::vector<int64_t>& counts,
                                         CommDType t) {
  if (!compresses(t)) return inner_.iall_gather_v(send, recv, counts, t);
  return std::make_unique<CompressedRequest>(post_all_gather(send, recv, counts, t, true));
}

// --- point to point ---

void CompressedComm::send(const void* buf, int64_t count, CommDType t, int peer, int tag) {
  if (!compresses(t)) return inner_.send(buf, count, t, peer, tag);
  isend(buf, count, t, peer, tag)->wait();
}

void CompressedComm::recv(void* buf, int64_t count, CommDType t, int peer, int tag) {
  if (!compresses(t)) return inner_.recv(buf, count, t, peer, tag);
  irecv(buf, count, t, peer, tag)->wait();
}

CommHandle CompressedComm::isend(const void* buf, int64_t count, CommDType t, int peer, int tag) {
  if (!compresses(t)) return inner_.isend(buf, count, t, peer, tag);
  detail::check_count(count, "isend");
  auto op = std::make_unique<Op>(*this, tracing());
  op->begin_trace("send", count * elem_bytes(t),
                  "peer " + std::to_string(world_ranks().at(static_cast<size_t>(peer))), true);
  const float* x = static_cast<const float*>(buf);
  if (is_16bit(t)) {
    op->wide_in_ = widen(buf, count, t, true);
    x = op->wide_in_.data<float>();
  }
  op->buffer(op->wsend_, DType::kI8, codec_->max_wire_bytes(count));
  op->size_msg_ = op->encode(op->wsend_.raw(), x, count, nullptr);
  op->wire_bytes_ = op->size_msg_;
  TraceOff off_trace(tracer());
  if (!codec_->spec().fixed_size()) host().send(&op->size_msg_, 1, CommDType::kI64, peer, tag);
  op->inner_ = inner_.isend(op->wsend_.raw(), op->size_msg_, CommDType::kU8, peer, tag);
  return std::make_unique<CompressedRequest>(std::move(op));
}

CommHandle CompressedComm::irecv(void* buf, int64_t count, CommDType t, int peer, int tag) {
  if (!compresses(t)) return inner_.irecv(buf, count, t, peer, tag);
  detail::check_count(count, "irecv");
  auto op = std::make_unique<Op>(*this, tracing());
  op->begin_trace("recv", count * elem_bytes(t),
                  "peer " + std::to_string(world_ranks().at(static_cast<size_t>(peer))), true);
  op->buffer(op->wrecv_, DType::kI8, codec_->max_wire_bytes(count));
  Op* o = op.get();
  float* out = static_cast<float*>(buf);
  if (is_16bit(t)) {
    narrow_into(*op, DeviceBuffer(), widen(nullptr, count, t, false), buf, count, t);
    out = op->wide_out_.data<float>();
  }
  TraceOff off_trace(tracer());
  if (codec_->spec().fixed_size()) {
    o->size_msg_ = codec_->max_wire_bytes(count);
    op->inner_ = inner_.irecv(op->wrecv_.raw(), o->size_msg_, CommDType::kU8, peer, tag);
    op->finish_ = [o, out, count]() {
      o->wire_bytes_ = o->size_msg_;
      o->decode(out, o->wrecv_.raw(), o->size_msg_, count, false);
    };
  } else {
    // The size first (host), then the payload, received at wait().
    op->inner_ = host().irecv(&o->size_msg_, 1, CommDType::kI64, peer, tag);
    op->two_phase_ = true;
    op->finish_ = [this, o, out, count, peer, tag]() {
      inner_.recv(o->wrecv_.raw(), o->size_msg_, CommDType::kU8, peer, tag);
      o->wire_bytes_ = o->size_msg_;
      o->decode(out, o->wrecv_.raw(), o->size_msg_, count, false);
    };
  }
  return std::make_unique<CompressedRequest>(std::move(op));
}

std::unique_ptr<Communicator> CompressedComm::split(int color, int key, const std::string& axis) {
  std::unique_ptr<DeviceComm> sub = split_device_comm(inner_, color, key, axis);
  std::unique_ptr<Codec> c = codec_ ? make_codec(codec_->spec(), backend(), "compression." + axis) : nullptr;
  return std::make_unique<CompressedComm>(std::move(sub), std::move(c));
}

}  // namespace weft
