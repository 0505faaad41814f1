// A Communicator on device buffers of one backend, through a host communicator: the
// host-staged path for a backend whose memory the transport cannot read directly (MPI on cuda
// without a CUDA-aware build; every transport on cpu-guarded, which proves that only this
// adapter touches device memory on behalf of communication). NCCL needs none of this: it
// takes device pointers.
//
// Every buffer argument of every call is DEVICE memory of the backend (a pointer returned by
// device_alloc or an interior pointer into one allocation); counts, dtypes and semantics are
// Communicator's (comm/communicator.h). Host values (a norm's double, token counts) go
// through host(), the wrapped communicator.
//
// For each buffer the adapter asks the backend for direct host access (HostAccess in
// backend/backend.h): granted (cpu: always, and nothing is copied; cpu-guarded: the
// allocation is unfenced while the call is in flight), the host communicator works on the
// device memory in place; refused (cuda, or cpu-guarded with host_access = false), the buffer
// is staged through a host buffer counted under MemCategory::kComm: copied in before the call
// when the call reads it (copy_to_host), copied back after it when the call writes it
// (copy_to_device). A range that lies inside another argument's range (in-place calls:
// all_gather_v from params + shard_begin into params, reduce_scatter with send == recv) is
// viewed inside that argument's host view, so the host communicator still sees the in-place
// call.
//
// Groups of one rank move nothing through the host: every collective is the identity there,
// so the adapter copies on the device where send and receive differ and records the call in
// the trace as the host communicator would (same kind, axis, bytes, group).
//
// Asynchronous calls: the access scopes / staging buffers and the copy-back live in the
// returned handle; the received data are on the device once wait() returns or test() returns
// true (the copy-back happens there), and destroying a handle waits for it, as Communicator
// says. If a wait fails (CommTimeout), the staging buffers are leaked and the buffers left
// unfenced: the transport may still write into them.
//
// Threads and order: like the backend, one thread at a time; device writes issued before a
// call are visible to it (HostAccess and the copies synchronise the backend first).
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "comm/communicator.h"

namespace weft {

// A communicator on DEVICE buffers of one backend, with the host communicator over the same
// processes for host values: what the parameter stores and the engine hold. Two kinds:
// DeviceCommunicator below (any backend, through a host communicator) and NcclCommunicator
// (comm/nccl/nccl_comm.h, cuda); comm/device_comm_registry.h picks one by name.
class DeviceComm : public Communicator {
 public:
  // The host communicator over the same processes, for host buffers.
  virtual Communicator& host() const = 0;
  virtual Backend& backend() const = 0;
};

// comm.split(...) as the DeviceComm it is (both kinds split into their own kind); collective
// over `comm` like split.
std::unique_ptr<DeviceComm> split_device_comm(DeviceComm& comm, int color, int key, const std::string& axis);

class DeviceCommunicator final : public DeviceComm {
 public:
  // Wraps `host` (not owned; it must outlive this object) for device buffers of `be`.
  DeviceCommunicator(Communicator& host, Backend& be);
  // Owns `host` (what split() returns).
  DeviceCommunicator(std::unique_ptr<Communicator> host, Backend& be);
  ~DeviceCommunicator() override;

  // The wrapped communicator, for host buffers.
  Communicator& host() const override { return host_; }
  Backend& backend() const override { return be_; }

  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }
  const std::string& axis() const override { return host_.axis(); }
  const std::vector<int>& world_ranks() const override { return host_.world_ranks(); }

  // --- blocking, on device buffers ---
  void all_reduce(void* buf, int64_t count, CommDType t, ReduceOp op) override;
  void reduce_scatter(const void* send, void* recv, int64_t count, CommDType t, ReduceOp op) override;
  void reduce_scatter_v(const void* send, void* recv, const std::vector<int64_t>& counts, CommDType t,
                        ReduceOp op) override;
  void all_gather(const void* send, void* recv, int64_t count, CommDType t) override;
  void all_gather_v(const void* send, void* recv, const std::vector<int64_t>& counts, CommDType t) override;
  void broadcast(void* buf, int64_t count, CommDType t, int root) override;
  void all_to_all_v(const void* send, void* recv, const std::vector<int64_t>& counts, CommDType t) override;
  void send(const void* buf, int64_t count, CommDType t, int peer, int tag) override;
  void recv(void* buf, int64_t count, CommDType t, int peer, int tag) override;
  void barrier() override;

  // --- asynchronous, on device buffers: see above for when the data are on the device ---
  CommHandle iall_reduce(void* buf, int64_t count, CommDType t, ReduceOp op) override;
  CommHandle ireduce_scatter_v(const void* send, void* recv, const std::vector<int64_t>& counts, CommDType t,
                               ReduceOp op) override;
  CommHandle iall_gather_v(const void* send, void* recv, const std::vector<int64_t>& counts, CommDType t) override;
  CommHandle iall_to_all_v(const void* send, void* recv, const std::vector<int64_t>& counts, CommDType t) override;
  CommHandle isend(const void* buf, int64_t count, CommDType t, int peer, int tag) override;
  CommHandle irecv(void* buf, int64_t count, CommDType t, int peer, int tag) override;

  void progress() override;

  // A DeviceCommunicator on the same backend that owns the host communicator's split.
  std::unique_ptr<Communicator> split(int color, int key, const std::string& axis) override;

  void set_timeout(std::chrono::milliseconds t) override;
  std::chrono::milliseconds timeout() const override { return host_.timeout(); }
  void set_tracer(Tracer* tracer) override;
  Tracer* tracer() const override { return host_.tracer(); }

 private:
  std::unique_ptr<Communicator> owned_;
  Communicator& host_;
  Backend& be_;
};

}  // namespace weft
