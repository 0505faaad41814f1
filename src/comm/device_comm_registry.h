// Device communicators by name: what `--comm` and `[run] comm` select, i.e. how the engine
// moves DEVICE buffers between ranks (its tp, pp, dp and tied-embedding groups; host values
// such as a norm or a token count always go through the host communicator).
//   "mpi"   always there: DeviceCommunicator (comm/device_comm.h) over the host (MPI)
//           communicator: in place where the backend grants host access (cpu), staged through
//           host buffers counted under MemCategory::kComm otherwise (cuda, cpu-guarded with host
//           access refused). Any number of ranks may share one device.
//   "nccl"  NcclCommunicator (comm/nccl/), device pointers straight to NCCL on its own stream;
//           only for the cuda backend, one GPU per rank. It lives in weft_cuda and is added by
//           the program that links it (apps/weft.cc under WEFT_HAVE_CUDA), as the cuda backend
//           is (backend/registry.h): the plain weft library never sees CUDA.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "comm/device_comm.h"

namespace weft {

// A communicator on device buffers of `be` over the processes of `host` (collective over
// them). `host` and `be` outlive the result.
using DeviceCommFactory = std::function<std::unique_ptr<DeviceComm>(Communicator& host, Backend& be)>;

struct DeviceCommInfo {
  // The backends (by registry name) it works with; empty: every backend.
  std::vector<std::string> backends;
  // The default for those backends (nccl for cuda); a backend without one uses "mpi".
  bool preferred = false;
  // Point-to-point without tags, matched in posting order and started when waited for
  // (comm/p2p_queue.h; NCCL). The engine then runs the interleaved pipeline schedule with
  // paired exchanges (PipeRuntimeConfig::posting_order_p2p; per-action ones deadlock there).
  bool posting_order_p2p = false;
};

// Adds (or replaces) the device communicator `name`.
void register_device_comm(const std::string& name, DeviceCommInfo info, DeviceCommFactory factory);
// The names, in registration order ("mpi" first).
std::vector<std::string> device_comm_names();
// The communicator used for `backend` when none is asked for: a preferred one that lists the
// backend, otherwise "mpi".
std::string default_device_comm(const std::string& backend);
// The description of `comm` ("" = default_device_comm(backend)); check_device_comm's InputError
// for an unknown one.
DeviceCommInfo device_comm_info(const std::string& comm, const std::string& backend);
// InputError unless `comm` is registered and works with `backend`: names the known values, says
// that nccl needs a build with -DWEFT_CUDA=ON when absent, and which backends a known one
// takes. Creates nothing.
void check_device_comm(const std::string& comm, const std::string& backend);
// A device communicator `comm` ("" = default_device_comm(be.name())) over `host` for buffers of
// `be`; check_device_comm's InputError otherwise. Collective over host's processes.
std::unique_ptr<DeviceComm> make_device_comm(const std::string& comm, Communicator& host, Backend& be);

}  // namespace weft
