#include "backend/cpu_guarded/fence.h"

#include <execinfo.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/error.h"

namespace weft::guarded {

namespace {

// --- the handler's table of live regions (written under g_table_mutex, read lock-free) ---
struct Slot {
  std::atomic<uintptr_t> map{0};  // 0: free
  uintptr_t map_end = 0, data = 0, data_end = 0;
  size_t bytes = 0;
  MemCategory cat = MemCategory::kOther;
};
constexpr int kSlots = 1 << 14;
Slot g_slots[kSlots];
std::mutex g_table_mutex;
std::atomic<const char*> g_call{nullptr};
std::atomic<bool> g_backtrace{true};
struct sigaction g_prev;

size_t page_size() {
  static const size_t p = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return p;
}

int register_slot(const Region& r) {
  std::lock_guard<std::mutex> lock(g_table_mutex);
  for (int i = 0; i < kSlots; ++i) {
    Slot& s = g_slots[i];
    if (s.map.load(std::memory_order_relaxed) != 0) continue;
    s.map_end = r.map + r.map_len;
    s.data = r.data;
    s.data_end = r.data + r.bytes;
    s.bytes = r.bytes;
    s.cat = r.cat;
    s.map.store(r.map, std::memory_order_release);
    return i;
  }
  return -1;  // full: the region works, the handler just cannot name it
}

[[noreturn]] void die(const char* what) noexcept {
  const char* err = std::strerror(errno);
  (void)!write(2, what, std::strlen(what));
  (void)!write(2, err, std::strlen(err));
  (void)!write(2, "\n", 1);
  std::abort();
}

void protect(Region& r, int prot) noexcept {
  if (mprotect(reinterpret_cast<void*>(r.pages), r.pages_len, prot) != 0) die("cpu-guarded: mprotect failed: ");
}

// --- async-signal-safe formatting into a fixed line ---
struct Line {
  char buf[512];
  size_t n = 0;
  Line& str(const char* s) {
    while (*s && n < sizeof(buf) - 1) buf[n++] = *s++;
    return *this;
  }
  Line& num(uint64_t v, int base) {
    char tmp[24];
    int k = 0;
    do {
      tmp[k++] = "0123456789abcdef"[v % base];
      v /= base;
    } while (v);
    if (base == 16) str("0x");
    while (k && n < sizeof(buf) - 1) buf[n++] = tmp[--k];
    return *this;
  }
  Line& hex(uintptr_t v) { return num(v, 16); }
  Line& dec(uint64_t v) { return num(v, 10); }
};

const Slot* find_slot(uintptr_t addr) {
  for (const Slot& s : g_slots) {
    const uintptr_t map = s.map.load(std::memory_order_acquire);
    if (map != 0 && addr >= map && addr < s.map_end) return &s;
  }
  return nullptr;
}

// The one line naming what was touched, and by whom.
void describe(const Slot& s, uintptr_t addr, Line& l) {
  const char* call = g_call.load(std::memory_order_relaxed);
  const bool inside = addr >= s.data && addr < s.data_end;
  if (inside && !call) {
    l.str("cpu-guarded: host access to device buffer ");
  } else if (inside) {
    l.str("cpu-guarded: backend call '").str(call).str("' touched device buffer ");
  } else {
    l.str("cpu-guarded: access ").dec(addr < s.data ? s.data - addr : addr - s.data_end + 1);
    l.str(addr < s.data ? " bytes before the start of device buffer " : " bytes past the end of device buffer ");
  }
  l.hex(s.data).str(" (").dec(s.bytes).str(" bytes, category ").str(mem_category_name(s.cat));
  l.str(") at address ").hex(addr);
  if (inside && !call) {
    l.str(" \xe2\x80\x94 something above the backend touched device memory\n");
  } else if (inside) {
    l.str(" \xe2\x80\x94 none of the call's pointer arguments lies in that buffer\n");
  } else {
    l.str(" \xe2\x80\x94 an overrun");
    if (call) l.str(" inside backend call '").str(call).str("'");
    l.str("\n");
  }
}

// Hands the signal to the handler installed before ours; with the default one, restores it
// and returns: the access runs again and the process dies of SIGSEGV, with its core.
void chain(int sig, siginfo_t* info, void* ctx) {
  if ((g_prev.sa_flags & SA_SIGINFO) && g_prev.sa_sigaction) {
    g_prev.sa_sigaction(sig, info, ctx);
  } else if (!(g_prev.sa_flags & SA_SIGINFO) && g_prev.sa_handler != SIG_DFL && g_prev.sa_handler != SIG_IGN) {
    g_prev.sa_handler(sig);
  } else {
    signal(sig, SIG_DFL);
  }
}

void on_segv(int sig, siginfo_t* info, void* ctx) {
  const Slot* s = info->si_code > 0 ? find_slot(reinterpret_cast<uintptr_t>(info->si_addr)) : nullptr;
  if (s) {
    Line l;
    describe(*s, reinterpret_cast<uintptr_t>(info->si_addr), l);
    (void)!write(2, l.buf, l.n);
    if (g_backtrace.load(std::memory_order_relaxed)) {
      void* frames[64];
      backtrace_symbols_fd(frames, backtrace(frames, 64), 2);
    }
  }
  chain(sig, info, ctx);
}

}  // namespace

Region map_region(size_t bytes, MemCategory cat) {
  const size_t page = page_size(), rounded = (bytes + 63) / 64 * 64;
  Region r;
  r.pages_len = (rounded + page - 1) / page * page;
  r.map_len = r.pages_len + 2 * page;
  void* m = mmap(nullptr, r.map_len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) {
    throw_runtime("cpu-guarded: cannot map {} bytes of {} memory: {}", bytes, mem_category_name(cat),
                  std::strerror(errno));
  }
  r.map = reinterpret_cast<uintptr_t>(m);
  r.pages = r.map + page;
  r.data = r.pages + r.pages_len - rounded;
  r.bytes = bytes;
  r.cat = cat;
  r.slot = register_slot(r);
  return r;
}

void unmap_region(Region& r) noexcept {
  if (r.slot >= 0) g_slots[r.slot].map.store(0, std::memory_order_release);
  if (munmap(reinterpret_cast<void*>(r.map), r.map_len) != 0) die("cpu-guarded: munmap failed: ");
  r = Region{};
}

void open_region(Region& r) noexcept {
  if (r.opens++ == 0) protect(r, PROT_READ | PROT_WRITE);
}

void close_region(Region& r) noexcept {
  if (r.opens <= 0) {
    constexpr char kMsg[] =
        "cpu-guarded: a device buffer was closed more often than it was opened (end_host_access without "
        "begin_host_access?)\n";
    (void)!write(2, kMsg, sizeof(kMsg) - 1);
    std::abort();
  }
  if (--r.opens == 0) protect(r, PROT_NONE);
}

void set_current_call(const char* name) noexcept { g_call.store(name, std::memory_order_relaxed); }

void install_fault_handler(bool backtrace_on) {
  g_backtrace.store(backtrace_on);
  static std::once_flag once;
  std::call_once(once, [] {
    void* frames[4];
    backtrace(frames, 4);  // loads libgcc's unwinder now: backtrace() may allocate on first use
    struct sigaction sa {};
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGSEGV, &sa, &g_prev) != 0) {
      throw_runtime("cpu-guarded: cannot install the SIGSEGV handler: {}", std::strerror(errno));
    }
  });
}

}  // namespace weft::guarded
