// The NCCL transport: a DeviceComm (comm/device_comm.h) over DEVICE buffers of a CudaBackend,
// what `--comm nccl` gives the engine (comm/device_comm_registry.h; apps/weft.cc registers it).
// Created from a host communicator (the MPI world or one of its axis groups) that spans the
// same processes: rank 0 makes the ncclUniqueId and broadcasts it over the host communicator,
// then every rank joins (ncclCommInitRankConfig, non-blocking). The backend has selected the
// process's device (one GPU per rank: NCCL refuses two ranks of one communicator on one
// device; ranks sharing a GPU use `--comm mpi`). Timeout and tracer start as the host's.
//
// How it behaves (beyond comm/communicator.h):
// - Streams: every operation runs on the communicator's own stream (stream()), so it
//   overlaps the compute stream. Before each operation the communication stream waits for
//   the work enqueued so far on the compute stream (the backend's stream(), or the one given
//   to set_compute_stream(); an event, no host synchronisation), so buffers written by
//   kernels are complete when NCCL reads them. Blocking calls return when the operation has
//   completed on the GPU; asynchronous handles complete when wait()/test() observe the
//   completion event, and kernels enqueued after that see the data.
// - Element types: f32, f64, i32, i64, u8 and the 16-bit floats bf16 and f16, reduced by NCCL
//   natively (ncclBfloat16, ncclFloat16).
// - Timeouts: wait() polls the completion event and ncclCommGetAsyncError with the MPI
//   communicator's back-off; after the timeout it calls ncclCommAbort and throws CommTimeout:
//   "weft: rank 1: all_reduce of 4.0 MiB on axis dp (ranks 0,1) did not complete within
//   5.0 s: a peer rank is dead or stalled (NCCL communicator aborted)". An aborted
//   communicator throws on every later call; the only sound reaction is to end the job
//   (abort_job in comm/world.h). An asynchronous NCCL error (a peer died, a network error)
//   throws RuntimeError with NCCL's message the same way.
// - NCCL has no uneven collectives: reduce_scatter_v is one ncclReduce per block and
//   all_gather_v one ncclBroadcast per block, in one NCCL group. In-place forms follow the
//   MPI communicator's conventions (reduce_scatter with send == recv leaves this rank's block
//   at the start of recv, staged through a temporary buffer when that block is not first).
//   all_to_all_v is one ncclSend and one ncclRecv per peer with a non-empty block, in one
//   NCCL group, and a device copy of this rank's own block (the diagonal).
// - send/recv: NCCL matches point-to-point operations between two ranks in posting order;
//   the tag is not used, so both sides must post a pair's messages in the same order (the
//   pipeline runtime does). isend/irecv only record the operation; it starts when it or a
//   later receive is waited for, together with every send posted so far, in one
//   ncclGroupStart/End group (comm/p2p_queue.h says why: receives posted ahead would otherwise
//   block this stream in front of the sends the peer waits for). test() on an operation not
//   started returns false without starting it. A collective first starts every held
//   point-to-point operation, so the stream keeps the posting order. A rank cannot send to
//   itself (deadlock on one stream).
// - split(): splits the host communicator (for the members' world ranks) and the NCCL
//   communicator (ncclCommSplit); the child owns its host sub-communicator and inherits the
//   timeout, tracer and compute stream.
// - Groups of one rank make no NCCL call (a device copy where send != recv).
#pragma once
#include <memory>
#include <string>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/gpu_runtime.h"
#include "comm/communicator.h"
#include "comm/device_comm.h"

namespace weft {

class NcclCommunicator : public DeviceComm {
 public:
  ~NcclCommunicator() override = default;
  // The stream NCCL operations run on.
  virtual gpu::Stream stream() const = 0;
  // Operations wait (on the GPU) for work enqueued on `s` before them; null: no ordering.
  virtual void set_compute_stream(gpu::Stream s) = 0;
};

// An NCCL communicator over the processes of `host` for buffers of `be`, ordered after be's
// stream (collective over the processes; host and be outlive the result). axis: the name
// (default: host.axis()).
std::unique_ptr<NcclCommunicator> make_nccl_communicator(Communicator& host, cuda::CudaBackend& be,
                                                         const std::string& axis = "");

// Adds "nccl" to the device communicators (comm/device_comm_registry.h): backend cuda only, and
// its default. Called by the program that links weft_cuda (apps/weft.cc), as register_backend.
void register_nccl_device_comm();

}  // namespace weft
