#include "parallel/pp/runtime.h"

#include <algorithm>

#include "comm/tracer.h"
#include "core/error.h"
#include "parallel/pp/partition.h"

namespace weft {

static_assert(kPipeRecvAhead >= 2, "a paired forward needs its own receive and its backward's posted");

PipelineRuntime::PipelineRuntime(Communicator& pp, Communicator& tp, Backend& be, const PipeRuntimeConfig& cfg)
    : pp_(pp), tp_(tp), be_(be), cfg_(cfg) {
  WEFT_CHECK(pp.size() == cfg.stages && pp.rank() == cfg.stage, "pipeline runtime: stage {} of {} on a pp axis of {} (rank {})",
             cfg.stage, cfg.stages, pp.size(), pp.rank());
  WEFT_CHECK(!cfg.scatter_gather || cfg.message % tp.size() == 0,
             "pipeline scatter-gather: a message of {} elements does not split over tp {}", cfg.message, tp.size());
  actions_ = stage_schedule(cfg.schedule, cfg.stages, cfg.stage, cfg.micro_batches, cfg.virtual_stages);
  paired_ = paired_forwards();
  for (int b = 0; b < kPipeRecvAhead + 1; ++b) rbuf_.emplace_back(be, cfg.message_dtype, cfg.message, MemCategory::kComm);
}

int PipelineRuntime::global(int c) const { return global_chunk(cfg_.stage, c, cfg_.stages); }

int PipelineRuntime::slots(int c) const { return std::max(1, weft::max_in_flight(actions_, c)); }

int PipelineRuntime::max_in_flight() const { return std::max(1, weft::max_in_flight(actions_)); }

int64_t PipelineRuntime::part_of(int64_t count) const { return cfg_.scatter_gather ? count / tp_.size() : count; }

View PipelineRuntime::slice_of(View buf, int64_t count) const {
  return cfg_.scatter_gather ? buf.at(tp_.rank() * part_of(count)) : buf;
}

CView PipelineRuntime::slice_of(CView buf, int64_t count) const {
  return cfg_.scatter_gather ? buf.at(tp_.rank() * part_of(count)) : buf;
}

// After a receive into slice_of(buf, count): the whole of buf, from every tp rank's slice.
void PipelineRuntime::gather_slices(View buf, int64_t count) {
  if (cfg_.scatter_gather) tp_.all_gather(slice_of(buf, count).data, buf.data, part_of(count), wire_type());
}

// Copies this rank's slice of a message into a free pooled buffer and sends it asynchronously.
void PipelineRuntime::send(CView src, int peer, int tag) {
  WEFT_CHECK(src.dtype == cfg_.message_dtype, "pipeline: a {} message where the stage sends {}", dtype_name(src.dtype),
             dtype_name(cfg_.message_dtype));
  const int64_t n = part_of(cfg_.message);
  SendBuf* sb = nullptr;
  for (SendBuf& b : send_pool_) {
    if (!b.handle || b.handle->test()) {
      b.handle.reset();
      sb = &b;
      break;
    }
  }
  if (!sb) {
    send_pool_.emplace_back();
    sb = &send_pool_.back();
    sb->data = DeviceBuffer(be_, cfg_.message_dtype, n, MemCategory::kComm);
  }
  be_.copy_device(sb->data.raw(), 0, slice_of(src, cfg_.message).data, 0, dtype_bytes(cfg_.message_dtype, n));
  sb->handle = pp_.isend(sb->data.raw(), n, wire_type(), peer, tag);
}

void PipelineRuntime::wait_sends() {
  for (SendBuf& b : send_pool_) {
    if (b.handle) b.handle->wait(), b.handle.reset();
  }
}

// The step's receives in schedule order: (peer, tag) of each action that needs one.
std::vector<PipelineRuntime::RecvSpec> PipelineRuntime::step_receives() const {
  const int K = num_chunks(), p = cfg_.stages;
  const int prev = (cfg_.stage + p - 1) % p, next = (cfg_.stage + 1) % p;
  std::vector<RecvSpec> rq;
  for (const PipeAction& a : actions_) {
    const int mb = a.micro_batch, g = global(a.chunk);
    if (a.kind == PipeAction::kForward && g > 0) rq.push_back({prev, 2 * (mb * K + g)});
    if (a.kind == PipeAction::kBackward && g < K - 1) rq.push_back({next, 2 * (mb * K + g) + 1});
  }
  return rq;
}

// Keeps up to kPipeRecvAhead receives posted, each into a free buffer (its slice under the
// scatter-gather).
void PipelineRuntime::post_more() {
  const int64_t n = part_of(cfg_.message);
  while (next_recv_ < rq_.size() && static_cast<int>(posted_.size()) < kPipeRecvAhead && !free_bufs_.empty()) {
    const int b = free_bufs_.back();
    free_bufs_.pop_back();
    const RecvSpec& r = rq_[next_recv_++];
    posted_.push_back({b, pp_.irecv(slice_of(rbuf(b), cfg_.message).data, n, wire_type(), r.peer, r.tag)});
  }
}

// The forwards of the interleaved schedule's steady (forward, backward) pairs under posting-order
// matching (see runtime.h); none otherwise.
std::vector<bool> PipelineRuntime::paired_forwards() const {
  std::vector<bool> paired(actions_.size(), false);
  if (!cfg_.posting_order_p2p || cfg_.schedule != PipeSchedule::kInterleaved) return paired;
  const int w = warmup_forwards(cfg_.schedule, cfg_.stages, cfg_.stage, cfg_.micro_batches, cfg_.virtual_stages);
  const int pairs = cfg_.micro_batches * cfg_.virtual_stages - w;
  for (int i = 0; i < pairs; ++i) paired[static_cast<size_t>(w + 2 * i)] = true;
  return paired;
}

// Before the forward actions_[i] of a pair: waits for the receive of its backward partner
// (when that one has one), which starts the held sends and both receives as one group on a
// posting-order transport. The receive stays posted; take_recv finds it complete.
void PipelineRuntime::wait_pair_receive(size_t i) {
  const PipeAction& f = actions_[i];
  const PipeAction& b = actions_[i + 1];
  if (global(b.chunk) == num_chunks() - 1) return;  // the last chunk's backward has the loss
  const size_t at = global(f.chunk) > 0 ? 1 : 0;      // the forward's own receive comes first
  WEFT_CHECK(posted_.size() > at, "pipeline stage {}: the receive of backward (micro-batch {}, chunk {}) is not posted",
             cfg_.stage, b.micro_batch, b.chunk);
  posted_[at].handle->wait();
}

int PipelineRuntime::take_recv() {
  WEFT_CHECK(!posted_.empty(), "pipeline: no receive posted for stage {}", cfg_.stage);
  Posted pr = std::move(posted_.front());
  posted_.pop_front();
  pr.handle->wait();
  gather_slices(rbuf(pr.buf), cfg_.message);
  post_more();  // keep the transfers ahead running while this one is used
  return pr.buf;
}

void PipelineRuntime::release_recv(int buf) {
  free_bufs_.push_back(buf);
  post_more();
}

PipeStepStats PipelineRuntime::run_step(const std::vector<PipeChunk*>& chunks) {
  WEFT_CHECK(static_cast<int>(chunks.size()) == cfg_.virtual_stages, "pipeline: {} chunks for {} virtual stages",
             chunks.size(), cfg_.virtual_stages);
  const int K = num_chunks(), p = cfg_.stages;
  const int prev = (cfg_.stage + p - 1) % p, next = (cfg_.stage + 1) % p;
  if (free_slots_.empty()) {  // first step: every slot free, slot 0 taken first
    free_slots_.resize(chunks.size());
    slot_of_.resize(chunks.size());
    for (size_t c = 0; c < chunks.size(); ++c) {
      for (int k = slots(static_cast<int>(c)) - 1; k >= 0; --k) free_slots_[c].push_back(k);
    }
  }
  std::vector<int> last_backward(chunks.size(), -1);
  for (size_t i = 0; i < actions_.size(); ++i) {
    if (actions_[i].kind == PipeAction::kBackward) last_backward[static_cast<size_t>(actions_[i].chunk)] = static_cast<int>(i);
  }
  PipeStepStats st;
  const double t0 = Tracer::now();
  int in_flight = 0;
  rq_ = step_receives();
  next_recv_ = 0;
  free_bufs_.clear();
  for (int b = kPipeRecvAhead; b >= 0; --b) free_bufs_.push_back(b);
  post_more();
  for (size_t i = 0; i < actions_.size(); ++i) {
    const PipeAction& a = actions_[i];
    const size_t c = static_cast<size_t>(a.chunk);
    PipeChunk& ch = *chunks[c];
    const int mb = a.micro_batch, g = global(a.chunk);
    const bool forward = a.kind == PipeAction::kForward;
    ch.prepare(a, static_cast<int>(i) == last_backward[c]);
    int slot;
    if (forward) {
      WEFT_CHECK(!free_slots_[c].empty(), "pipeline chunk {}: no free activation slot", g);
      slot = free_slots_[c].back();
      free_slots_[c].pop_back();
      slot_of_[c][mb] = slot;
      st.in_flight_peak = std::max(st.in_flight_peak, ++in_flight);
    } else {
      slot = slot_of_[c].at(mb);
    }
    const double w0 = Tracer::now();
    if (paired_[i]) wait_pair_receive(i);
    const bool receives = forward ? g > 0 : g < K - 1;
    const int rb = receives ? take_recv() : -1;
    const CView x = rb >= 0 ? CView(rbuf(rb)) : CView();
    const double c0 = Tracer::now();
    st.wait_s += c0 - w0;
    if (forward) {
      ch.forward(slot, mb, x);
    } else {
      st.loss_sum += ch.backward(slot, mb, x, static_cast<int>(i) == last_backward[c]);
    }
    st.busy_s += Tracer::now() - c0;
    if (rb >= 0) release_recv(rb);
    if (forward && g < K - 1) send(ch.output(slot), next, 2 * (mb * K + g + 1));
    if (!forward) {
      if (g > 0) send(ch.input_grad(), prev, 2 * (mb * K + g - 1) + 1);
      slot_of_[c].erase(mb);
      free_slots_[c].push_back(slot);
      --in_flight;
    }
    pp_.progress();
  }
  wait_sends();
  st.span_s = Tracer::now() - t0;
  return st;
}

void PipelineRuntime::forward_only(int64_t count, const std::function<CView(int c, CView x)>& forward) {
  WEFT_CHECK(!cfg_.scatter_gather || count % tp_.size() == 0, "pipeline: a message of {} elements over tp {}", count,
             tp_.size());
  // A longer message than training's (generation at the full context): a larger buffer.
  if (count > rbuf_[0].count()) {
    rbuf_[0] = DeviceBuffer();
    rbuf_[0] = DeviceBuffer(be_, cfg_.message_dtype, count, MemCategory::kComm);
  }
  const int K = num_chunks(), p = cfg_.stages;
  const int prev = (cfg_.stage + p - 1) % p, next = (cfg_.stage + 1) % p;
  for (int c = 0; c < cfg_.virtual_stages; ++c) {
    const int g = global(c);
    const View x = rbuf(0);
    if (g > 0) {
      pp_.recv(slice_of(x, count).data, part_of(count), wire_type(), prev, 0);
      gather_slices(x, count);
    }
    const CView y = forward(c, g > 0 ? CView(x) : CView());
    WEFT_CHECK(g == K - 1 || y.dtype == cfg_.message_dtype, "pipeline: a {} message where the stage sends {}",
               dtype_name(y.dtype), dtype_name(cfg_.message_dtype));
    if (g < K - 1) pp_.send(slice_of(y, count).data, part_of(count), wire_type(), next, 0);
  }
}

}  // namespace weft
