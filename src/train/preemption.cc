#include "train/preemption.h"

#include <fmt/format.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstring>

#include "comm/tracer.h"
#include "core/error.h"
#include "core/log.h"
#include "train/run_folder.h"

namespace weft {

namespace {

// The handler and the loop share one word, so that reading the signal and advancing the step
// the handler names happen in one atomic step (compare-and-swap): a signal is either seen at
// this boundary (and its line names this step) or at the next one (and names the next).
//   bits 0-7: the first signal received (0: none), sticky; bits 8-9: SignalPhase; 10-63: step
constexpr uint64_t kSignalMask = 0xff;
constexpr int kPhaseShift = 8;
constexpr uint64_t kPhaseMask = uint64_t{3} << kPhaseShift;
constexpr int kStepShift = 10;

std::atomic<uint64_t> g_word{0};
std::atomic<int64_t> g_signal_ns{0};  // CLOCK_MONOTONIC when the first signal arrived
std::atomic<bool> g_installed{false};
int g_rank = 0;
bool g_checkpoint_on_signal = true;
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<int64_t>::is_always_lock_free,
              "the signal handler needs lock-free atomics (async-signal-safe)");

uint64_t pack(int signal, SignalPhase phase, int64_t step) {
  return static_cast<uint64_t>(signal) | (static_cast<uint64_t>(phase) << kPhaseShift) |
         (static_cast<uint64_t>(step) << kStepShift);
}
int signal_of(uint64_t w) { return static_cast<int>(w & kSignalMask); }
SignalPhase phase_of(uint64_t w) { return static_cast<SignalPhase>((w & kPhaseMask) >> kPhaseShift); }
int64_t step_of(uint64_t w) { return static_cast<int64_t>(w >> kStepShift); }

// Replaces phase and step, keeping the signal bits; returns the signal seen.
int update_word(SignalPhase phase, int64_t step) {
  uint64_t old = g_word.load();
  while (!g_word.compare_exchange_weak(old, pack(signal_of(old), phase, step))) {
  }
  return signal_of(old);
}

int64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe (POSIX.1-2008)
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// A line assembled without allocation or locale (the handler may not call fmt or malloc).
struct SignalLine {
  char buf[512];
  size_t n = 0;
  void add(const char* s) {
    while (*s != '\0' && n < sizeof(buf) - 1) buf[n++] = *s++;
  }
  void add_int(int64_t v) {
    char digits[24];
    int k = 0;
    const bool neg = v < 0;
    uint64_t u = neg ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
    do digits[k++] = static_cast<char>('0' + u % 10); while ((u /= 10) != 0);
    if (neg) add("-");
    while (k > 0 && n < sizeof(buf) - 1) buf[n++] = digits[--k];
  }
};

const char* signal_text(int sig) { return sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "a signal"; }

// "weft: rank R received SIGTERM (from pid P, the parent process)"
void add_receipt(SignalLine& l, int sig, const siginfo_t* info) {
  l.add("weft: rank ");
  l.add_int(g_rank);
  l.add(" received ");
  l.add(signal_text(sig));
  if (info != nullptr && (info->si_code == SI_USER || info->si_code == SI_QUEUE) && info->si_pid > 0) {
    l.add(" (from pid ");
    l.add_int(info->si_pid);
    if (info->si_pid == getppid()) l.add(", the parent process");
    l.add(")");
  }
}

// What the run does now, for the first signal, given the state the handler found.
void add_first_consequence(SignalLine& l, SignalPhase phase, int64_t step) {
  if (phase == SignalPhase::kSetup) return l.add(" during setup; stopping before the first step, without a checkpoint\n");
  if (phase == SignalPhase::kFinishing) return l.add(" after the last step; the run ends after its final report\n");
  l.add(phase == SignalPhase::kCheckpoint ? " while a checkpoint is written; finishing it, then stopping after step "
                                          : "; stopping after step ");
  l.add_int(step);
  l.add(" at a consistent point (every rank stops after the same step)");
  if (phase == SignalPhase::kCheckpoint) return l.add("\n");
  l.add(g_checkpoint_on_signal ? ", then writing its checkpoint\n" : ", without a checkpoint ([checkpoint] on_signal = false)\n");
}

// A further signal changes nothing; the line says so.
void add_again_consequence(SignalLine& l, SignalPhase phase, int64_t step) {
  if (phase == SignalPhase::kSetup) return l.add(" again; already stopping before the first step\n");
  if (phase == SignalPhase::kFinishing) return l.add(" again; the run ends after its final report\n");
  l.add(" again; already stopping after step ");
  l.add_int(step);
  l.add(" (a checkpoint being written is finished first; it is written atomically, so even SIGKILL leaves the newest "
        "complete checkpoint intact)\n");
}

extern "C" void on_stop_signal(int sig, siginfo_t* info, void*) {
  const int saved_errno = errno;
  uint64_t old = g_word.load();
  while (signal_of(old) == 0 && !g_word.compare_exchange_weak(old, old | static_cast<uint64_t>(sig & 0xff))) {
  }
  const bool again = signal_of(old) != 0;
  if (!again) g_signal_ns.store(monotonic_ns());
  SignalLine l;
  add_receipt(l, sig, info);
  (again ? add_again_consequence : add_first_consequence)(l, phase_of(old), step_of(old));
  ssize_t unused = ::write(STDERR_FILENO, l.buf, l.n);  // one write: the line is not interleaved
  (void)unused;
  errno = saved_errno;
}

struct sigaction install_one(int sig) {
  struct sigaction sa {}, old{};
  sa.sa_sigaction = on_stop_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;  // file writes and MPI's system calls continue
  sigemptyset(&sa.sa_mask);
  sigaddset(&sa.sa_mask, SIGTERM);
  sigaddset(&sa.sa_mask, SIGINT);
  if (sigaction(sig, &sa, &old) != 0) throw_runtime("cannot install the {} handler: {}", signal_name(sig), std::strerror(errno));
  return old;
}

}  // namespace

SignalStopGuard::SignalStopGuard(int rank, bool checkpoint_on_signal) {
  if (g_installed.exchange(true)) throw_runtime("SignalStopGuard: the signal handlers are installed already");
  g_rank = rank;
  g_checkpoint_on_signal = checkpoint_on_signal;
  g_word.store(pack(0, SignalPhase::kSetup, 0));
  g_signal_ns.store(0);
  old_term_ = install_one(SIGTERM);
  old_int_ = install_one(SIGINT);
}

SignalStopGuard::~SignalStopGuard() {
  sigaction(SIGTERM, &old_term_, nullptr);
  sigaction(SIGINT, &old_int_, nullptr);
  g_installed.store(false);
}

StopVote agree_on_stop(Communicator& world, int64_t done, bool last) {
  const int local = update_word(last ? SignalPhase::kFinishing : SignalPhase::kTraining, done + 1);
  int64_t v[2] = {local, local != 0 ? monotonic_ns() - g_signal_ns.load() : 0};
  Tracer* tracer = world.tracer();
  const std::string phase = tracer ? tracer->phase() : std::string();
  if (tracer) tracer->set_phase("preemption");
  world.all_reduce(v, 2, CommDType::kI64, ReduceOp::kMax);
  if (tracer) tracer->set_phase(phase);
  // Stopping here: a later signal's line names this step (the stop checkpoint's), not the next.
  if (v[0] != 0) update_word(last ? SignalPhase::kFinishing : SignalPhase::kTraining, done);
  return {static_cast<int>(v[0]), static_cast<double>(v[1]) * 1e-9};
}

CheckpointSignalScope::CheckpointSignalScope() {
  const uint64_t w = g_word.load();
  update_word(SignalPhase::kCheckpoint, step_of(w));
}

CheckpointSignalScope::~CheckpointSignalScope() {
  const uint64_t w = g_word.load();
  update_word(SignalPhase::kTraining, step_of(w));
}

int stop_at_boundary(Communicator& world, int64_t done, bool saved, const StopContext& ctx) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  const StopVote vote = agree_on_stop(world, done, done == ctx.total_steps);
  if (vote.signal == 0) return 0;
  StopReport rep;
  rep.signal = vote.signal, rep.first_step = ctx.first_step, rep.done = done, rep.total_steps = ctx.total_steps;
  rep.on_signal = ctx.on_signal;
  if (done > ctx.first_step && (saved || ctx.on_signal)) {
    const auto w0 = clock::now();
    rep.checkpoint = saved ? ctx.saved_dir : ctx.save();
    rep.written_now = !saved;
    rep.write_s = std::chrono::duration<double>(clock::now() - w0).count();
  } else if (ctx.rank0 && done > ctx.first_step) {
    const auto all = list_checkpoints(ctx.run_dir);
    if (!all.empty()) rep.newest_checkpoint = all.back().second;
  }
  rep.since_signal_s = vote.since_signal_s + std::chrono::duration<double>(clock::now() - t0).count();
  if (ctx.rank0) log_warn("{}", stop_message(rep));
  return vote.signal;
}

std::string signal_name(int signal) {
  if (signal == SIGTERM) return "SIGTERM";
  if (signal == SIGINT) return "SIGINT";
  return fmt::format("signal {}", signal);
}

std::string stop_message(const StopReport& r) {
  const std::string sig = signal_name(r.signal);
  if (r.done <= r.first_step) {
    return fmt::format("weft: stopped by {} during setup ({:.2f} s after the signal), before step {}; no checkpoint written "
                       "(no step ran); exit code {}",
                       sig, r.since_signal_s, r.first_step + 1, train_exit_code(r.signal, r.done, r.total_steps));
  }
  std::string head = r.done == r.total_steps
                         ? fmt::format("weft: stopped by {} after the last step ({}): training is complete", sig, r.done)
                         : fmt::format("weft: stopped by {} after step {} of {}", sig, r.done, r.total_steps);
  head += fmt::format(" ({:.2f} s after the signal); ", r.since_signal_s);
  std::string tail;
  if (!r.checkpoint.empty()) {
    tail = r.written_now ? fmt::format("checkpoint {} written in {:.2f} s", r.checkpoint, r.write_s)
                         : fmt::format("checkpoint {} (written at that step)", r.checkpoint);
  } else {
    tail = fmt::format("no checkpoint written ([checkpoint] on_signal = false); {}",
                       r.newest_checkpoint.empty() ? std::string("the run folder holds no checkpoint: a new run starts over")
                                                   : fmt::format("--resume continues from {}", r.newest_checkpoint));
  }
  if (r.done == r.total_steps) return head + tail + "; the final report and sample were skipped; exit code 0";
  return head + tail + fmt::format("; resume with --resume; exit code {}", train_exit_code(r.signal, r.done, r.total_steps));
}

int train_exit_code(int stop_signal, int64_t steps_done, int64_t total_steps) {
  if (stop_signal == 0 || steps_done >= total_steps) return 0;
  return 128 + stop_signal;
}

}  // namespace weft
