// The communication interface every parallel axis uses. One implementation per transport:
// mpi/ (CPU tensors, OpenMPI), later nccl/ (CUDA tensors). A Communicator spans one group of
// processes (the world, or one axis group of the ProcessGrid); every collective on a group of
// size 1 is a no-op (a copy where input and output differ). No global state: communicators
// are created from the world communicator and passed explicitly.
//
// Every call is recorded by the Tracer the communicator was given (if any): kind, axis,
// bytes, peer or group, start time and duration (for asynchronous calls: until wait()).
// Blocking calls and wait() give up after the configured timeout with a CommTimeout error
// naming the call, the axis and the ranks, so a dead or stalled rank stops the job instead
// of hanging it.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace weft {

class Tracer;

// Element types on the wire. kBF16 and kF16 are 16-bit floats (core/dtype.h's bf16 bits and
// IEEE binary16): NCCL reduces them natively; the MPI communicator reduces them with its own
// MPI operations that add in fp32 and round once per pairwise combination (so the result of a
// sum over more than two ranks can differ from NCCL's in the last bit: NCCL's order is its own).
enum class CommDType { kF32, kF64, kI32, kI64, kU8, kBF16, kF16 };
size_t comm_dtype_size(CommDType t);
const char* comm_dtype_name(CommDType t);  // "f32", "f64", "i32", "i64", "u8", "bf16", "f16"

// The wire type of a float tensor's dtype (f32, bf16, f16; InputError for any other).
CommDType comm_dtype_of(DType t);
// Its inverse: the float tensor dtype of a wire type (InputError for a non-float one).
DType float_dtype_of(CommDType t);

enum class ReduceOp { kSum, kMax, kMin };

// A collective or point-to-point operation did not complete within the timeout.
class CommTimeout : public std::runtime_error {
 public:
  explicit CommTimeout(const std::string& msg) : std::runtime_error(msg) {}
};

// Handle of an asynchronous operation. wait() blocks until it completes (or times out);
// test() polls without blocking and returns true once complete. Destroying a handle that
// was not waited for waits for it.
class CommRequest {
 public:
  virtual ~CommRequest() = default;
  virtual void wait() = 0;
  virtual bool test() = 0;
};
using CommHandle = std::unique_ptr<CommRequest>;

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;  // rank within this group
  virtual int size() const = 0;
  // Name of the axis this group belongs to ("world", "tp", "pp", "dp", ...): used in traces
  // and error messages.
  virtual const std::string& axis() const = 0;
  // World ranks of this group's members, in group-rank order.
  virtual const std::vector<int>& world_ranks() const = 0;

  // --- blocking ---
  // In place: buf (count) = reduction over the group.
  virtual void all_reduce(void* buf, int64_t count, CommDType t, ReduceOp op) = 0;
  // send (size() * count) -> recv (count): rank r receives the reduction of block r.
  virtual void reduce_scatter(const void* send, void* recv, int64_t count, CommDType t, ReduceOp op) = 0;
  // Uneven blocks: rank r receives counts[r] elements, the blocks lie in rank order in send.
  virtual void reduce_scatter_v(const void* send, void* recv, const std::vector<int64_t>& counts, CommDType t,
                                ReduceOp op) = 0;
  // send (count) -> recv (size() * count), blocks in rank order. send may alias its block of recv.
  virtual void all_gather(const void* send, void* recv, int64_t count, CommDType t) = 0;
  // Uneven blocks: rank r contributes counts[r] elements; recv holds them in rank order.
  virtual void all_gather_v(const void* send, void* recv, const std::vector<int64_t>& counts, CommDType t) = 0;
  virtual void broadcast(void* buf, int64_t count, CommDType t, int root) = 0;
  // All-to-all with uneven blocks. counts is the group's whole size() x size() matrix, row
  // major: counts[i * size() + j] = elements rank i sends to rank j (every rank passes the same
  // matrix). This rank's send holds row rank() in rank order (its blocks for ranks 0, 1, ...),
  // recv receives column rank() in rank order (the blocks from ranks 0, 1, ...). send and recv
  // must not overlap. Blocks of zero elements are allowed; a rank's own block (the diagonal)
  // is copied from send to recv.
  virtual void all_to_all_v(const void* send, void* recv, const std::vector<int64_t>& counts, CommDType t) = 0;
  virtual void send(const void* buf, int64_t count, CommDType t, int peer, int tag) = 0;
  virtual void recv(void* buf, int64_t count, CommDType t, int peer, int tag) = 0;
  virtual void barrier() = 0;

  // --- asynchronous: same semantics; buffers must stay valid until the handle completes ---
  virtual CommHandle iall_reduce(void* buf, int64_t count, CommDType t, ReduceOp op) = 0;
  virtual CommHandle ireduce_scatter_v(const void* send, void* recv, const std::vector<int64_t>& counts,
                                       CommDType t, ReduceOp op) = 0;
  virtual CommHandle iall_gather_v(const void* send, void* recv, const std::vector<int64_t>& counts,
                                   CommDType t) = 0;
  virtual CommHandle iall_to_all_v(const void* send, void* recv, const std::vector<int64_t>& counts,
                                   CommDType t) = 0;
  virtual CommHandle isend(const void* buf, int64_t count, CommDType t, int peer, int tag) = 0;
  virtual CommHandle irecv(void* buf, int64_t count, CommDType t, int peer, int tag) = 0;

  // Drives outstanding asynchronous operations forward (MPI progresses non-blocking
  // collectives only inside MPI calls; the trainer calls this between layers).
  virtual void progress() = 0;

  // A sub-group: members with the same color form one group, ordered by key. `axis` names it.
  virtual std::unique_ptr<Communicator> split(int color, int key, const std::string& axis) = 0;

  // Timeout of blocking calls and wait(); zero means none.
  virtual void set_timeout(std::chrono::milliseconds t) = 0;
  virtual std::chrono::milliseconds timeout() const = 0;
  virtual void set_tracer(Tracer* tracer) = 0;
  virtual Tracer* tracer() const = 0;  // null: none

  // Convenience wrappers for float buffers.
  void all_reduce_sum(float* buf, int64_t n) { all_reduce(buf, n, CommDType::kF32, ReduceOp::kSum); }
  void all_reduce_sum(double* buf, int64_t n) { all_reduce(buf, n, CommDType::kF64, ReduceOp::kSum); }
};

}  // namespace weft
