// cpu-guarded: the CPU backend with its device memory fenced from the host. It proves,
// without a GPU, that nothing above the backend touches device memory: a model, a parameter
// store or an optimizer that passes host memory to an op, or reads device memory from the
// host, fails at once on this backend, where on a GPU it would read garbage or crash later.
//
// What it does (fence.h has the memory layout):
//   * device_alloc maps each buffer with mmap, page-granular, with a PROT_NONE guard page on
//     either side; the data pages are PROT_NONE too.
//   * each op, copy and fill first checks that every device pointer it is given lies in a
//     live buffer of this backend (RuntimeError naming the call, the argument index and the
//     pointer otherwise: host memory given to an op), opens the buffers its pointers fall in
//     (PROT_READ | PROT_WRITE), runs the CPU backend's code, and closes them again. Only the
//     buffers of the call's arguments are open, so an op that runs past its buffer faults.
//   * any other access (a host read or write of device memory, an overrun into a guard page)
//     raises SIGSEGV; the handler (options.install_handler) prints one line naming the buffer,
//     its size and category and the faulting address, then the stack (options.backtrace), and
//     hands the signal on to the previous handler (by default the process dies of SIGSEGV).
//   * the results are BITWISE those of the cpu backend: the same code runs underneath, on
//     memory with the same 64-byte alignment.
//   * the optional fused ops are not forwarded: their defaults (backend.h) run here, on the
//     checked ops above, so a fused op is fenced step by step and gives cpu's bits (cpu
//     offers none; one it ever implements must be forwarded here too). Likewise the
//     quantization ops (quantize_blocks, dequantize_blocks) run their default: the reference
//     on host copies made through the checked copy_to_host / copy_to_device, which gives the
//     reference's bytes, as cpu's direct call does.
//   * begin_host_access opens one buffer for host-staged communication (HostAccess in
//     backend.h; DeviceCommunicator in comm/device_comm.h); nothing else may use it. Opens
//     are reference-counted per buffer: a scope may stay open across many calls (an
//     asynchronous collective in flight), two scopes may view one buffer (send and receive
//     ranges of an in-place gather), and the buffer is fenced again when the last one closes.
//     With host_access = false it refuses, as a GPU backend does, and the communication
//     stages through copies.
// Cost: two mprotect system calls per distinct buffer per call (see docs/backends.md); meant
// for tests and debugging, not for training runs.
// Threads: like every backend, one thread calls it at a time (OpenMP runs inside the CPU
// ops, after the buffers are opened and before they are closed). Two threads calling it
// concurrently are not supported: one could close a buffer the other's call still uses.
#pragma once
#include <memory>

#include "backend/backend.h"

namespace weft {

struct GuardedOptions {
  bool install_handler = true;  // the diagnostic SIGSEGV handler (chained; installed once per process)
  bool backtrace = true;        // print the faulting stack after the diagnostic line
  // false: begin_host_access refuses, as on a GPU, so that host-staged communication takes
  // its copying path (comm/device_comm.h); true: it unfences the buffer for the scope.
  bool host_access = true;
};

std::unique_ptr<Backend> make_cpu_guarded_backend(const GuardedOptions& options = {});

}  // namespace weft
