// Records every communication call: what it was, on which axis, how many bytes, with whom,
// when it started and how long it took. Each Communicator is given a Tracer (set_tracer);
// groups made by split() inherit their parent's. One Tracer per process; the trainer calls
// set_step() at the start of each step and writes the events with write_jsonl().
//
// Bytes convention (TraceEvent::bytes): the size of the whole logical buffer the operation
// works on, the same on every rank of the group:
//   all_reduce           count * dtype size
//   reduce_scatter(_v)   the full input: sum of all blocks (size() * count for the even form)
//   all_gather(_v)       the full output: sum of all blocks (size() * count for the even form)
//   all_to_all           the full exchange: sum of the whole count matrix (every block
//                        every rank sends) * dtype size
//   broadcast            count * dtype size
//   send / recv          count * dtype size
//   barrier              0
// Wire traffic per rank follows from this with the usual factors (ring all-reduce moves
// 2 (n-1)/n of it, reduce-scatter and all-gather (n-1)/n, an all-to-all of even blocks sends
// (n-1)/n^2 of it from each rank); the planner applies them.
//
// Timing: start_s is Tracer::now() when the call was posted; duration_s runs until the
// completion was observed: for blocking calls until they return, for asynchronous calls
// (async = true) until wait(), test() or progress() saw the operation complete.
//
// Phase: what the process was doing (set_phase): "setup", "train" (the optimizer step: what
// plan/comm_model.h models), "metrics" (the step line's gathers), "eval", "checkpoint",
// "report", "sample", "preemption" (the per-step signal all-reduce, train/preemption.h).
// Stamped on each event like the step.
//
// Not thread-safe: use one Tracer from one thread (weft drives communication from the main
// thread only, MPI_THREAD_FUNNELED). A disabled Tracer (or none) costs one branch per call.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace weft {

struct TraceEvent {
  std::string kind;   // all_reduce, reduce_scatter, all_gather, all_to_all, broadcast, send, recv, barrier
  std::string axis;   // the communicator's axis: world, tp, pp, dp, ...
  int64_t bytes = 0;  // see the bytes convention above
  std::string group;  // the group's world ranks ("ranks 0,2") or, for send/recv, the peer's world rank ("peer 3")
  double start_s = 0;     // Tracer::now() at post
  double duration_s = 0;  // until completion was observed
  int64_t step = -1;      // the tracer's step when the call was posted
  bool async = false;     // posted by an i* call (completion observed by wait/test/progress)
  std::string phase;      // the tracer's phase when the call was posted
  // Quantized calls (ZeRO++ qwZ/qgZ): the relative RMS error of this rank's payload,
  // ||x - Q(x)|| / ||x|| (written as "rel_err" when set); -1: not a quantized call.
  double rel_err = -1.0;
  // Compressed collectives (comm/compressed_comm.h): `bytes` stays the raw fp32 size of the
  // logical call (the convention above), wire_bytes is what the codec made of it in the same
  // convention (the whole logical buffer as this rank compressed it; for an all-reduce, done as
  // a compressed reduce-scatter and a compressed all-gather, the mean of the two phases'
  // buffers, so that the all-reduce factor 2(n-1)/n applies to it as to bytes), codec
  // its name ("int4", "zfp:8"), codec_s this rank's seconds compressing and decompressing
  // (inside duration_s). wire_bytes -1 and codec empty: not compressed. Written as
  // "wire_bytes", "codec", "codec_s" when set.
  int64_t wire_bytes = -1;
  std::string codec;
  double codec_s = 0.0;
};

// Totals over a set of events.
struct TraceTotals {
  int64_t calls = 0;
  int64_t bytes = 0;
  double time_s = 0;  // sum of durations (asynchronous calls overlap, so this can exceed wall time)
  int64_t compressed_calls = 0;  // calls with wire_bytes >= 0
  int64_t wire_bytes = 0;        // wire_bytes of the compressed calls, bytes of the others
};

struct TraceAxisSummary {
  TraceTotals total;
  std::map<std::string, TraceTotals> by_kind;  // all_reduce -> totals, ...
};

struct TraceSummary {
  TraceTotals total;
  std::map<std::string, TraceAxisSummary> by_axis;  // dp -> totals, ...
  // One line per axis: "dp: 12 calls 4.0 MiB 0.012 s (all_reduce 10 calls 3.5 MiB 0.010 s, ...)"; totals
  // with compressed calls add their wire bytes: "10 calls 3.5 MiB (wire 1.0 MiB) 0.010 s".
  std::string format() const;
};

class Tracer {
 public:
  explicit Tracer(bool enabled = true) : enabled_(enabled) {}

  bool enabled() const { return enabled_; }
  void set_enabled(bool on) { enabled_ = on; }

  // Appends the event (ignored when disabled). An event without a phase gets the current
  // step and phase; the communicators stamp both when the call is posted (an asynchronous
  // call belongs to the step and phase that posted it, whenever its completion is seen).
  void record(TraceEvent ev);
  void set_step(int64_t step) { step_ = step; }
  int64_t step() const { return step_; }
  void set_phase(std::string phase) { phase_ = std::move(phase); }
  const std::string& phase() const { return phase_; }
  // The relative RMS error of the payload of the next call this process posts (a quantized
  // collective's caller sets it just before posting; the communicator stamps it on the event).
  void set_call_error(double rel_err) { call_error_ = rel_err; }
  double take_call_error() {
    const double e = call_error_;
    call_error_ = -1.0;
    return e;
  }

  const std::vector<TraceEvent>& events() const { return events_; }
  void clear() { events_.clear(); }
  TraceSummary summary() const;

  // Appends the held events to `path`, one JSON object per line (keys as in TraceEvent).
  // Does not clear them. Throws RuntimeError if the file cannot be written.
  void write_jsonl(const std::string& path) const;

  // Seconds on the steady clock since the process started.
  static double now();

 private:
  bool enabled_ = true;
  int64_t step_ = 0;
  std::string phase_ = "setup";
  double call_error_ = -1.0;
  std::vector<TraceEvent> events_;
};

// The events of a file written by write_jsonl (events of older files without "phase" get
// "train"). Throws InputError naming the file and line for a line that is not an event.
std::vector<TraceEvent> read_trace_jsonl(const std::string& path);

// "512 B", "4.0 KiB", "4.0 MiB", "1.5 GiB": used in trace summaries and error messages.
std::string format_bytes(int64_t bytes);
// A compact list of ranks: "0,2,4" (up to 8 listed), "0-15" (consecutive), "0,4,...,60"
// (evenly strided), else the first four, "...", the last and the count.
std::string format_ranks(const std::vector<int>& ranks);
// The inverse of format_ranks for the exact forms (a list, "a-b", "a,b,...,z"); InputError for
// the abbreviated irregular form (which names only some of the ranks) or a malformed text.
std::vector<int> parse_ranks(const std::string& text);

}  // namespace weft
