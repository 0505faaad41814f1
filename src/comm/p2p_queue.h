// When to start point-to-point operations on a transport where they run in order on one
// stream, a receive holds everything behind it until its message arrives, and a send may hold
// until its receive is started (NCCL: no tags, matching in posting order per pair of ranks,
// rendezvous beyond its internal buffers). The pipeline runtime (parallel/pp/runtime.h) posts
// MPI-style: receives several actions ahead, each send as soon as its data exist, and waits
// for a receive only when the action needs it. Started at posting time on such a transport
// that deadlocks: a stage's send of micro-batch m would sit behind its receive posted ahead
// for a later action, whose message the next stage can only send after receiving m.
//
// So posting only records an operation; it starts when it (or a later receive) is waited for:
// waiting for operation X starts, as ONE group (ncclGroupStart/End, whose operations progress
// together), every pending send and, when X is a receive, the pending receives posted up to X;
// the receives posted after it stay pending. This is Megatron's batched send_forward_recv_backward: in 1F1B's
// steady state a stage's send of activations and its receive of gradients go together, and so
// do the next stage's send of gradients and its receive of activations, so both groups
// complete. A rank then blocks only on a group holding every send it has posted, so no rank
// waits for a message that its peer still holds back; receives keep their posting order among
// themselves and sends theirs, which is all that NCCL's in-order matching needs, provided each
// pair of ranks posts a pair's sends and receives in the same order on both sides (the
// runtime's schedules do: tests/mpi/mpi_pipeline_runtime.cc runs them over a tagless,
// rendezvous, stream-ordered emulation of exactly this policy).
//
// Operations are identified by increasing ids. Not thread-safe (like the communicators).
#pragma once
#include <cstdint>
#include <deque>
#include <vector>

namespace weft {

class P2pQueue {
 public:
  // Records a posted operation (not started); returns its id.
  uint64_t post(bool is_send);
  // The operations to start now, in posting order, as one group, so that waiting for `id` can
  // complete: every pending send and, when `id` is a receive, the pending receives up to it.
  // Empty when `id` has started already.
  std::vector<uint64_t> start_for(uint64_t id);
  // Every pending operation, in posting order (before a collective, so that the stream keeps
  // the posting order).
  std::vector<uint64_t> start_all();
  bool pending(uint64_t id) const;
  bool empty() const { return pending_.empty(); }

 private:
  struct Op {
    uint64_t id;
    bool is_send;
  };
  std::deque<Op> pending_;
  uint64_t next_ = 0;
};

}  // namespace weft
