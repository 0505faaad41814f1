// libweft_diskfull_shim.so: LD_PRELOADed into `weft train` by tests/train/disk_full_test.cc to
// make the disk fill up at a chosen moment of a run. It watches the writes to
// $WEFT_DISKFULL_DIR/metrics.jsonl and, just before line $WEFT_DISKFULL_AT_LINE (1-based) is
// appended (line 0, inject mode only: from the start), fills the disk so that
// $WEFT_DISKFULL_LEAVE bytes remain:
//   WEFT_DISKFULL_MODE=tmpfs   the run folder lies on a small tmpfs: the shim writes the file
//                              $WEFT_DISKFULL_FILLER on it until that much is free, and the
//                              kernel itself then fails the run's writes with ENOSPC;
//   WEFT_DISKFULL_MODE=inject  (where no file system can be mounted) from then on, writes to
//                              files under the run folder fail with ENOSPC once that many more
//                              bytes were written; a write that crosses the limit is short,
//                              as the kernel's are.
// write, pwrite, pwrite64 and writev are intercepted (what the C library's callers use; stdio's
// internal writes are not interposable, and weft's run-folder writes do not use stdio).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

typedef ssize_t (*write_fn)(int, const void*, size_t);
typedef ssize_t (*pwrite_fn)(int, const void*, size_t, off_t);
typedef ssize_t (*writev_fn)(int, const struct iovec*, int);

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_init = 0;
static char g_dir[PATH_MAX];         // the run folder, resolved; empty: the shim does nothing
static long long g_at_line = -1;     // fill before this metrics line
static long long g_lines = 0;        // metrics lines appended so far
static long long g_budget = -1;      // inject mode, once filled: bytes still allowed; -1 unlimited
static int g_inject = 0;

static write_fn real_write(void) {
  static write_fn f = NULL;
  if (f == NULL) f = (write_fn)dlsym(RTLD_NEXT, "write");
  return f;
}

static void init_locked(void) {
  if (g_init) return;
  g_init = 1;
  const char* dir = getenv("WEFT_DISKFULL_DIR");
  const char* at = getenv("WEFT_DISKFULL_AT_LINE");
  const char* mode = getenv("WEFT_DISKFULL_MODE");
  if (dir == NULL || at == NULL || mode == NULL || realpath(dir, g_dir) == NULL) {
    g_dir[0] = '\0';
    return;
  }
  g_at_line = atoll(at);
  g_inject = strcmp(mode, "inject") == 0;
  // WEFT_DISKFULL_AT_LINE=0 in inject mode: the disk is full from the start, with
  // WEFT_DISKFULL_LEAVE bytes left for every file under the folder together (any writer).
  if (g_inject && g_at_line == 0) {
    g_budget = atoll(getenv("WEFT_DISKFULL_LEAVE") ? getenv("WEFT_DISKFULL_LEAVE") : "0");
    g_at_line = -1;
  }
}

// 1: `fd` is a file under the run folder; `*metrics`: it is the run's metrics.jsonl.
static int under_dir(int fd, int* metrics) {
  char link[64], path[PATH_MAX];
  snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(link, path, sizeof(path) - 1);
  if (n <= 0) return 0;
  path[n] = '\0';
  const size_t d = strlen(g_dir);
  if (strncmp(path, g_dir, d) != 0 || path[d] != '/') return 0;
  *metrics = strcmp(path + d, "/metrics.jsonl") == 0;
  return 1;
}

// tmpfs mode: writes the filler until `leave` bytes are free (all of it for 0: until ENOSPC).
static void fill_file_system(long long leave) {
  const char* filler = getenv("WEFT_DISKFULL_FILLER");
  const int fd = filler ? open(filler, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644) : -1;
  if (fd < 0) {
    fprintf(stderr, "diskfull shim: cannot create the filler '%s'\n", filler ? filler : "(WEFT_DISKFULL_FILLER unset)");
    abort();
  }
  static char zeros[65536];
  struct statvfs sv;
  while (statvfs(g_dir, &sv) == 0) {
    const long long free_bytes = (long long)sv.f_bavail * (long long)sv.f_frsize;
    long long want = free_bytes - leave;
    if (want <= 0) break;
    if (want > (long long)sizeof(zeros)) want = sizeof(zeros);
    if (real_write()(fd, zeros, (size_t)want) <= 0) break;  // ENOSPC: full
  }
  close(fd);
}

// Called before each write of `n` bytes to `fd`: fills the disk at the chosen line, and in
// inject mode returns how many of the n bytes may be written (0: fail with ENOSPC).
static size_t admit(int fd, const char* buf, size_t n) {
  pthread_mutex_lock(&g_mu);
  init_locked();
  size_t allowed = n;
  int metrics = 0;
  if (g_dir[0] != '\0' && under_dir(fd, &metrics)) {
    if (metrics && g_at_line > 0 && g_lines + 1 == g_at_line) {
      const long long leave = atoll(getenv("WEFT_DISKFULL_LEAVE") ? getenv("WEFT_DISKFULL_LEAVE") : "0");
      fprintf(stderr, "diskfull shim: disk full before metrics line %lld (%s, %lld bytes left)\n", g_at_line,
              g_inject ? "inject" : "tmpfs", leave);
      if (g_inject) g_budget = leave; else fill_file_system(leave);
      g_at_line = -1;
    }
    if (g_budget >= 0) {
      if ((long long)allowed > g_budget) allowed = (size_t)g_budget;
      g_budget -= (long long)allowed;
    }
    if (metrics) {
      for (size_t i = 0; i < allowed; ++i) g_lines += buf[i] == '\n';
    }
  }
  pthread_mutex_unlock(&g_mu);
  return allowed;
}

ssize_t write(int fd, const void* buf, size_t n) {
  const size_t ok = n == 0 ? 0 : admit(fd, (const char*)buf, n);
  if (n > 0 && ok == 0) {
    errno = ENOSPC;
    return -1;
  }
  return real_write()(fd, buf, ok);
}

static ssize_t pwrite_common(const char* name, int fd, const void* buf, size_t n, off_t off) {
  static pwrite_fn f = NULL;
  if (f == NULL) f = (pwrite_fn)dlsym(RTLD_NEXT, name);
  const size_t ok = n == 0 ? 0 : admit(fd, (const char*)buf, n);
  if (n > 0 && ok == 0) {
    errno = ENOSPC;
    return -1;
  }
  return f(fd, buf, ok, off);
}

ssize_t pwrite(int fd, const void* buf, size_t n, off_t off) { return pwrite_common("pwrite", fd, buf, n, off); }
ssize_t pwrite64(int fd, const void* buf, size_t n, off_t off) { return pwrite_common("pwrite64", fd, buf, n, off); }

// writev to a file under the run folder goes through write() of each buffer in turn (short and
// failing writes behave as above); any other writev is passed on untouched.
ssize_t writev(int fd, const struct iovec* iov, int cnt) {
  static writev_fn f = NULL;
  if (f == NULL) f = (writev_fn)dlsym(RTLD_NEXT, "writev");
  pthread_mutex_lock(&g_mu);
  init_locked();
  int metrics = 0;
  const int watched = g_dir[0] != '\0' && under_dir(fd, &metrics);
  pthread_mutex_unlock(&g_mu);
  if (!watched) return f(fd, iov, cnt);
  ssize_t total = 0;
  for (int i = 0; i < cnt; ++i) {
    const ssize_t w = write(fd, iov[i].iov_base, iov[i].iov_len);
    if (w < 0) return total > 0 ? total : -1;
    total += w;
    if ((size_t)w < iov[i].iov_len) break;
  }
  return total;
}
