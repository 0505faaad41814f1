// The NCCL transport: a Communicator (comm/communicator.h) over DEVICE buffers, for the CUDA
// backend. Created from a host communicator (the MPI world or one of its axis groups) that
// spans the same processes: rank 0 makes the ncclUniqueId and broadcasts it over the host
// communicator, then every rank joins (ncclCommInitRankConfig, non-blocking). Each process
// must have selected its device first (gpu::select_device, or a CudaBackend).
//
// How it behaves (beyond comm/communicator.h):
// - Streams: every operation runs on the communicator's own stream (stream()), so it
//   overlaps the compute stream. Before each operation the communication stream waits for
//   the work enqueued so far on the compute stream given to set_compute_stream() (an event,
//   no host synchronisation), so buffers written by kernels are complete when NCCL reads
//   them. Blocking calls return when the operation has completed on the GPU; asynchronous
//   handles complete when wait()/test() observe the completion event.
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
// - send/recv: NCCL matches point-to-point operations between two ranks in posting order;
//   the tag is not used. A rank cannot send to itself (deadlock on one stream).
// - split(): splits the host communicator (for the members' world ranks) and the NCCL
//   communicator (ncclCommSplit); the child owns its host sub-communicator and inherits the
//   timeout, tracer and compute stream.
// - Groups of one rank make no NCCL call (a device copy where send != recv).
#pragma once
#include <memory>
#include <string>

#include "backend/cuda/gpu_runtime.h"
#include "comm/communicator.h"

namespace weft {

class NcclCommunicator : public Communicator {
 public:
  ~NcclCommunicator() override = default;
  // The stream NCCL operations run on.
  virtual gpu::Stream stream() const = 0;
  // Operations wait (on the GPU) for work enqueued on `s` before them; null: no ordering.
  virtual void set_compute_stream(gpu::Stream s) = 0;
};

// An NCCL communicator over the processes of `host` (collective over them; host must
// outlive the result). axis: the name (default: host.axis()).
std::unique_ptr<NcclCommunicator> make_nccl_communicator(Communicator& host, const std::string& axis = "");

}  // namespace weft
