// A DeviceComm that compresses what it moves with one codec (comm/codec.h), over another
// DeviceComm that moves the bytes: what [compression] puts between a parallel axis's traffic
// and its transport (docs/compression.md). What it compresses: fp32 sums (all_reduce,
// reduce_scatter(_v)), fp32 gathers (all_gather(_v)) and fp32 point-to-point (send/recv), on
// groups of more than one rank, and the same calls on 16-bit payloads (bf16, f16: widened to
// fp32 for the codec, the result rounded back once). Everything else (max/min reductions, other dtypes, broadcast,
// all_to_all_v, barrier, a group of one) passes through unchanged, as does every call while
// the codec is off.
//
// How (Xu et al. 2024, "Accelerating Large Language Model Training with Hybrid GPU-based
// Compression": compress once per hop that carries new data, never at every ring step):
//   reduce_scatter(_v)  each rank encodes its block for every other rank (its own block stays
//                       exact), one all_to_all_v of the wire bytes, then the receiver sums
//                       the blocks in fp32 in rank order (own block raw, the others decoded).
//   all_gather(_v)      each rank encodes its block once; one all_gather_v of the wire bytes;
//                       every rank decodes every block, its own included, so that all ranks
//                       hold the same values (replicas stay identical).
//   all_reduce          the two above: a compressed reduce-scatter into this rank's chunk
//                       (the buffer split as evenly as it goes, the first count % size ranks
//                       one element more), then a compressed all-gather of the chunks.
//   send / recv         the sender encodes once; the receiver decodes.
// zstd's sizes depend on the data: the sizes go first through the host communicator (an
// all-gather of the per-peer sizes, or one int64 before a send).
//
// Error feedback: set_next_residual(r) gives the next fp32 sum this rank posts a residual (as
// many floats as its send buffer, DEVICE): the codec encodes x + r and keeps the new residual
// in r (comm/codec.h). Only the reduce-scatter phase (this rank's contribution) uses it.
//
// Asynchronous calls encode at post and decode in wait(); iall_reduce posts its reduce-scatter
// and runs its all-gather in wait() (so that every rank posts it at the same point of the
// program: test() never starts it and returns false until wait()).
//
// Trace: one event per logical call, in the convention of comm/tracer.h (kind, axis, raw
// fp32 bytes) plus wire_bytes, codec, codec_s and, while tracing, rel_err = ||x - x'|| / ||x||
// of this rank's payload (an all-reduce: its contribution, the reduce-scatter phase; x' what the
// receivers decode; with error feedback x is this step's
// own value, so the carried residual counts as error). The transport calls underneath are not
// traced.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/device_buffer.h"
#include "comm/codec.h"
#include "comm/device_comm.h"
#include "comm/tracer.h"

namespace weft {

class CompressedComm final : public DeviceComm {
 public:
  // inner: the transport (not owned; outlives this). codec: null = off (everything passes through).
  CompressedComm(DeviceComm& inner, std::unique_ptr<Codec> codec);
  CompressedComm(std::unique_ptr<DeviceComm> inner, std::unique_ptr<Codec> codec);
  ~CompressedComm() override;

  const Codec* codec() const { return codec_.get(); }
  DeviceComm& inner() const { return inner_; }
  // Error feedback for the next fp32 sum this rank posts (see above); null clears it.
  void set_next_residual(float* residual) { next_residual_ = residual; }

  Communicator& host() const override { return inner_.host(); }
  Backend& backend() const override { return inner_.backend(); }
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  const std::string& axis() const override { return inner_.axis(); }
  const std::vector<int>& world_ranks() const override { return inner_.world_ranks(); }

  void all_reduce(void* buf, int64_t count, CommDType t, ReduceOp op) override;
  void reduce_scatter(const void* send, void* recv, int64_t count, CommDType t, ReduceOp op) override;
  void reduce_scatter_v(const void* send, void* recv, const std::vector<int64_t>& counts, CommDType t,
                        ReduceOp op) override;
  void all_gather(const void* send, void* recv, int64_t count, CommDType t) override;
  void all_gather_v(const void* send, void* recv, const std::vector<int64_t>& counts, CommDType t) override;
  void broadcast(void* buf, int64_t count, CommDType t, int root) override { inner_.broadcast(buf, count, t, root); }
  void all_to_all_v(const void* send, void* recv, const std::vector<int64_t>& counts, CommDType t) override {
    inner_.all_to_all_v(send, recv, counts, t);
  }
  void send(const void* buf, int64_t count, CommDType t, int peer, int tag) override;
  void recv(void* buf, int64_t count, CommDType t, int peer, int tag) override;
  void barrier() override { inner_.barrier(); }

  CommHandle iall_reduce(void* buf, int64_t count, CommDType t, ReduceOp op) override;
  CommHandle ireduce_scatter_v(const void* send, void* recv, const std::vector<int64_t>& counts, CommDType t,
                               ReduceOp op) override;
  CommHandle iall_gather_v(const void* send, void* recv, const std::vector<int64_t>& counts, CommDType t) override;
  CommHandle iall_to_all_v(const void* send, void* recv, const std::vector<int64_t>& counts, CommDType t) override {
    return inner_.iall_to_all_v(send, recv, counts, t);
  }
  CommHandle isend(const void* buf, int64_t count, CommDType t, int peer, int tag) override;
  CommHandle irecv(void* buf, int64_t count, CommDType t, int peer, int tag) override;
  void progress() override { inner_.progress(); }

  // A CompressedComm with the same codec over the inner communicator's split.
  std::unique_ptr<Communicator> split(int color, int key, const std::string& axis) override;

  void set_timeout(std::chrono::milliseconds t) override { inner_.set_timeout(t); }
  std::chrono::milliseconds timeout() const override { return inner_.timeout(); }
  void set_tracer(Tracer* tracer) override { inner_.set_tracer(tracer); }
  Tracer* tracer() const override { return inner_.tracer(); }

  class Op;  // one compressed call in flight (compressed_comm.cc)

 private:
  bool tracing() const { return tracer() != nullptr && tracer()->enabled(); }
  bool compresses(CommDType t) const {
    return codec_ != nullptr && (t == CommDType::kF32 || t == CommDType::kBF16 || t == CommDType::kF16) && size() > 1;
  }
  bool compresses_sum(CommDType t, ReduceOp op) const { return compresses(t) && op == ReduceOp::kSum; }
  // The fp32 collectives; elem: the caller's bytes per element (the trace's raw bytes).
  std::unique_ptr<Op> start_reduce_scatter(const float* send, float* recv, const std::vector<int64_t>& counts,
                                           const char* kind, bool async, int64_t elem);
  std::unique_ptr<Op> start_all_gather(const float* send, float* recv, const std::vector<int64_t>& counts,
                                       const char* kind, bool async, int64_t elem);
  std::unique_ptr<Op> start_all_reduce(float* buf, int64_t count, bool async, int64_t elem);
  // The same for a payload of type t: fp32 directly, a 16-bit one through fp32 copies.
  std::unique_ptr<Op> post_all_reduce(void* buf, int64_t count, CommDType t, bool async);
  std::unique_ptr<Op> post_reduce_scatter(const void* send, void* recv, const std::vector<int64_t>& counts,
                                          CommDType t, bool async);
  std::unique_ptr<Op> post_all_gather(const void* send, void* recv, const std::vector<int64_t>& counts, CommDType t,
                                      bool async);
  // A 16-bit payload's fp32 comm buffer of n values (its values widened from src when copy).
  DeviceBuffer widen(const void* src, int64_t n, CommDType t, bool copy);
  // Keeps in and out alive in op until it completes; then out's n values rounded into dst (type t).
  void narrow_into(Op& op, DeviceBuffer in, DeviceBuffer out, void* dst, int64_t n, CommDType t);

  std::unique_ptr<DeviceComm> owned_;
  DeviceComm& inner_;
  std::unique_ptr<Codec> codec_;
  float* next_residual_ = nullptr;
};

}  // namespace weft
