#include "comm/self_comm.h"

#include <cstring>

#include "comm/comm_detail.h"

namespace weft {

namespace {

using detail::CallTrace;

// Already complete when created; the trace event is recorded when completion is observed.
class SelfRequest : public CommRequest {
 public:
  explicit SelfRequest(CallTrace trace) : trace_(std::move(trace)) {}
  ~SelfRequest() override { trace_.finish(); }
  void wait() override { trace_.finish(); }
  bool test() override {
    trace_.finish();
    return true;
  }

 private:
  CallTrace trace_;
};

void copy_bytes(void* dst, const void* src, int64_t bytes) {
  if (dst != src && bytes > 0) std::memmove(dst, src, static_cast<size_t>(bytes));
}

class SelfCommunicator : public Communicator {
 public:
  explicit SelfCommunicator(std::string axis) : axis_(std::move(axis)), world_ranks_{0}, group_("ranks 0") {}

  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::string& axis() const override { return axis_; }
  const std::vector<int>& world_ranks() const override { return world_ranks_; }

  void all_reduce(void* buf, int64_t count, CommDType t, ReduceOp op) override {
    detail::check_count(count, "all_reduce");
    CallTrace tr = begin("all_reduce", bytes(count, t), false);
    tr.finish();
  }
  void reduce_scatter(const void* send, void* recv, int64_t count, CommDType t, ReduceOp op) override {
    detail::check_count(count, "reduce_scatter");
    CallTrace tr = begin("reduce_scatter", bytes(count, t), false);
    copy_bytes(recv, send, bytes(count, t));
    tr.finish();
  }
  void reduce_scatter_v(const void* send, void* recv, const std::vector<int64_t>& counts, CommDType t,
                        ReduceOp op) override {
    ireduce_scatter_v_impl(send, recv, counts, t, false).finish();
  }
  void all_gather(const void* send, void* recv, int64_t count, CommDType t) override {
    detail::check_count(count, "all_gather");
    CallTrace tr = begin("all_gather", bytes(count, t), false);
    copy_bytes(recv, send, bytes(count, t));
    tr.finish();
  }
  void all_gather_v(const void* send, void* recv, const std::vector<int64_t>& counts, CommDType t) override {
    iall_gather_v_impl(send, recv, counts, t, false).finish();
  }
  void broadcast(void* buf, int64_t count, CommDType t, int root) override {
    detail::check_count(count, "broadcast");
    WEFT_CHECK(root == 0, "broadcast: root {} outside a group of 1 rank (axis {})", root, axis_);
    CallTrace tr = begin("broadcast", bytes(count, t), false);
    tr.finish();
  }
  void all_to_all_v(const void* send, void* recv, const std::vector<int64_t>& counts, CommDType t) override {
    iall_to_all_v_impl(send, recv, counts, t, false).finish();
  }
  void send(const void* buf, int64_t count, CommDType t, int peer, int tag) override { no_peer("send", peer); }
  void recv(void* buf, int64_t count, CommDType t, int peer, int tag) override { no_peer("recv", peer); }
  void barrier() override {
    CallTrace tr = begin("barrier", 0, false);
    tr.finish();
  }

  CommHandle iall_reduce(void* buf, int64_t count, CommDType t, ReduceOp op) override {
    detail::check_count(count, "all_reduce");
    return std::make_unique<SelfRequest>(begin("all_reduce", bytes(count, t), true));
  }
  CommHandle ireduce_scatter_v(const void* send, void* recv, const std::vector<int64_t>& counts, CommDType t,
                               ReduceOp op) override {
    return std::make_unique<SelfRequest>(ireduce_scatter_v_impl(send, recv, counts, t, true));
  }
  CommHandle iall_gather_v(const void* send, void* recv, const std::vector<int64_t>& counts, CommDType t) override {
    return std::make_unique<SelfRequest>(iall_gather_v_impl(send, recv, counts, t, true));
  }
  CommHandle iall_to_all_v(const void* send, void* recv, const std::vector<int64_t>& counts, CommDType t) override {
    return std::make_unique<SelfRequest>(iall_to_all_v_impl(send, recv, counts, t, true));
  }
  CommHandle isend(const void* buf, int64_t count, CommDType t, int peer, int tag) override {
    no_peer("isend", peer);
  }
  CommHandle irecv(void* buf, int64_t count, CommDType t, int peer, int tag) override { no_peer("irecv", peer); }

  void progress() override {}

  std::unique_ptr<Communicator> split(int color, int key, const std::string& axis) override {
    WEFT_CHECK(color >= 0, "split: color {} must be non-negative", color);
    auto c = std::make_unique<SelfCommunicator>(axis);
    c->timeout_ = timeout_;
    c->tracer_ = tracer_;
    return c;
  }

  void set_timeout(std::chrono::milliseconds t) override { timeout_ = t; }
  std::chrono::milliseconds timeout() const override { return timeout_; }
  void set_tracer(Tracer* tracer) override { tracer_ = tracer; }
  Tracer* tracer() const override { return tracer_; }

 private:
  static int64_t bytes(int64_t count, CommDType t) { return count * static_cast<int64_t>(comm_dtype_size(t)); }

  CallTrace begin(const char* kind, int64_t nbytes, bool async) {
    CallTrace tr;
    tr.begin(tracer_, kind, axis_, nbytes, group_, async);
    return tr;
  }

  CallTrace ireduce_scatter_v_impl(const void* send, void* recv, const std::vector<int64_t>& counts, CommDType t,
                                   bool async) {
    const int64_t total = detail::checked_total(counts, 1, "reduce_scatter_v");
    CallTrace tr = begin("reduce_scatter", bytes(total, t), async);
    copy_bytes(recv, send, bytes(total, t));
    return tr;
  }
  CallTrace iall_gather_v_impl(const void* send, void* recv, const std::vector<int64_t>& counts, CommDType t,
                               bool async) {
    const int64_t total = detail::checked_total(counts, 1, "all_gather_v");
    CallTrace tr = begin("all_gather", bytes(total, t), async);
    copy_bytes(recv, send, bytes(total, t));
    return tr;
  }

  CallTrace iall_to_all_v_impl(const void* send, void* recv, const std::vector<int64_t>& counts, CommDType t,
                               bool async) {
    const int64_t total = detail::checked_matrix(counts, 1, 0, "all_to_all_v").total;
    CallTrace tr = begin("all_to_all", bytes(total, t), async);
    copy_bytes(recv, send, bytes(total, t));
    return tr;
  }

  [[noreturn]] void no_peer(const char* kind, int peer) const {
    WEFT_CHECK(false, "{} to peer {} on axis {}: a group of 1 rank has no peer (send/recv to oneself)", kind, peer,
               axis_);
    __builtin_unreachable();
  }

  std::string axis_;
  std::vector<int> world_ranks_;
  std::string group_;
  std::chrono::milliseconds timeout_{300000};
  Tracer* tracer_ = nullptr;
};

}  // namespace

std::unique_ptr<Communicator> make_self_communicator(const std::string& axis) {
  return std::make_unique<SelfCommunicator>(axis);
}

}  // namespace weft
