// Fenced memory for the cpu-guarded backend: each allocation is its own mmap, page-granular,
//
//   [guard page][slack | data .............................][guard page]
//               ^ pages (PROT_NONE unless opened)           ^ data ends here (64-byte aligned)
//
// with the data pushed against the trailing guard page (its start 64-byte aligned, so that
// the CPU kernels see the alignment they see on the cpu backend: bitwise parity) and a
// PROT_NONE guard page on either side. The data pages stay PROT_NONE except while opened
// (open_region / close_region count nested opens), so a host access faults at once. Inside a
// call, an overrun of less than 64 bytes past a buffer whose size is not a multiple of 64
// stays in the slack of its last page and goes unnoticed; a host access to it still faults.
//
// A SIGSEGV handler (install_fault_handler) recognises faults inside a region, its slack or
// its guard pages and prints one line naming the buffer before it hands the signal on to the
// handler that was installed before it (the default one kills the process with SIGSEGV):
//   cpu-guarded: host access to device buffer 0x7f.. (4096 bytes, category params) at
//   address 0x7f.. — something above the backend touched device memory
// The handler reads a fixed table of regions (lock-free, async-signal-safe); it knows every
// live region of every cpu-guarded backend of the process.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/memory.h"

namespace weft::guarded {

struct Region {
  uintptr_t map = 0;    // start of the mapping (leading guard page)
  size_t map_len = 0;   // guard + pages + guard
  uintptr_t pages = 0;  // first data page
  size_t pages_len = 0;
  uintptr_t data = 0;   // what device_alloc returns
  size_t bytes = 0;     // requested bytes
  MemCategory cat = MemCategory::kOther;
  int slot = -1;        // in the handler's table (-1: table full, no diagnostic)
  int opens = 0;        // open references (calls, host-access scopes); PROT_NONE when zero

  bool contains(uintptr_t p, size_t n) const { return p >= data && p + n <= data + bytes; }
};

// Maps a fenced region of `bytes` (> 0) and registers it with the handler. Throws
// RuntimeError naming the size when mmap fails.
Region map_region(size_t bytes, MemCategory cat);
// Unregisters and unmaps it.
void unmap_region(Region& r) noexcept;
// Reference-counted open/close of one region: the data pages are readable and writable while
// opens > 0 and PROT_NONE again only when the last opener closes. Openers are the backend's
// calls (one open per pointer argument, so two views of one allocation open it twice) and
// host-access scopes (begin_host_access), which may stay open across many calls while an
// asynchronous communication is in flight. A close without an open, or a failing mprotect,
// aborts with a message (it happens in destructors and cannot be recovered).
void open_region(Region& r) noexcept;
void close_region(Region& r) noexcept;

// The name of the backend call in progress (nullptr: none), for the handler's message.
void set_current_call(const char* name) noexcept;

// Installs the SIGSEGV handler once per process (later calls only update `backtrace`):
// chained to the handler found at installation. backtrace: also print the faulting stack
// (glibc backtrace_symbols_fd) after the line.
void install_fault_handler(bool backtrace);

}  // namespace weft::guarded
