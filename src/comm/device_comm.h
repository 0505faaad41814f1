// Collectives on device buffers through a host communicator: the host-staged path for a
// backend whose memory the transport cannot read directly (MPI on cuda without a CUDA-aware
// build; every transport on cpu-guarded, which proves that only this adapter touches device
// memory on behalf of communication). NCCL needs none of this: it takes device pointers.
//
// For each buffer the adapter asks the backend for direct host access (HostAccess in
// backend/backend.h): granted (cpu: always; cpu-guarded: the buffer is unfenced for the
// call), the communicator works on the device memory in place; refused (cuda, or cpu-guarded
// with host_access = false), the buffer is staged through a host buffer (copy_to_host before,
// copy_to_device after), counted under `comm`.
//
// Only the blocking collectives the parameter stores need so far; the asynchronous ones
// (iall_reduce, ireduce_scatter_v, iall_gather_v) follow the same pattern with the staging
// buffer and the copy-back kept in the handle until wait(). Pointers and counts are those of
// Communicator (comm/communicator.h), on device buffers of the backend.
#pragma once
#include <cstdint>

#include "backend/backend.h"
#include "comm/communicator.h"

namespace weft {

class DeviceComm {
 public:
  DeviceComm(Communicator& comm, Backend& be) : comm_(comm), be_(be) {}

  Communicator& comm() const { return comm_; }
  Backend& backend() const { return be_; }

  // buf (count) = reduction over the group, in place.
  void all_reduce(void* buf, int64_t count, CommDType t, ReduceOp op);
  // send (size() * count) -> recv (count): rank r receives the reduction of block r.
  void reduce_scatter(const void* send, void* recv, int64_t count, CommDType t, ReduceOp op);
  // send (count) -> recv (size() * count), blocks in rank order.
  void all_gather(const void* send, void* recv, int64_t count, CommDType t);
  void broadcast(void* buf, int64_t count, CommDType t, int root);

 private:
  Communicator& comm_;
  Backend& be_;
};

}  // namespace weft
