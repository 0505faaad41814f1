#include "comm/nccl/nccl_comm.h"

#include "comm/nccl/nccl_api.h"
#include <sched.h>
#include <unistd.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <chrono>
#include <exception>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "backend/device_buffer.h"
#include "comm/comm_detail.h"
#include "comm/device_comm_registry.h"
#include "comm/p2p_queue.h"
#include "comm/tracer.h"
#include "core/error.h"
#include "core/log.h"

namespace weft {

namespace {

using detail::CallTrace;
using Clock = std::chrono::steady_clock;

[[noreturn]] void throw_nccl(const char* call, const char* file, int line, ncclResult_t r, ncclComm_t comm) {
  std::string what = fmt::format("{} ({})", ncclGetErrorString(r), static_cast<int>(r));
  const char* last = comm != nullptr ? ncclGetLastError(comm) : ncclGetLastError(nullptr);
  if (last != nullptr && *last != '\0') what += fmt::format(": {}", last);
  gpu::throw_gpu_error("NCCL", call, file, line, what);
}

// NCCL calls on a non-blocking communicator may answer ncclInProgress: not an error.
#define WEFT_NCCL_CHECK(comm, call)                                          \
  do {                                                                       \
    const ncclResult_t weft_r_ = (call);                                     \
    if (weft_r_ != ncclSuccess && weft_r_ != ncclInProgress)                 \
      throw_nccl(#call, __FILE__, __LINE__, weft_r_, (comm));                \
  } while (0)

ncclDataType_t to_nccl(CommDType t) {
  switch (t) {
    case CommDType::kF32: return ncclFloat32;
    case CommDType::kF64: return ncclFloat64;
    case CommDType::kI32: return ncclInt32;
    case CommDType::kI64: return ncclInt64;
    case CommDType::kU8: return ncclUint8;
    case CommDType::kBF16: return ncclBfloat16;
    case CommDType::kF16: return ncclFloat16;
  }
  throw_runtime("unknown CommDType {}", static_cast<int>(t));
}

ncclRedOp_t to_nccl(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
  }
  throw_runtime("unknown ReduceOp {}", static_cast<int>(op));
}

int64_t nbytes(int64_t count, CommDType t) { return count * static_cast<int64_t>(comm_dtype_size(t)); }

// Sleeps with the MPI communicator's back-off: spin ~50 us, yield until ~2 ms, then sleep
// from 20 us growing to 1 ms.
struct Backoff {
  long sleep_ns = 20000;
  void pause(Clock::duration elapsed) {
    if (elapsed < std::chrono::microseconds(50)) return;
    if (elapsed < std::chrono::milliseconds(2)) {
      sched_yield();
      return;
    }
    timespec ts{0, sleep_ns};
    nanosleep(&ts, nullptr);
    sleep_ns = std::min(2 * sleep_ns, 1000000L);
  }
};

struct PendingOp {
  gpu::Event done = nullptr;  // recorded on the communication stream after the operation
  CallTrace trace;
  const char* kind = "";
  int64_t bytes = 0;
  int peer_world = -1;
  bool complete = false;
  bool timed_out = false;
  DeviceBuffer staging;  // temporary of an in-place reduce-scatter (bytes, `comm`)
  // Point-to-point: posted but not started until waited for (comm/p2p_queue.h). `start`
  // enqueues its ncclSend/ncclRecv inside the group that starts it.
  bool started = true;
  uint64_t p2p_id = 0;
  std::function<void()> start;
  ~PendingOp() { gpu::event_destroy(done); }
};

struct NcclContext {
  ncclComm_t comm = nullptr;  // null for a group of one rank
  gpu::Stream stream = nullptr;
  gpu::Stream compute = nullptr;
  gpu::Event compute_ready = nullptr;
  std::string axis;
  std::vector<int> world_ranks;
  std::string group;
  int rank = 0, size = 1, world_rank = 0;
  std::chrono::milliseconds timeout{300000};
  Tracer* tracer = nullptr;
  bool aborted = false;
  DeviceBuffer barrier_buf;  // one zero float (`comm`), allocated by the first barrier
  // Point-to-point operations posted and not started yet (comm/p2p_queue.h).
  P2pQueue p2p;
  std::map<uint64_t, PendingOp*> unstarted;

  ~NcclContext() {
    if (comm != nullptr) {
      if (aborted || std::uncaught_exceptions() > 0) {
        if (!aborted) ncclCommAbort(comm);
      } else {
        // Flush and free; a communicator that does not finalise within the timeout is aborted.
        ncclResult_t r = ncclCommFinalize(comm);
        const Clock::time_point t0 = Clock::now();
        Backoff backoff;
        while (r == ncclInProgress || r == ncclSuccess) {
          ncclResult_t state = ncclInProgress;
          if (ncclCommGetAsyncError(comm, &state) != ncclSuccess || state != ncclInProgress) {
            r = state;
            break;
          }
          if (timeout.count() > 0 && Clock::now() - t0 > timeout) break;
          backoff.pause(Clock::now() - t0);
        }
        if (r == ncclSuccess) {
          ncclCommDestroy(comm);
        } else {
          log_warn("weft: rank {}: NCCL communicator of axis {} did not finalise ({}); aborting it", world_rank, axis,
                   ncclGetErrorString(r));
          ncclCommAbort(comm);
        }
      }
    }
    gpu::event_destroy(compute_ready);
    gpu::stream_destroy(stream);
  }

  std::string describe(const PendingOp& op) const {
    const std::string what =
        op.peer_world >= 0
            ? fmt::format("{} of {} {} world rank {}", op.kind, format_bytes(op.bytes),
                          std::string(op.kind) == "send" ? "to" : "from", op.peer_world)
            : fmt::format("{} of {}", op.kind, format_bytes(op.bytes));
    return fmt::format("{} on axis {} ({})", what, axis, group);
  }

  void check_usable(const char* kind) const {
    if (aborted) {
      throw_runtime("weft: rank {}: {} on axis {} ({}): the NCCL communicator was aborted after an earlier error",
                    world_rank, kind, axis, group);
    }
  }

  // Throws on an asynchronous NCCL error; returns the state (ncclSuccess or ncclInProgress).
  ncclResult_t async_state(const std::string& what) {
    if (comm == nullptr) return ncclSuccess;
    ncclResult_t state = ncclSuccess;
    WEFT_NCCL_CHECK(comm, ncclCommGetAsyncError(comm, &state));
    if (state != ncclSuccess && state != ncclInProgress) {
      const char* last = ncclGetLastError(comm);
      ncclCommAbort(comm);
      aborted = true;
      throw_runtime("weft: rank {}: {} failed: NCCL {}{}{} (NCCL communicator aborted)", world_rank, what,
                    ncclGetErrorString(state), last && *last ? ": " : "", last ? last : "");
    }
    return state;
  }

  [[noreturn]] void time_out(const std::string& what) {
    if (comm != nullptr) ncclCommAbort(comm);
    aborted = true;
    throw CommTimeout(fmt::format(
        "weft: rank {}: {} did not complete within {:.1f} s: a peer rank is dead or stalled (NCCL communicator aborted)",
        world_rank, what, static_cast<double>(timeout.count()) / 1000.0));
  }

  // Waits until a non-blocking NCCL call has been taken in (the communicator leaves
  // ncclInProgress), with the timeout.
  void settle(const std::string& what) {
    if (comm == nullptr) return;
    const Clock::time_point t0 = Clock::now();
    Backoff backoff;
    while (async_state(what) == ncclInProgress) {
      const Clock::duration elapsed = Clock::now() - t0;
      if (timeout.count() > 0 && elapsed >= timeout) time_out(what);
      backoff.pause(elapsed);
    }
  }

  // Orders the communication stream after the compute stream's work so far.
  void after_compute() {
    if (compute == nullptr) return;
    if (compute_ready == nullptr) compute_ready = gpu::event_create();
    gpu::event_record(compute_ready, compute);
    gpu::stream_wait_event(stream, compute_ready);
  }

  void finish(PendingOp& op) {
    op.complete = true;
    op.trace.finish();
    op.staging = DeviceBuffer();
  }

  // Starts, as one NCCL group, the point-to-point operations `ids` (those still held: a handle
  // dropped after an error is forgotten), after the compute stream's work so far; each
  // completes with the group. `what` names the operation waited for (for errors).
  void start_group(const std::vector<uint64_t>& ids, const std::string& what) {
    std::vector<PendingOp*> ops;
    for (uint64_t id : ids) {
      const auto it = unstarted.find(id);
      if (it == unstarted.end()) continue;
      ops.push_back(it->second);
      unstarted.erase(it);
    }
    if (ops.empty()) return;
    after_compute();
    WEFT_NCCL_CHECK(comm, ncclGroupStart());
    for (PendingOp* op : ops) op->start();
    WEFT_NCCL_CHECK(comm, ncclGroupEnd());
    settle(what);
    for (PendingOp* op : ops) {
      op->started = true;
      op->start = nullptr;
      gpu::event_record(op->done, stream);
    }
  }

  // A collective keeps its place after the point-to-point operations posted before it.
  void start_pending_p2p(const char* kind) {
    if (!p2p.empty()) start_group(p2p.start_all(), fmt::format("point-to-point operations before a {}", kind));
  }

  // Drops a point-to-point operation that will never start (its handle is destroyed after an
  // error).
  void forget(PendingOp& op) {
    if (!op.started) unstarted.erase(op.p2p_id);
  }

  // test() does not start a held point-to-point operation: only wait() does (p2p_queue.h).
  bool test(PendingOp& op) {
    if (op.complete) return true;
    check_usable(op.kind);
    if (!op.started) return false;
    if (gpu::event_query(op.done)) {
      finish(op);
      return true;
    }
    async_state(describe(op));
    return false;
  }

  void wait(PendingOp& op) {
    if (op.complete) return;
    check_usable(op.kind);
    if (!op.started) start_group(p2p.start_for(op.p2p_id), describe(op));
    const Clock::time_point t0 = Clock::now();
    Backoff backoff;
    for (;;) {
      if (test(op)) return;
      const Clock::duration elapsed = Clock::now() - t0;
      if (timeout.count() > 0 && elapsed >= timeout) {
        op.timed_out = true;
        time_out(describe(op));
      }
      backoff.pause(elapsed);
    }
  }
};

class NcclRequest : public CommRequest {
 public:
  NcclRequest(std::shared_ptr<NcclContext> ctx, std::unique_ptr<PendingOp> op)
      : ctx_(std::move(ctx)), op_(std::move(op)) {}
  ~NcclRequest() override {
    if (op_->complete || op_->timed_out || ctx_->aborted || std::uncaught_exceptions() > 0) {
      ctx_->forget(*op_);
      return;
    }
    try {
      ctx_->wait(*op_);
    } catch (const std::exception& e) {
      log_warn("{} (while destroying its handle)", e.what());
      ctx_->forget(*op_);
    }
  }
  void wait() override { ctx_->wait(*op_); }
  bool test() override { return ctx_->test(*op_); }

 private:
  std::shared_ptr<NcclContext> ctx_;
  std::unique_ptr<PendingOp> op_;
};

class NcclCommunicatorImpl final : public NcclCommunicator {
 public:
  NcclCommunicatorImpl(std::shared_ptr<NcclContext> ctx, Communicator* host, std::unique_ptr<Communicator> owned_host,
                       cuda::CudaBackend& be)
      : owned_host_(std::move(owned_host)), host_(host), be_(be), ctx_(std::move(ctx)) {}

  Communicator& host() const override { return *host_; }
  Backend& backend() const override { return be_; }

  int rank() const override { return ctx_->rank; }
  int size() const override { return ctx_->size; }
  const std::string& axis() const override { return ctx_->axis; }
  const std::vector<int>& world_ranks() const override { return ctx_->world_ranks; }
  gpu::Stream stream() const override { return ctx_->stream; }
  void set_compute_stream(gpu::Stream s) override { ctx_->compute = s; }

  // --- blocking: the asynchronous form plus wait() ---
  void all_reduce(void* buf, int64_t count, CommDType t, ReduceOp op) override {
    NcclRequest(ctx_, post_all_reduce(buf, count, t, op, false)).wait();
  }
  void reduce_scatter(const void* send, void* recv, int64_t count, CommDType t, ReduceOp op) override {
    detail::check_count(count, "reduce_scatter");
    std::vector<int64_t> counts(static_cast<size_t>(ctx_->size), count);
    NcclRequest(ctx_, post_reduce_scatter(send, recv, counts, t, op, false, true)).wait();
  }
  void reduce_scatter_v(const void* send, void* recv, const std::vector<int64_t>& counts, CommDType t,
                        ReduceOp op) override {
    NcclRequest(ctx_, post_reduce_scatter(send, recv, counts, t, op, false, false)).wait();
  }
  void all_gather(const void* send, void* recv, int64_t count, CommDType t) override {
    detail::check_count(count, "all_gather");
    std::vector<int64_t> counts(static_cast<size_t>(ctx_->size), count);
    NcclRequest(ctx_, post_all_gather(send, recv, counts, t, false, true)).wait();
  }
  void all_gather_v(const void* send, void* recv, const std::vector<int64_t>& counts, CommDType t) override {
    NcclRequest(ctx_, post_all_gather(send, recv, counts, t, false, false)).wait();
  }
  void broadcast(void* buf, int64_t count, CommDType t, int root) override {
    NcclRequest(ctx_, post_broadcast(buf, count, t, root)).wait();
  }
  void send(const void* buf, int64_t count, CommDType t, int peer, int tag) override {
    NcclRequest(ctx_, post_p2p(true, const_cast<void*>(buf), count, t, peer, false)).wait();
  }
  void recv(void* buf, int64_t count, CommDType t, int peer, int tag) override {
    NcclRequest(ctx_, post_p2p(false, buf, count, t, peer, false)).wait();
  }
  void all_to_all_v(const void* send, void* recv, const std::vector<int64_t>& counts, CommDType t) override {
    NcclRequest(ctx_, post_all_to_all_v(send, recv, counts, t, false)).wait();
  }
  void barrier() override {
    if (ctx_->size > 1 && !ctx_->barrier_buf) {
      ctx_->barrier_buf = DeviceBuffer(be_, DType::kF32, 1, MemCategory::kComm);
      ctx_->barrier_buf.zero();
    }
    auto p = make_op("barrier", 0, false);
    if (ctx_->size > 1) {
      enqueue(*p, [&] {
        WEFT_NCCL_CHECK(ctx_->comm, ncclAllReduce(ctx_->barrier_buf.raw(), ctx_->barrier_buf.raw(), 1, ncclFloat32,
                                                  ncclSum, ctx_->comm, ctx_->stream));
      });
    } else {
      record_done(*p);
    }
    NcclRequest(ctx_, std::move(p)).wait();
  }

  // --- asynchronous ---
  CommHandle iall_reduce(void* buf, int64_t count, CommDType t, ReduceOp op) override {
    return std::make_unique<NcclRequest>(ctx_, post_all_reduce(buf, count, t, op, true));
  }
  CommHandle ireduce_scatter_v(const void* send, void* recv, const std::vector<int64_t>& counts, CommDType t,
                               ReduceOp op) override {
    return std::make_unique<NcclRequest>(ctx_, post_reduce_scatter(send, recv, counts, t, op, true, false));
  }
  CommHandle iall_gather_v(const void* send, void* recv, const std::vector<int64_t>& counts, CommDType t) override {
    return std::make_unique<NcclRequest>(ctx_, post_all_gather(send, recv, counts, t, true, false));
  }
  CommHandle iall_to_all_v(const void* send, void* recv, const std::vector<int64_t>& counts, CommDType t) override {
    return std::make_unique<NcclRequest>(ctx_, post_all_to_all_v(send, recv, counts, t, true));
  }
  CommHandle isend(const void* buf, int64_t count, CommDType t, int peer, int tag) override {
    return std::make_unique<NcclRequest>(ctx_, post_p2p(true, const_cast<void*>(buf), count, t, peer, true));
  }
  CommHandle irecv(void* buf, int64_t count, CommDType t, int peer, int tag) override {
    return std::make_unique<NcclRequest>(ctx_, post_p2p(false, buf, count, t, peer, true));
  }

  // NCCL progresses on its own; this surfaces asynchronous errors early.
  void progress() override {
    if (!ctx_->aborted) ctx_->async_state(fmt::format("progress on axis {} ({})", ctx_->axis, ctx_->group));
  }

  std::unique_ptr<Communicator> split(int color, int key, const std::string& axis) override {
    WEFT_CHECK(color >= 0, "split: color {} must be non-negative", color);
    ctx_->check_usable("split");
    std::unique_ptr<Communicator> sub_host = host_->split(color, key, axis);
    auto child = std::make_shared<NcclContext>();
    init_context(*child, *sub_host, axis);
    if (ctx_->comm != nullptr) {
      // Collective over this communicator: every member calls it, whatever its color.
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      config.blocking = 0;
      ncclComm_t sub = nullptr;
      WEFT_NCCL_CHECK(ctx_->comm, ncclCommSplit(ctx_->comm, color, key, &sub, &config));
      ctx_->settle(fmt::format("ncclCommSplit of axis {} into axis {}", ctx_->axis, axis));
      child->comm = sub;
      child->settle(fmt::format("initialisation of the NCCL communicator of axis {}", axis));
      int n = 0;
      WEFT_NCCL_CHECK(sub, ncclCommCount(sub, &n));
      WEFT_CHECK(n == child->size, "ncclCommSplit gave {} ranks for axis {}, the host group has {}", n, axis,
                 child->size);
      if (child->size == 1) {
        // Groups of one make no NCCL call: free it now.
        ncclCommDestroy(sub);
        child->comm = nullptr;
      }
    }
    child->timeout = ctx_->timeout;
    child->tracer = ctx_->tracer;
    child->compute = ctx_->compute;
    Communicator* h = sub_host.get();
    return std::make_unique<NcclCommunicatorImpl>(std::move(child), h, std::move(sub_host), be_);
  }

  void set_timeout(std::chrono::milliseconds t) override { ctx_->timeout = t; }
  std::chrono::milliseconds timeout() const override { return ctx_->timeout; }
  void set_tracer(Tracer* tracer) override { ctx_->tracer = tracer; }
  Tracer* tracer() const override { return ctx_->tracer; }

  static void init_context(NcclContext& c, Communicator& host, const std::string& axis) {
    c.axis = axis.empty() ? host.axis() : axis;
    c.rank = host.rank();
    c.size = host.size();
    c.world_ranks = host.world_ranks();
    c.world_rank = c.world_ranks.empty() ? 0 : c.world_ranks[static_cast<size_t>(c.rank)];
    c.group = detail::group_label(c.world_ranks);
    c.timeout = host.timeout();
    c.tracer = host.tracer();
    c.stream = gpu::stream_create();
  }

 private:
  std::unique_ptr<PendingOp> make_op(const char* kind, int64_t bytes, bool async, int peer_world = -1) {
    ctx_->check_usable(kind);
    auto op = std::make_unique<PendingOp>();
    op->kind = kind;
    op->bytes = bytes;
    op->peer_world = peer_world;
    op->done = gpu::event_create();
    if (ctx_->tracer != nullptr && ctx_->tracer->enabled()) {
      op->trace.begin(ctx_->tracer, kind, ctx_->axis, bytes,
                      peer_world >= 0 ? fmt::format("peer {}", peer_world) : ctx_->group, async);
    }
    return op;
  }

  void record_done(PendingOp& op) { gpu::event_record(op.done, ctx_->stream); }

  // Enqueues NCCL calls (f) after the compute stream's work, waits until NCCL has taken them
  // in, and records the completion event.
  template <typename F>
  void enqueue(PendingOp& op, F&& f) {
    ctx_->start_pending_p2p(op.kind);
    ctx_->after_compute();
    f();
    ctx_->settle(ctx_->describe(op));
    record_done(op);
  }

  // A device copy on the communication stream (groups of one rank).
  void local_copy(PendingOp& op, void* dst, const void* src, int64_t bytes) {
    ctx_->after_compute();
    if (bytes > 0 && dst != src) gpu::copy_d2d_async(dst, src, static_cast<size_t>(bytes), ctx_->stream);
    record_done(op);
  }

  std::unique_ptr<PendingOp> post_all_reduce(void* buf, int64_t count, CommDType t, ReduceOp op, bool async) {
    detail::check_count(count, "all_reduce");
    auto p = make_op("all_reduce", nbytes(count, t), async);
    if (ctx_->size > 1 && count > 0) {
      enqueue(*p, [&] {
        WEFT_NCCL_CHECK(ctx_->comm, ncclAllReduce(buf, buf, static_cast<size_t>(count), to_nccl(t), to_nccl(op),
                                                  ctx_->comm, ctx_->stream));
      });
    } else {
      record_done(*p);
    }
    return p;
  }

  std::unique_ptr<PendingOp> post_reduce_scatter(const void* send, void* recv, const std::vector<int64_t>& counts,
                                                 CommDType t, ReduceOp op, bool async, bool even) {
    const int64_t total = detail::checked_total(counts, ctx_->size, even ? "reduce_scatter" : "reduce_scatter_v");
    auto p = make_op("reduce_scatter", nbytes(total, t), async);
    const size_t r = static_cast<size_t>(ctx_->rank);
    if (ctx_->size == 1) {
      local_copy(*p, recv, send, nbytes(total, t));
      return p;
    }
    int64_t my_off = 0;
    for (size_t i = 0; i < r; ++i) my_off += counts[i];
    const size_t esize = comm_dtype_size(t);
    const char* sbase = static_cast<const char*>(send);
    // In place with this rank's block not first: NCCL would write it over a block still
    // being read, so it lands in a temporary and is copied to the start of recv afterwards.
    void* out = recv;
    if (send == recv && my_off != 0 && counts[r] > 0) {
      p->staging = DeviceBuffer(be_, DType::kI8, counts[r] * static_cast<int64_t>(esize), MemCategory::kComm);
      out = p->staging.raw();
    }
    enqueue(*p, [&] {
      if (even) {
        const size_t n = static_cast<size_t>(counts[0]);
        // In place on rank 0, recv == send is NCCL's in-place form (recv == send + rank * count).
        WEFT_NCCL_CHECK(ctx_->comm,
                        ncclReduceScatter(send, out, n, to_nccl(t), to_nccl(op), ctx_->comm, ctx_->stream));
      } else {
        WEFT_NCCL_CHECK(ctx_->comm, ncclGroupStart());
        int64_t off = 0;
        for (int i = 0; i < ctx_->size; ++i) {
          const size_t n = static_cast<size_t>(counts[static_cast<size_t>(i)]);
          const void* sb = sbase + off * static_cast<int64_t>(esize);
          void* rb = i == ctx_->rank ? out : const_cast<void*>(sb);  // only the root's recvbuff is written
          WEFT_NCCL_CHECK(ctx_->comm, ncclReduce(sb, rb, n, to_nccl(t), to_nccl(op), i, ctx_->comm, ctx_->stream));
          off += counts[static_cast<size_t>(i)];
        }
        WEFT_NCCL_CHECK(ctx_->comm, ncclGroupEnd());
      }
      if (out != recv) {
        gpu::copy_d2d_async(recv, out, static_cast<size_t>(counts[r]) * esize, ctx_->stream);
      }
    });
    return p;
  }

  std::unique_ptr<PendingOp> post_all_gather(const void* send, void* recv, const std::vector<int64_t>& counts,
                                             CommDType t, bool async, bool even) {
    const int64_t total = detail::checked_total(counts, ctx_->size, even ? "all_gather" : "all_gather_v");
    auto p = make_op("all_gather", nbytes(total, t), async);
    if (ctx_->size == 1) {
      local_copy(*p, recv, send, nbytes(total, t));
      return p;
    }
    const size_t esize = comm_dtype_size(t);
    char* rbase = static_cast<char*>(recv);
    enqueue(*p, [&] {
      if (even) {
        // send == recv + rank * count is NCCL's in-place form, as weft's contract allows.
        WEFT_NCCL_CHECK(ctx_->comm, ncclAllGather(send, recv, static_cast<size_t>(counts[0]), to_nccl(t), ctx_->comm,
                                                  ctx_->stream));
      } else {
        WEFT_NCCL_CHECK(ctx_->comm, ncclGroupStart());
        int64_t off = 0;
        for (int i = 0; i < ctx_->size; ++i) {
          const size_t n = static_cast<size_t>(counts[static_cast<size_t>(i)]);
          void* rb = rbase + off * static_cast<int64_t>(esize);
          const void* sb = i == ctx_->rank ? send : rb;
          WEFT_NCCL_CHECK(ctx_->comm, ncclBroadcast(sb, rb, n, to_nccl(t), i, ctx_->comm, ctx_->stream));
          off += counts[static_cast<size_t>(i)];
        }
        WEFT_NCCL_CHECK(ctx_->comm, ncclGroupEnd());
      }
    });
    return p;
  }

  // One ncclSend and one ncclRecv per peer with a non-empty block, in one NCCL group; this
  // rank's own block (the diagonal) is a device copy on the communication stream.
  std::unique_ptr<PendingOp> post_all_to_all_v(const void* send, void* recv, const std::vector<int64_t>& counts,
                                               CommDType t, bool async) {
    const detail::AllToAllCounts m = detail::checked_matrix(counts, ctx_->size, ctx_->rank, "all_to_all_v");
    auto p = make_op("all_to_all", nbytes(m.total, t), async);
    if (ctx_->size == 1) {
      local_copy(*p, recv, send, nbytes(m.total, t));
      return p;
    }
    const size_t n = static_cast<size_t>(ctx_->size), r = static_cast<size_t>(ctx_->rank);
    const int64_t esize = static_cast<int64_t>(comm_dtype_size(t));
    const char* sbase = static_cast<const char*>(send);
    char* rbase = static_cast<char*>(recv);
    enqueue(*p, [&] {
      WEFT_NCCL_CHECK(ctx_->comm, ncclGroupStart());
      int64_t soff = 0, roff = 0, own_s = 0, own_r = 0;
      for (size_t q = 0; q < n; ++q) {
        const int64_t ns = counts[r * n + q], nr = counts[q * n + r];
        const int peer = static_cast<int>(q);
        if (q == r) {
          own_s = soff, own_r = roff;
        } else {
          if (ns > 0) {
            WEFT_NCCL_CHECK(ctx_->comm, ncclSend(sbase + soff * esize, static_cast<size_t>(ns), to_nccl(t), peer,
                                                 ctx_->comm, ctx_->stream));
          }
          if (nr > 0) {
            WEFT_NCCL_CHECK(ctx_->comm, ncclRecv(rbase + roff * esize, static_cast<size_t>(nr), to_nccl(t), peer,
                                                 ctx_->comm, ctx_->stream));
          }
        }
        soff += ns;
        roff += nr;
      }
      WEFT_NCCL_CHECK(ctx_->comm, ncclGroupEnd());
      const int64_t own = counts[r * n + r];
      if (own > 0) {
        gpu::copy_d2d_async(rbase + own_r * esize, sbase + own_s * esize, static_cast<size_t>(own * esize), ctx_->stream);
      }
    });
    return p;
  }

  std::unique_ptr<PendingOp> post_broadcast(void* buf, int64_t count, CommDType t, int root) {
    WEFT_CHECK(root >= 0 && root < ctx_->size, "broadcast: root {} outside the group of {} ranks on axis {}", root,
               ctx_->size, ctx_->axis);
    detail::check_count(count, "broadcast");
    auto p = make_op("broadcast", nbytes(count, t), false);
    if (ctx_->size > 1 && count > 0) {
      enqueue(*p, [&] {
        WEFT_NCCL_CHECK(ctx_->comm, ncclBroadcast(buf, buf, static_cast<size_t>(count), to_nccl(t), root, ctx_->comm,
                                                  ctx_->stream));
      });
    } else {
      record_done(*p);
    }
    return p;
  }

  std::unique_ptr<PendingOp> post_p2p(bool is_send, void* buf, int64_t count, CommDType t, int peer, bool async) {
    const char* kind = is_send ? "send" : "recv";
    WEFT_CHECK(peer >= 0 && peer < ctx_->size, "{}: peer {} outside the group of {} ranks on axis {}", kind, peer,
               ctx_->size, ctx_->axis);
    WEFT_CHECK(peer != ctx_->rank, "{}: rank {} to itself on axis {}: not supported by the NCCL communicator", kind,
               peer, ctx_->axis);
    detail::check_count(count, kind);
    auto p = make_op(kind, nbytes(count, t), async, ctx_->world_ranks[static_cast<size_t>(peer)]);
    // Held until waited for (comm/p2p_queue.h): NCCL matches by posting order and a started
    // receive blocks the stream, so it starts inside the group that waiting forms.
    const size_t n = static_cast<size_t>(count);
    const ncclDataType_t dt = to_nccl(t);
    NcclContext* ctx = ctx_.get();
    p->start = [ctx, is_send, buf, n, dt, peer] {
      if (is_send) {
        WEFT_NCCL_CHECK(ctx->comm, ncclSend(buf, n, dt, peer, ctx->comm, ctx->stream));
      } else {
        WEFT_NCCL_CHECK(ctx->comm, ncclRecv(buf, n, dt, peer, ctx->comm, ctx->stream));
      }
    };
    p->started = false;
    p->p2p_id = ctx_->p2p.post(is_send);
    ctx_->unstarted[p->p2p_id] = p.get();
    return p;
  }

  // Declared before ctx_: the host group outlives the NCCL communicator built on it.
  std::unique_ptr<Communicator> owned_host_;
  Communicator* host_;
  cuda::CudaBackend& be_;
  std::shared_ptr<NcclContext> ctx_;
};

// NCCL refuses two ranks of one communicator on one device ("Duplicate GPU detected"): say so
// with the ranks and the way out before NCCL is asked. Collective over host.
void check_one_gpu_per_rank(Communicator& host, const std::string& axis) {
  struct Where {
    char node[64];
    char bus[32];
  };
  Where me{};
  gethostname(me.node, sizeof(me.node) - 1);
  const std::string bus = gpu::device_pci_bus_id(gpu::current_device());
  std::snprintf(me.bus, sizeof(me.bus), "%s", bus.c_str());
  std::vector<Where> all(static_cast<size_t>(host.size()));
  host.all_gather(&me, all.data(), static_cast<int64_t>(sizeof(Where)), CommDType::kU8);
  const std::vector<int>& world = host.world_ranks();
  for (size_t i = 0; i < all.size(); ++i) {
    for (size_t j = i + 1; j < all.size(); ++j) {
      if (all[i].bus[0] == '\0' || std::string(all[i].node) != all[j].node || std::string(all[i].bus) != all[j].bus)
        continue;
      throw_input("communicator 'nccl' (axis {}): ranks {} and {} share GPU {} on {}, and NCCL needs one GPU per rank; "
                  "launch at most one rank per GPU, or use --comm mpi (host-staged) to share a GPU",
                  axis, world.empty() ? static_cast<int>(i) : world[i], world.empty() ? static_cast<int>(j) : world[j],
                  all[i].bus, all[i].node);
    }
  }
}

}  // namespace

std::unique_ptr<NcclCommunicator> make_nccl_communicator(Communicator& host, cuda::CudaBackend& be,
                                                         const std::string& axis) {
  auto ctx = std::make_shared<NcclContext>();
  NcclCommunicatorImpl::init_context(*ctx, host, axis);
  ctx->compute = be.stream();
  if (ctx->size > 1) {
    check_one_gpu_per_rank(host, ctx->axis);
    ncclUniqueId id{};
    if (host.rank() == 0) WEFT_NCCL_CHECK(nullptr, ncclGetUniqueId(&id));
    host.broadcast(&id, static_cast<int64_t>(sizeof(id)), CommDType::kU8, 0);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    WEFT_NCCL_CHECK(nullptr, ncclCommInitRankConfig(&ctx->comm, ctx->size, id, ctx->rank, &config));
    ctx->settle(fmt::format("initialisation of the NCCL communicator of axis {} ({})", ctx->axis, ctx->group));
  }
  return std::make_unique<NcclCommunicatorImpl>(std::move(ctx), &host, nullptr, be);
}

void register_nccl_device_comm() {
  DeviceCommInfo info;
  info.backends = {"cuda"};
  info.preferred = true;
  info.posting_order_p2p = true;
  register_device_comm("nccl", info, [](Communicator& host, Backend& be) -> std::unique_ptr<DeviceComm> {
    auto* cuda_be = dynamic_cast<cuda::CudaBackend*>(&be);
    if (cuda_be == nullptr) throw_input("communicator 'nccl' needs the cuda backend, not '{}'", be.name());
    return make_nccl_communicator(host, *cuda_be);
  });
}

}  // namespace weft
