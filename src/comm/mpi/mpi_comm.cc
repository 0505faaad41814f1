#include "comm/mpi/mpi_comm.h"

#include <mpi.h>
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "comm/comm_detail.h"
#include "core/dtype.h"
#include "core/log.h"
#include "core/memory.h"

namespace weft {

namespace {

using detail::CallTrace;
using Clock = std::chrono::steady_clock;

// --- 16-bit floats: MPI has neither type. Each travels as a 2-byte contiguous type, and each
// ReduceOp has its own MPI operation that widens to fp32, combines and rounds back to nearest
// even (bf16 through core/dtype.h's conversions, binary16 through the compiler's _Float16). ---

struct Float16Types {
  MPI_Datatype bf16 = MPI_DATATYPE_NULL, f16 = MPI_DATATYPE_NULL;
  MPI_Op sum = MPI_OP_NULL, max = MPI_OP_NULL, min = MPI_OP_NULL;
};
const Float16Types& float16_types();

template <typename Combine>
void combine_float16(void* in, void* inout, int n, MPI_Datatype t, Combine f) {
  if (t == float16_types().bf16) {
    const bf16* a = static_cast<const bf16*>(in);
    bf16* b = static_cast<bf16*>(inout);
    for (int i = 0; i < n; ++i) b[i] = float_to_bf16(f(bf16_to_float(a[i]), bf16_to_float(b[i])));
  } else {
    const _Float16* a = static_cast<const _Float16*>(in);
    _Float16* b = static_cast<_Float16*>(inout);
    for (int i = 0; i < n; ++i) {
      b[i] = static_cast<_Float16>(f(static_cast<float>(a[i]), static_cast<float>(b[i])));
    }
  }
}

void float16_sum(void* in, void* inout, int* n, MPI_Datatype* t) {
  combine_float16(in, inout, *n, *t, [](float a, float b) { return a + b; });
}
void float16_max(void* in, void* inout, int* n, MPI_Datatype* t) {
  combine_float16(in, inout, *n, *t, [](float a, float b) { return std::max(a, b); });
}
void float16_min(void* in, void* inout, int* n, MPI_Datatype* t) {
  combine_float16(in, inout, *n, *t, [](float a, float b) { return std::min(a, b); });
}

// Created on first use (after MPI_Init); MPI_Finalize frees them.
const Float16Types& float16_types() {
  static const Float16Types types = [] {
    Float16Types f;
    MPI_Type_contiguous(2, MPI_BYTE, &f.bf16);
    MPI_Type_commit(&f.bf16);
    MPI_Type_contiguous(2, MPI_BYTE, &f.f16);
    MPI_Type_commit(&f.f16);
    MPI_Op_create(&float16_sum, /*commute=*/1, &f.sum);
    MPI_Op_create(&float16_max, 1, &f.max);
    MPI_Op_create(&float16_min, 1, &f.min);
    return f;
  }();
  return types;
}

bool is_float16(CommDType t) { return t == CommDType::kBF16 || t == CommDType::kF16; }

MPI_Datatype to_mpi(CommDType t) {
  switch (t) {
    case CommDType::kF32: return MPI_FLOAT;
    case CommDType::kF64: return MPI_DOUBLE;
    case CommDType::kI32: return MPI_INT32_T;
    case CommDType::kI64: return MPI_INT64_T;
    case CommDType::kU8: return MPI_UINT8_T;
    case CommDType::kBF16: return float16_types().bf16;
    case CommDType::kF16: return float16_types().f16;
  }
  throw_runtime("unknown CommDType {}", static_cast<int>(t));
}

// The reduction of `op` on elements of type t.
MPI_Op to_mpi(ReduceOp op, CommDType t) {
  const bool f16 = is_float16(t);
  switch (op) {
    case ReduceOp::kSum: return f16 ? float16_types().sum : MPI_SUM;
    case ReduceOp::kMax: return f16 ? float16_types().max : MPI_MAX;
    case ReduceOp::kMin: return f16 ? float16_types().min : MPI_MIN;
  }
  throw_runtime("unknown ReduceOp {}", static_cast<int>(op));
}

bool mpi_finalized() {
  int f = 0;
  MPI_Finalized(&f);
  return f != 0;
}

int world_rank_now() {
  int init = 0;
  MPI_Initialized(&init);
  if (!init || mpi_finalized()) return 0;
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

std::string mpi_error_string(int rc) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS) return fmt::format("MPI error {}", rc);
  return std::string(buf, static_cast<size_t>(len));
}

// One posted operation. The argument arrays of the *_v collectives live here because MPI
// reads them until the operation completes.
struct PendingOp {
  MPI_Request req = MPI_REQUEST_NULL;  // MPI_REQUEST_NULL: complete already (size-1 group)
  std::vector<int> counts, displs;
  std::vector<int> recv_counts, recv_displs;  // all_to_all_v: counts/displs are the send side
  CallTrace trace;
  const char* kind = "";
  int64_t bytes = 0;
  int peer_world = -1;  // send/recv: the peer's world rank
  bool done = false;
  bool timed_out = false;  // a wait() gave up on it once
};

// State shared by a communicator and the handles it gave out (which may outlive it).
struct CommContext {
  MPI_Comm comm = MPI_COMM_NULL;
  std::string axis;
  std::vector<int> world_ranks;
  std::string group;  // "ranks 0,1"
  int rank = 0, size = 1, world_rank = 0;
  std::chrono::milliseconds timeout{300000};
  Tracer* tracer = nullptr;
  std::vector<PendingOp*> live;                     // owned by handles, not yet complete
  std::vector<std::unique_ptr<PendingOp>> orphans;  // given up by their handle after a timeout

  ~CommContext() {
    if (comm == MPI_COMM_NULL || mpi_finalized()) return;
    test_orphans();
    // Operations that never completed: MPI may still touch their arrays, so they are leaked.
    for (auto& op : orphans) (void)op.release();
    MPI_Comm_free(&comm);
  }

  std::string describe(const PendingOp& op) const {
    const std::string what = op.peer_world >= 0
                                 ? fmt::format("{} of {} {} world rank {}", op.kind, format_bytes(op.bytes),
                                               std::strcmp(op.kind, "send") == 0 ? "to" : "from", op.peer_world)
                                 : fmt::format("{} of {}", op.kind, format_bytes(op.bytes));
    return fmt::format("{} on axis {} ({})", what, axis, group);
  }

  void check(int rc, const PendingOp& op) const {
    if (rc == MPI_SUCCESS) return;
    throw_runtime("weft: rank {}: {} failed: {}", world_rank, describe(op), mpi_error_string(rc));
  }

  void complete(PendingOp& op) {
    op.done = true;
    op.trace.finish();
    auto it = std::find(live.begin(), live.end(), &op);
    if (it != live.end()) live.erase(it);
  }

  bool test(PendingOp& op) {
    if (op.done) return true;
    int flag = 0;
    check(MPI_Test(&op.req, &flag, MPI_STATUS_IGNORE), op);
    if (flag) complete(op);
    return flag != 0;
  }

  void wait(PendingOp& op) {
    if (op.done) return;
    const Clock::time_point t0 = Clock::now();
    long sleep_ns = 20000;
    for (;;) {
      if (test(op)) return;
      const Clock::duration elapsed = Clock::now() - t0;
      if (timeout.count() > 0 && elapsed >= timeout) {
        op.timed_out = true;
        throw CommTimeout(fmt::format("weft: rank {}: {} did not complete within {:.1f} s: a peer rank is dead or stalled",
                                      world_rank, describe(op), static_cast<double>(timeout.count()) / 1000.0));
      }
      if (elapsed < std::chrono::microseconds(50)) continue;  // spin: most operations finish here
      if (elapsed < std::chrono::milliseconds(2)) {
        sched_yield();
        continue;
      }
      timespec ts{0, sleep_ns};
      nanosleep(&ts, nullptr);
      sleep_ns = std::min(2 * sleep_ns, 1000000L);
    }
  }

  void test_orphans() {
    for (auto it = orphans.begin(); it != orphans.end();) {
      int flag = 0;
      if (MPI_Test(&(*it)->req, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || flag) {
        it = orphans.erase(it);
      } else {
        ++it;
      }
    }
  }

  void progress() {
    const std::vector<PendingOp*> ops = live;  // test() removes completed ones from `live`
    for (PendingOp* op : ops) test(*op);
    test_orphans();
  }
};

class MpiRequest : public CommRequest {
 public:
  MpiRequest(std::shared_ptr<CommContext> ctx, std::unique_ptr<PendingOp> op)
      : ctx_(std::move(ctx)), op_(std::move(op)) {
    if (op_->req == MPI_REQUEST_NULL) {
      ctx_->complete(*op_);  // nothing was posted (size-1 group)
    } else {
      ctx_->live.push_back(op_.get());
    }
  }
  ~MpiRequest() override {
    if (op_->done) return;
    if (mpi_finalized()) return;
    // Wait, unless a wait timed out already or an exception is unwinding the stack (the
    // handler is about to end the job; waiting the full timeout first would only delay it).
    if (!op_->timed_out && std::uncaught_exceptions() == 0) {
      try {
        ctx_->wait(*op_);
        return;
      } catch (const std::exception& e) {
        log_warn("{} (while destroying its handle; the operation is left pending)", e.what());
      }
    }
    auto it = std::find(ctx_->live.begin(), ctx_->live.end(), op_.get());
    if (it != ctx_->live.end()) ctx_->live.erase(it);
    ctx_->orphans.push_back(std::move(op_));
  }
  void wait() override { ctx_->wait(*op_); }
  bool test() override { return ctx_->test(*op_); }

 private:
  std::shared_ptr<CommContext> ctx_;
  std::unique_ptr<PendingOp> op_;
};

class MpiCommunicator : public Communicator {
 public:
  // Takes ownership of `comm`.
  MpiCommunicator(MPI_Comm comm, std::string axis) : ctx_(std::make_shared<CommContext>()) {
    CommContext& c = *ctx_;
    c.comm = comm;
    c.axis = std::move(axis);
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm, &c.rank);
    MPI_Comm_size(comm, &c.size);
    c.world_rank = world_rank_now();
    MPI_Group group = MPI_GROUP_NULL, world_group = MPI_GROUP_NULL;
    MPI_Comm_group(comm, &group);
    MPI_Comm_group(MPI_COMM_WORLD, &world_group);
    std::vector<int> ranks(static_cast<size_t>(c.size));
    for (int i = 0; i < c.size; ++i) ranks[static_cast<size_t>(i)] = i;
    c.world_ranks.resize(ranks.size());
    MPI_Group_translate_ranks(group, c.size, ranks.data(), world_group, c.world_ranks.data());
    MPI_Group_free(&group);
    MPI_Group_free(&world_group);
    c.group = detail::group_label(c.world_ranks);
  }

  int rank() const override { return ctx_->rank; }
  int size() const override { return ctx_->size; }
  const std::string& axis() const override { return ctx_->axis; }
  const std::vector<int>& world_ranks() const override { return ctx_->world_ranks; }

  // --- blocking: the non-blocking form plus wait() ---
  void all_reduce(void* buf, int64_t count, CommDType t, ReduceOp op) override {
    MpiRequest(ctx_, post_all_reduce(buf, count, t, op, false)).wait();
  }
  void reduce_scatter(const void* send, void* recv, int64_t count, CommDType t, ReduceOp op) override {
    MpiRequest(ctx_, post_reduce_scatter(send, recv, count, t, op)).wait();
  }
  void reduce_scatter_v(const void* send, void* recv, const std::vector<int64_t>& counts, CommDType t,
                        ReduceOp op) override {
    MpiRequest(ctx_, post_reduce_scatter_v(send, recv, counts, t, op, false)).wait();
  }
  void all_gather(const void* send, void* recv, int64_t count, CommDType t) override {
    MpiRequest(ctx_, post_all_gather(send, recv, count, t)).wait();
  }
  void all_gather_v(const void* send, void* recv, const std::vector<int64_t>& counts, CommDType t) override {
    MpiRequest(ctx_, post_all_gather_v(send, recv, counts, t, false)).wait();
  }
  void broadcast(void* buf, int64_t count, CommDType t, int root) override {
    MpiRequest(ctx_, post_broadcast(buf, count, t, root)).wait();
  }
  void all_to_all_v(const void* send, void* recv, const std::vector<int64_t>& counts, CommDType t) override {
    MpiRequest(ctx_, post_all_to_all_v(send, recv, counts, t, false)).wait();
  }
  void send(const void* buf, int64_t count, CommDType t, int peer, int tag) override {
    MpiRequest(ctx_, post_p2p(true, const_cast<void*>(buf), count, t, peer, tag, false)).wait();
  }
  void recv(void* buf, int64_t count, CommDType t, int peer, int tag) override {
    MpiRequest(ctx_, post_p2p(false, buf, count, t, peer, tag, false)).wait();
  }
  void barrier() override { MpiRequest(ctx_, post_barrier()).wait(); }

  // --- asynchronous ---
  CommHandle iall_reduce(void* buf, int64_t count, CommDType t, ReduceOp op) override {
    return std::make_unique<MpiRequest>(ctx_, post_all_reduce(buf, count, t, op, true));
  }
  CommHandle ireduce_scatter_v(const void* send, void* recv, const std::vector<int64_t>& counts, CommDType t,
                               ReduceOp op) override {
    return std::make_unique<MpiRequest>(ctx_, post_reduce_scatter_v(send, recv, counts, t, op, true));
  }
  CommHandle iall_gather_v(const void* send, void* recv, const std::vector<int64_t>& counts, CommDType t) override {
    return std::make_unique<MpiRequest>(ctx_, post_all_gather_v(send, recv, counts, t, true));
  }
  CommHandle iall_to_all_v(const void* send, void* recv, const std::vector<int64_t>& counts, CommDType t) override {
    return std::make_unique<MpiRequest>(ctx_, post_all_to_all_v(send, recv, counts, t, true));
  }
  CommHandle isend(const void* buf, int64_t count, CommDType t, int peer, int tag) override {
    return std::make_unique<MpiRequest>(ctx_, post_p2p(true, const_cast<void*>(buf), count, t, peer, tag, true));
  }
  CommHandle irecv(void* buf, int64_t count, CommDType t, int peer, int tag) override {
    return std::make_unique<MpiRequest>(ctx_, post_p2p(false, buf, count, t, peer, tag, true));
  }

  void progress() override { ctx_->progress(); }

  std::unique_ptr<Communicator> split(int color, int key, const std::string& axis) override {
    WEFT_CHECK(color >= 0, "split: color {} must be non-negative", color);
    MPI_Comm sub = MPI_COMM_NULL;
    const int rc = MPI_Comm_split(ctx_->comm, color, key, &sub);
    if (rc != MPI_SUCCESS) {
      throw_runtime("weft: rank {}: MPI_Comm_split of axis {} ({}) into axis {} failed: {}", ctx_->world_rank,
                    ctx_->axis, ctx_->group, axis, mpi_error_string(rc));
    }
    auto c = std::make_unique<MpiCommunicator>(sub, axis);
    c->set_timeout(ctx_->timeout);
    c->set_tracer(ctx_->tracer);
    return c;
  }

  void set_timeout(std::chrono::milliseconds t) override { ctx_->timeout = t; }
  std::chrono::milliseconds timeout() const override { return ctx_->timeout; }
  void set_tracer(Tracer* tracer) override { ctx_->tracer = tracer; }
  Tracer* tracer() const override { return ctx_->tracer; }

  // The communicator keeps the runtime alive and finalises MPI when destroyed (make_mpi_world).
  void own_runtime(std::unique_ptr<MpiRuntime> rt) { runtime_ = std::move(rt); }

 private:
  static int64_t nbytes(int64_t count, CommDType t) { return count * static_cast<int64_t>(comm_dtype_size(t)); }

  std::unique_ptr<PendingOp> make_op(const char* kind, int64_t bytes, bool async, int peer_world = -1) {
    auto op = std::make_unique<PendingOp>();
    op->kind = kind;
    op->bytes = bytes;
    op->peer_world = peer_world;
    if (ctx_->tracer != nullptr && ctx_->tracer->enabled()) {
      op->trace.begin(ctx_->tracer, kind, ctx_->axis, bytes, peer_world >= 0 ? fmt::format("peer {}", peer_world) : ctx_->group,
                      async);
    }
    return op;
  }

  int to_int(int64_t n, const char* kind, const char* what) const {
    WEFT_CHECK(n >= 0, "{}: negative {} {}", kind, what, n);
    if (n > INT_MAX) {
      throw_runtime("weft: rank {}: {} on axis {}: {} {} exceeds MPI's int limit {}; split the buffer into pieces",
                    ctx_->world_rank, kind, ctx_->axis, what, n, INT_MAX);
    }
    return static_cast<int>(n);
  }

  const void* in_place_if(const void* send, const void* at) const { return send == at ? MPI_IN_PLACE : send; }

  std::unique_ptr<PendingOp> post_all_reduce(void* buf, int64_t count, CommDType t, ReduceOp op, bool async) {
    const int n = to_int(count, "all_reduce", "count");
    auto p = make_op("all_reduce", nbytes(count, t), async);
    if (ctx_->size > 1) {
      ctx_->check(MPI_Iallreduce(MPI_IN_PLACE, buf, n, to_mpi(t), to_mpi(op, t), ctx_->comm, &p->req), *p);
    }
    return p;
  }

  std::unique_ptr<PendingOp> post_reduce_scatter(const void* send, void* recv, int64_t count, CommDType t,
                                                 ReduceOp op) {
    const int n = to_int(count, "reduce_scatter", "count");
    to_int(count * ctx_->size, "reduce_scatter", "total count");
    auto p = make_op("reduce_scatter", nbytes(count * ctx_->size, t), false);
    if (ctx_->size > 1) {
      ctx_->check(MPI_Ireduce_scatter_block(in_place_if(send, recv), recv, n, to_mpi(t), to_mpi(op, t), ctx_->comm, &p->req),
                  *p);
    } else if (send != recv && count > 0) {
      std::memmove(recv, send, static_cast<size_t>(nbytes(count, t)));
    }
    return p;
  }

  std::unique_ptr<PendingOp> post_reduce_scatter_v(const void* send, void* recv, const std::vector<int64_t>& counts,
                                                   CommDType t, ReduceOp op, bool async) {
    const int64_t total = detail::checked_total(counts, ctx_->size, "reduce_scatter_v");
    to_int(total, "reduce_scatter_v", "total count");
    auto p = make_op("reduce_scatter", nbytes(total, t), async);
    if (ctx_->size > 1) {
      p->counts.resize(counts.size());
      for (size_t i = 0; i < counts.size(); ++i) p->counts[i] = static_cast<int>(counts[i]);
      ctx_->check(MPI_Ireduce_scatter(in_place_if(send, recv), recv, p->counts.data(), to_mpi(t), to_mpi(op, t),
                                      ctx_->comm, &p->req),
                  *p);
    } else if (send != recv && total > 0) {
      std::memmove(recv, send, static_cast<size_t>(nbytes(total, t)));
    }
    return p;
  }

  std::unique_ptr<PendingOp> post_all_gather(const void* send, void* recv, int64_t count, CommDType t) {
    const int n = to_int(count, "all_gather", "count");
    to_int(count * ctx_->size, "all_gather", "total count");
    auto p = make_op("all_gather", nbytes(count * ctx_->size, t), false);
    const char* own_block = static_cast<const char*>(recv) + nbytes(count * ctx_->rank, t);
    if (ctx_->size > 1) {
      if (send == own_block) {
        ctx_->check(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, n, to_mpi(t), ctx_->comm, &p->req), *p);
      } else {
        ctx_->check(MPI_Iallgather(send, n, to_mpi(t), recv, n, to_mpi(t), ctx_->comm, &p->req), *p);
      }
    } else if (send != recv && count > 0) {
      std::memmove(recv, send, static_cast<size_t>(nbytes(count, t)));
    }
    return p;
  }

  std::unique_ptr<PendingOp> post_all_gather_v(const void* send, void* recv, const std::vector<int64_t>& counts,
                                               CommDType t, bool async) {
    const int64_t total = detail::checked_total(counts, ctx_->size, "all_gather_v");
    to_int(total, "all_gather_v", "total count");
    auto p = make_op("all_gather", nbytes(total, t), async);
    if (ctx_->size > 1) {
      p->counts.resize(counts.size());
      p->displs.resize(counts.size());
      int64_t offset = 0;
      for (size_t i = 0; i < counts.size(); ++i) {
        p->counts[i] = static_cast<int>(counts[i]);
        p->displs[i] = static_cast<int>(offset);
        offset += counts[i];
      }
      const size_t r = static_cast<size_t>(ctx_->rank);
      const char* own_block = static_cast<const char*>(recv) + nbytes(p->displs[r], t);
      if (send == own_block) {
        ctx_->check(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, p->counts.data(), p->displs.data(),
                                    to_mpi(t), ctx_->comm, &p->req),
                    *p);
      } else {
        ctx_->check(MPI_Iallgatherv(send, p->counts[r], to_mpi(t), recv, p->counts.data(), p->displs.data(),
                                    to_mpi(t), ctx_->comm, &p->req),
                    *p);
      }
    } else if (send != recv && total > 0) {
      std::memmove(recv, send, static_cast<size_t>(nbytes(total, t)));
    }
    return p;
  }

  // MPI_Ialltoallv takes int counts and displacements: each rank's row and column sums must
  // stay within INT_MAX (which bounds every block and displacement), else a clear error.
  std::unique_ptr<PendingOp> post_all_to_all_v(const void* send, void* recv, const std::vector<int64_t>& counts,
                                               CommDType t, bool async) {
    const detail::AllToAllCounts m = detail::checked_matrix(counts, ctx_->size, ctx_->rank, "all_to_all_v");
    to_int(m.send_total, "all_to_all_v", "count sent by this rank (row sum)");
    to_int(m.recv_total, "all_to_all_v", "count received by this rank (column sum)");
    auto p = make_op("all_to_all", nbytes(m.total, t), async);
    const size_t n = static_cast<size_t>(ctx_->size), r = static_cast<size_t>(ctx_->rank);
    if (ctx_->size > 1) {
      p->counts.resize(n);
      p->displs.resize(n);
      p->recv_counts.resize(n);
      p->recv_displs.resize(n);
      int64_t soff = 0, roff = 0;
      for (size_t q = 0; q < n; ++q) {
        p->counts[q] = static_cast<int>(counts[r * n + q]);
        p->displs[q] = static_cast<int>(soff);
        p->recv_counts[q] = static_cast<int>(counts[q * n + r]);
        p->recv_displs[q] = static_cast<int>(roff);
        soff += counts[r * n + q];
        roff += counts[q * n + r];
      }
      ctx_->check(MPI_Ialltoallv(send, p->counts.data(), p->displs.data(), to_mpi(t), recv, p->recv_counts.data(),
                                 p->recv_displs.data(), to_mpi(t), ctx_->comm, &p->req),
                  *p);
    } else if (send != recv && m.total > 0) {
      std::memmove(recv, send, static_cast<size_t>(nbytes(m.total, t)));
    }
    return p;
  }

  std::unique_ptr<PendingOp> post_broadcast(void* buf, int64_t count, CommDType t, int root) {
    WEFT_CHECK(root >= 0 && root < ctx_->size, "broadcast: root {} outside the group of {} ranks on axis {}", root,
               ctx_->size, ctx_->axis);
    const int n = to_int(count, "broadcast", "count");
    auto p = make_op("broadcast", nbytes(count, t), false);
    if (ctx_->size > 1) ctx_->check(MPI_Ibcast(buf, n, to_mpi(t), root, ctx_->comm, &p->req), *p);
    return p;
  }

  std::unique_ptr<PendingOp> post_p2p(bool is_send, void* buf, int64_t count, CommDType t, int peer, int tag,
                                      bool async) {
    const char* kind = is_send ? "send" : "recv";
    WEFT_CHECK(peer >= 0 && peer < ctx_->size, "{}: peer {} outside the group of {} ranks on axis {}", kind, peer,
               ctx_->size, ctx_->axis);
    WEFT_CHECK(tag >= 0, "{}: negative tag {}", kind, tag);
    const int n = to_int(count, kind, "count");
    auto p = make_op(kind, nbytes(count, t), async, ctx_->world_ranks[static_cast<size_t>(peer)]);
    if (is_send) {
      ctx_->check(MPI_Isend(buf, n, to_mpi(t), peer, tag, ctx_->comm, &p->req), *p);
    } else {
      ctx_->check(MPI_Irecv(buf, n, to_mpi(t), peer, tag, ctx_->comm, &p->req), *p);
    }
    return p;
  }

  std::unique_ptr<PendingOp> post_barrier() {
    auto p = make_op("barrier", 0, false);
    if (ctx_->size > 1) ctx_->check(MPI_Ibarrier(ctx_->comm, &p->req), *p);
    return p;
  }

  std::unique_ptr<MpiRuntime> runtime_;  // declared before ctx_: destroyed after it
  std::shared_ptr<CommContext> ctx_;
};

bool env_set(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0';
}

int env_int(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? 0 : std::atoi(v);
}

}  // namespace

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  int init = 0;
  MPI_Initialized(&init);
  if (init) {
    if (mpi_finalized()) throw_runtime("weft: MPI was finalised already and cannot be initialised again");
    return;
  }
  keep_large_buffers_mapped();  // core/memory.h: MPI's per-call temporaries reuse their pages
  int provided = 0;
  const int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  if (rc != MPI_SUCCESS) throw_runtime("weft: MPI_Init_thread failed: {}", mpi_error_string(rc));
  owns_ = true;
  if (provided < MPI_THREAD_FUNNELED) {
    log_warn("weft: MPI provides thread level {} below MPI_THREAD_FUNNELED; OpenMP threads must not call MPI",
             provided);
  }
}

MpiRuntime::~MpiRuntime() {
  // During exception unwinding, MPI stays initialised: MPI_Finalize would wait for peers that
  // may be stuck in a collective, and the handler still needs MPI to call abort_job().
  if (owns_ && !mpi_finalized() && std::uncaught_exceptions() == 0) MPI_Finalize();
}

bool MpiRuntime::launched_under_mpi() {
  if (const char* forced = std::getenv("WEFT_MPI"); forced != nullptr && *forced != '\0') {
    return std::strcmp(forced, "0") != 0;
  }
  if (env_set("OMPI_COMM_WORLD_SIZE") || env_set("PMIX_RANK") || env_set("PMI_RANK") || env_set("PMI_SIZE") ||
      env_set("MPI_LOCALNRANKS")) {
    return true;
  }
  if (env_set("SLURM_PROCID")) {
    const int tasks = env_set("SLURM_STEP_NUM_TASKS") ? env_int("SLURM_STEP_NUM_TASKS") : env_int("SLURM_NTASKS");
    return tasks > 1;
  }
  return false;
}

bool MpiRuntime::active() {
  int init = 0;
  MPI_Initialized(&init);
  return init != 0 && !mpi_finalized();
}

int MpiRuntime::world_rank() const {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int MpiRuntime::world_size() const {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

namespace {
std::unique_ptr<MpiCommunicator> dup_world() {
  MPI_Comm dup = MPI_COMM_NULL;
  const int rc = MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  if (rc != MPI_SUCCESS) throw_runtime("weft: MPI_Comm_dup of MPI_COMM_WORLD failed: {}", mpi_error_string(rc));
  return std::make_unique<MpiCommunicator>(dup, "world");
}
}  // namespace

std::unique_ptr<Communicator> MpiRuntime::world() { return dup_world(); }

std::unique_ptr<Communicator> make_mpi_world(int* argc, char*** argv) {
  auto rt = std::make_unique<MpiRuntime>(argc, argv);
  std::unique_ptr<MpiCommunicator> world = dup_world();
  world->own_runtime(std::move(rt));
  return world;
}

}  // namespace weft
