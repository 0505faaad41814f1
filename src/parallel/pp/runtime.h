// The pipeline runtime: executes one stage's schedule (schedule.h) over any model chunks.
// It owns what the schedule needs around the computation and nothing of the model:
// activation slots per chunk, receives posted ahead into a pool of buffers, sends copied into
// pooled buffers and sent asynchronously, and the scatter-gather over tensor parallelism.
//
// A chunk is anything with a forward and a backward over one micro-batch's activations of
// `message` floats (PipeChunk). Global chunk g (0..K-1, K = stages * virtual stages) lives on
// stage g % stages as local chunk g / stages (partition.h); a forward of g receives its input
// from the stage holding g-1 and sends its output to the one holding g+1; a backward receives
// the gradient of its output from g+1's stage and sends its input's gradient back to g-1's.
// Tags: 2 * (micro-batch * K + receiving chunk) + direction (0 forward, 1 backward).
//
// Scatter-gather (Narayanan et al. 2021 sec. 4.1): when every tp rank of a stage holds the
// same activations (tp > 1 without sequence parallelism), each sends only its 1/tp slice and
// the receiving stage all-gathers the slices over tp.
//
// Transports that match in posting order (NCCL: no tags; comm/p2p_queue.h holds each operation
// until it or a later receive is waited for, then starts every held send with the receives up
// to it as one group that completes as a whole). GPipe and 1F1B need nothing more: each wait
// for an action's input makes a group (the sends held since the previous wait + that receive),
// and in 1F1B stage s's group (send forward W_s+i, receive backward i) meets stage s+1's
// (send backward i, receive forward W_{s+1}+i+1), the same message pair, since
// W_s = W_{s+1} + 1. The interleaved schedule deadlocks with those per-action groups: there
// W_s = W_{s+1} + 2, so stage s's output of forward W_s+i is stage s+1's input of forward
// W_{s+1}+i+2, which stage s+1 waits for only after its backward i+1; stage s's group (send
// forward W_s+i, receive backward i) thus waits for a receive stage s+1 starts one group later,
// and stage s+1's group before backward i+1 holds its own forward send for stage s+2 the same
// way. Through the wrap-around (the last stage sends chunk c's output to the first stage's
// chunk c+1) the chain closes into a ring: every stage blocks on a forward send whose receive
// the next stage posts behind its own blocked group. On 2 stages, v 2, m 4 (global chunks):
// stage 0's group before backward (mb 1, chunk 2) holds its send of forward (mb 3 -> chunk 1),
// which stage 1 receives only after its group before backward (mb 0, chunk 1); that group
// holds stage 1's send of forward (mb 2 -> chunk 2), which stage 0 receives only after its
// own group; neither completes.
//
// So with cfg.posting_order_p2p the interleaved schedule exchanges once per steady (forward,
// backward) pair, as Megatron's send_forward_backward_recv_forward_backward: before the
// forward of a pair the runtime waits for the backward's receive too (posted after the
// forward's, so waiting for it starts both receives and every held send in one group). Stage s's
// group before pair i then holds (send forward W_s+i-1, send backward i-1, receive forward
// W_s+i, receive backward i), and the groups of neighbouring stages meet exactly: stage s's
// pair-i group with stage s+1's pair-(i+1) group and stage s-1's pair-(i-1) group (the
// wrap-around too), and the warm-up and cool-down groups likewise: every group belongs to one
// "time" (pair index minus stage) and needs only the neighbours' groups of that same time.
// Messages between two stages are posted in the same order on both sides (sends in compute
// order, receives in action order; within a pair-group forward before backward on both). The
// cost: a steady forward also waits for the next backward's gradient (what Megatron does); over
// MPI (tags, posting_order_p2p false) the runtime keeps waiting for each input only when its
// action needs it.
//
// Device memory: the messages (what a chunk's forward and backward take as x / dy, and what
// output() and input_grad() return) are device memory of the backend the runtime is given;
// its receive and send buffers are device buffers (under `comm`), and the communicators must
// move device memory (comm/device_comm.h; a plain host communicator on the cpu backend).
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <vector>

#include "comm/communicator.h"
#include "backend/device_buffer.h"
#include "core/view.h"
#include "parallel/pp/schedule.h"

namespace weft {

// One model chunk as the runtime drives it. Activation slots (0..slots-1) name the stash a
// micro-batch's forward keeps for its backward.
class PipeChunk {
 public:
  virtual ~PipeChunk() = default;
  // Called before an action waits for its input: e.g. read the micro-batch's tokens and open
  // its gradient reduction (last: the chunk's last backward of the step). Default: nothing.
  virtual void prepare(const PipeAction& action, bool last) {}
  // Forward of micro-batch mb into `slot`; x: its input received from the previous chunk
  // (null on global chunk 0, which reads tokens).
  virtual void forward(int slot, int mb, CView x) = 0;
  // Backward of micro-batch mb held in `slot`; dy: the gradient of its output from the next
  // chunk (null on the last chunk, which has the loss). last: the chunk's last backward of the
  // step. Returns the sum of the token losses it computed (the last chunk), else 0.
  virtual double backward(int slot, int mb, CView dy, bool last) = 0;
  // The output of the forward held in `slot` (valid until that slot's backward).
  virtual CView output(int slot) = 0;
  // The gradient of the input after the latest backward (valid until the next backward).
  virtual CView input_grad() = 0;
};

struct PipeRuntimeConfig {
  PipeSchedule schedule = PipeSchedule::k1F1B;
  int stages = 1;
  int stage = 0;
  int virtual_stages = 1;     // local chunks of this stage
  int micro_batches = 1;
  int64_t message = 0;        // elements of one micro-batch's activations (or gradients) on this rank
  bool scatter_gather = false;  // send 1/tp slices and all-gather them over tp
  // The pp communicator matches point-to-point operations in posting order and starts them
  // when waited for (NCCL, DeviceCommInfo::posting_order_p2p): exchange the interleaved
  // schedule's steady state once per (forward, backward) pair (see the top of the file).
  bool posting_order_p2p = false;
  DType message_dtype = DType::kF32;  // the messages': the residual stream's storage (sent as stored)
};

// One step's measurements on this stage.
struct PipeStepStats {
  double loss_sum = 0.0;       // sum of the token losses computed here (last stage)
  double busy_s = 0.0;         // in forward and backward
  double wait_s = 0.0;         // blocked on a receive
  double span_s = 0.0;         // first action to the last send's completion
  int in_flight_peak = 0;      // most (micro-batch, chunk) activation sets held at once
};

class PipelineRuntime {
 public:
  // pp: the pipeline axis (stage s is rank s); tp: the tensor-parallel axis (scatter-gather).
  // be: the backend whose device memory holds the messages.
  PipelineRuntime(Communicator& pp, Communicator& tp, Backend& be, const PipeRuntimeConfig& cfg);

  const PipeRuntimeConfig& config() const { return cfg_; }
  const std::vector<PipeAction>& actions() const { return actions_; }
  // Global chunk index of local chunk c.
  int global(int c) const;
  int num_chunks() const { return cfg_.stages * cfg_.virtual_stages; }
  // Activation slots local chunk c needs (its forwards in flight at once, at least 1).
  int slots(int c) const;
  // (micro-batch, chunk) pairs in flight at most on this stage.
  int max_in_flight() const;

  // Runs this stage's schedule of one step; chunks[c] is local chunk c. Returns when every
  // action ran and every send completed.
  PipeStepStats run_step(const std::vector<PipeChunk*>& chunks);

  // Forward only, one batch, every local chunk in model order (evaluation, generation):
  // `count` floats per message (a batch smaller than a training micro-batch, or one sequence
  // longer than it: the buffer grows).
  // forward(c, x) runs local chunk c on input x (null on global chunk 0) and returns its output.
  void forward_only(int64_t count, const std::function<CView(int c, CView x)>& forward);

 private:
  struct SendBuf {
    DeviceBuffer data;
    CommHandle handle;
  };
  struct Posted {
    int buf;
    CommHandle handle;
  };
  struct RecvSpec {
    int peer, tag;
  };
  // The slice of a message of `count` elements this rank sends and receives.
  int64_t part_of(int64_t count) const;
  View slice_of(View buf, int64_t count) const;
  CView slice_of(CView buf, int64_t count) const;
  void gather_slices(View buf, int64_t count);
  void send(CView src, int peer, int tag);
  View rbuf(int b) const { return View(rbuf_[static_cast<size_t>(b)].raw(), cfg_.message_dtype); }
  CommDType wire_type() const { return comm_dtype_of(cfg_.message_dtype); }
  void wait_sends();
  std::vector<RecvSpec> step_receives() const;
  void post_more();
  std::vector<bool> paired_forwards() const;
  void wait_pair_receive(size_t i);
  int take_recv();  // the next posted receive, complete and gathered; returns its buffer
  void release_recv(int buf);

  Communicator& pp_;
  Communicator& tp_;
  Backend& be_;
  PipeRuntimeConfig cfg_;
  std::vector<PipeAction> actions_;
  // Per action: a forward that waits for its backward partner's receive too (posting order).
  std::vector<bool> paired_;
  std::vector<DeviceBuffer> rbuf_;  // kPipeRecvAhead posted + the one being consumed
  std::deque<SendBuf> send_pool_;    // grows to the most sends outstanding
  // Per step: receives in schedule order, those posted, the free receive buffers.
  std::vector<RecvSpec> rq_;
  size_t next_recv_ = 0;
  std::deque<Posted> posted_;
  std::vector<int> free_bufs_;
  // Per chunk, kept across steps: free activation slots (taken from the back) and the slot
  // of each micro-batch in flight.
  std::vector<std::vector<int>> free_slots_;
  std::vector<std::map<int, int>> slot_of_;
};

}  // namespace weft
