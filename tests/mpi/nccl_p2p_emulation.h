// An emulation, over MPI, of how the NCCL communicator runs point-to-point operations
// (comm/nccl/nccl_comm.h), to check on any machine that the order in which the pipeline runtime
// posts them can neither deadlock nor pair the wrong messages on NCCL. It applies the NCCL
// communicator's own policy (comm/p2p_queue.h: an operation is held until it or a later
// receive is waited for, then started with every held send in one group) under NCCL's rules:
//   - no tags: every message between two ranks travels with one MPI tag, so messages pair in
//     posting order (MPI does not overtake); a wrong order swaps payloads (caught by the
//     closed-form checks) or sizes (an MPI truncation error);
//   - rendezvous: a started send completes only once a started receive has taken it (the
//     receiver acknowledges each message), and a group completes when all its operations
//     have; operations of a group progress together (polled), as inside ncclGroupStart/End;
//   - one stream: the host waits for a group before it starts the next one.
// A deadlock shows as a CommTimeout after the communicator's timeout.
// Collectives are forwarded to the host communicator after starting every held operation (what
// the NCCL communicator does); split is not supported.
#pragma once
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/p2p_queue.h"
#include "core/error.h"

namespace weft::test {

class NcclP2pEmulation final : public Communicator {
 public:
  explicit NcclP2pEmulation(Communicator& host) : host_(host) {}

  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }
  const std::string& axis() const override { return host_.axis(); }
  const std::vector<int>& world_ranks() const override { return host_.world_ranks(); }

  void all_reduce(void* buf, int64_t count, CommDType t, ReduceOp op) override {
    start_all();
    host_.all_reduce(buf, count, t, op);
  }
  void reduce_scatter(const void* send, void* recv, int64_t count, CommDType t, ReduceOp op) override {
    start_all();
    host_.reduce_scatter(send, recv, count, t, op);
  }
  void reduce_scatter_v(const void* send, void* recv, const std::vector<int64_t>& counts, CommDType t,
                        ReduceOp op) override {
    start_all();
    host_.reduce_scatter_v(send, recv, counts, t, op);
  }
  void all_gather(const void* send, void* recv, int64_t count, CommDType t) override {
    start_all();
    host_.all_gather(send, recv, count, t);
  }
  void all_gather_v(const void* send, void* recv, const std::vector<int64_t>& counts, CommDType t) override {
    start_all();
    host_.all_gather_v(send, recv, counts, t);
  }
  void broadcast(void* buf, int64_t count, CommDType t, int root) override {
    start_all();
    host_.broadcast(buf, count, t, root);
  }
  void all_to_all_v(const void* send, void* recv, const std::vector<int64_t>& counts, CommDType t) override {
    start_all();
    host_.all_to_all_v(send, recv, counts, t);
  }
  void send(const void* buf, int64_t count, CommDType t, int peer, int) override {
    const uint64_t id = post(true, const_cast<void*>(buf), count, t, peer);
    wait(id);
    ops_.erase(id);
  }
  void recv(void* buf, int64_t count, CommDType t, int peer, int) override {
    const uint64_t id = post(false, buf, count, t, peer);
    wait(id);
    ops_.erase(id);
  }
  void barrier() override {
    start_all();
    host_.barrier();
  }
  CommHandle iall_reduce(void* buf, int64_t count, CommDType t, ReduceOp op) override {
    start_all();
    return host_.iall_reduce(buf, count, t, op);
  }
  CommHandle ireduce_scatter_v(const void* send, void* recv, const std::vector<int64_t>& counts, CommDType t,
                               ReduceOp op) override {
    start_all();
    return host_.ireduce_scatter_v(send, recv, counts, t, op);
  }
  CommHandle iall_gather_v(const void* send, void* recv, const std::vector<int64_t>& counts, CommDType t) override {
    start_all();
    return host_.iall_gather_v(send, recv, counts, t);
  }
  CommHandle iall_to_all_v(const void* send, void* recv, const std::vector<int64_t>& counts, CommDType t) override {
    start_all();
    return host_.iall_to_all_v(send, recv, counts, t);
  }
  CommHandle isend(const void* buf, int64_t count, CommDType t, int peer, int) override {
    return std::make_unique<Request>(*this, post(true, const_cast<void*>(buf), count, t, peer));
  }
  CommHandle irecv(void* buf, int64_t count, CommDType t, int peer, int) override {
    return std::make_unique<Request>(*this, post(false, buf, count, t, peer));
  }
  void progress() override { host_.progress(); }
  std::unique_ptr<Communicator> split(int, int, const std::string&) override {
    throw_runtime("NcclP2pEmulation: split is not emulated");
  }
  void set_timeout(std::chrono::milliseconds t) override { host_.set_timeout(t); }
  std::chrono::milliseconds timeout() const override { return host_.timeout(); }
  void set_tracer(Tracer* tracer) override { host_.set_tracer(tracer); }
  Tracer* tracer() const override { return host_.tracer(); }

  int groups_started() const { return groups_; }
  // The largest number of operations started in one group.
  int largest_group() const { return largest_; }

 private:
  struct Op {
    bool is_send = false;
    void* buf = nullptr;
    int64_t count = 0;
    CommDType t = CommDType::kU8;
    int peer = 0;
    bool done = false;
  };

  class Request final : public CommRequest {
   public:
    Request(NcclP2pEmulation& c, uint64_t id) : c_(c), id_(id) {}
    ~Request() override {
      if (!c_.ops_.at(id_).done && std::uncaught_exceptions() == 0) c_.wait(id_);
      c_.ops_.erase(id_);
    }
    void wait() override { c_.wait(id_); }
    bool test() override { return c_.ops_.at(id_).done; }  // a held operation does not start

   private:
    NcclP2pEmulation& c_;
    uint64_t id_;
  };

  uint64_t post(bool is_send, void* buf, int64_t count, CommDType t, int peer) {
    const uint64_t id = queue_.post(is_send);
    ops_[id] = Op{is_send, buf, count, t, peer, false};
    return id;
  }

  void wait(uint64_t id) {
    run_group(queue_.start_for(id));
    WEFT_CHECK(ops_.at(id).done, "NcclP2pEmulation: operation {} waited for but not started", id);
  }

  void start_all() { run_group(queue_.start_all()); }

  static constexpr int kDataTag = 0, kAckTag = 1;

  // Starts the operations `ids` together and returns when every one has completed: receives
  // are acknowledged as their message arrives, sends complete with their acknowledgement.
  void run_group(const std::vector<uint64_t>& ids) {
    if (ids.empty()) return;
    ++groups_;
    largest_ = std::max(largest_, static_cast<int>(ids.size()));
    struct Live {
      Op* op;
      CommHandle data, ack;
      int32_t ack_value = 0;
      bool finished = false;
    };
    std::vector<Live> live;
    for (uint64_t id : ids) {
      Op& op = ops_.at(id);
      Live l{&op, nullptr, nullptr};
      live.push_back(std::move(l));
    }
    for (Live& l : live) {
      if (l.op->is_send) {
        l.data = host_.isend(l.op->buf, l.op->count, l.op->t, l.op->peer, kDataTag);
        l.ack = host_.irecv(&l.ack_value, 1, CommDType::kI32, l.op->peer, kAckTag);
      } else {
        l.data = host_.irecv(l.op->buf, l.op->count, l.op->t, l.op->peer, kDataTag);
      }
    }
    poll_group(live);
  }

  template <typename LiveVec>
  void poll_group(LiveVec& live) {
    static const int32_t kOne = 1;
    const auto t0 = std::chrono::steady_clock::now();
    size_t remaining = live.size();
    while (remaining > 0) {
      for (auto& l : live) {
        if (l.finished || !l.data->test()) continue;
        if (l.op->is_send) {
          if (!l.ack->test()) continue;
        } else {
          host_.send(&kOne, 1, CommDType::kI32, l.op->peer, kAckTag);
        }
        l.finished = l.op->done = true;
        --remaining;
      }
      if (host_.timeout().count() > 0 && std::chrono::steady_clock::now() - t0 > host_.timeout()) {
        throw CommTimeout("NcclP2pEmulation: a group of point-to-point operations did not complete: on NCCL this "
                          "posting order deadlocks");
      }
    }
  }

  Communicator& host_;
  P2pQueue queue_;
  std::map<uint64_t, Op> ops_;
  int groups_ = 0, largest_ = 0;
};

}  // namespace weft::test
