// A machine description for the planner: one device (peak matrix FLOP/s by precision, memory,
// memory bandwidth, a size-dependent matrix-product efficiency) and a hierarchy of link levels
// (e.g. GCD-GCD inside a card, card-card inside a node, node-node), each with a latency
// (alpha) and a per-device bandwidth (beta). Loaded from TOML (systems/*.toml; every figure
// there cites its source) or written by `weft calibrate`.
//
//   [system]   name, description
//   [device]   name, peak_flops_16, peak_flops_32 (FLOP/s of matrix products), memory_bytes,
//              fp32_kernel (optional: the library of fp32 products weft's cpu backend runs,
//              "openblas" or "onednn", the faster one `weft calibrate` measured),
//              native_bf16 (optional, false: weft's cpu backend has native bf16 products),
//              memory_bandwidth (bytes/s), matmul_efficiency (largest fraction of peak a
//              matrix product reaches), kernel_latency (s per kernel),
//              matmul_curve (optional, measured: [[FLOPs per call, fraction of peak], ...]);
//              per-shape products (GPUs, plan/kernel_model.h): compute_units, gemm_tiles
//              ([[tile_m, tile_n, fraction], ...]), gemm_k_overhead, gemm_align,
//              gemm_misaligned_fraction; attention_efficiency, attention_bwd_efficiency
//   [[level]]  name, devices (devices in one unit of the level, cumulative: 2 per card, 8 per
//              node; 0 for the top level: the whole machine), bandwidth (bytes/s per device
//              and direction when every device of a unit sends across the level at once),
//              latency (s per message)
//   [defaults] software of the figures: flash_attention, dropout, fp32_grad_accumulation,
//              attention_16 (attention's products in 16 bits where the model's are),
//              overlap_dp (gradient reduction overlapped with the last backward),
//              pp_scatter_gather, memory_model; scale effects: step_overhead (s), jitter,
//              world_allreduces, bubble_factor (plan/scale_model.h)
//   [codecs]   (optional) measured speeds of the compressed collectives' codecs
//              (plan/compression.h): cores, zstd_ratio, and per codec name (bf16, fp16,
//              int8, int4, zfp, "zfp:8", zstd, "zstd:3") [encode, decode] in bytes of fp32
//              input per second and core; what is absent takes plan/compression.h's defaults
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "plan/fingerprint.h"
#include "plan/gemm_table.h"
#include "plan/shape.h"

namespace weft::plan {

// One output tile shape a GPU matrix library uses and the fraction of the large-product rate
// it reaches (smaller tiles reuse less data per load).
struct GemmTile {
  double m = 128, n = 128, fraction = 1.0;
};

struct Device {
  std::string name = "device";
  double peak_flops_16 = 0;  // matrix FLOP/s in fp16/bf16
  double peak_flops_32 = 0;  // matrix FLOP/s in fp32
  double memory_bytes = 0;
  double memory_bandwidth = 0;     // bytes/s
  double matmul_efficiency = 1.0;  // fraction of peak a large matrix product sustains
  // Fraction of the memory bandwidth (or of the memory curve's) the software's memory-bound
  // kernels reach, as a whole: 1 for kernels that move the bytes the description counts once
  // (Megatron-LM's fused ones, weft's measured ones); below 1 for a stack that runs them as
  // more, unfused passes (PyTorch eager's elementwise ops: systems/*-fsdp.toml, fitted).
  double memory_efficiency = 1.0;
  double kernel_latency = 0;       // s added to every kernel (launch, sync)
  // Elements per second of each named elementwise function (model/description.h's
  // Kernel::function: the activations forward and backward, "ssp", "ssp_backward") as the
  // device's kernels evaluate them (`weft calibrate`: the cpu backend's, on all its threads).
  // One not listed hides behind its kernel's bytes (a GPU's).
  std::map<std::string, double> function_rates;
  // Measured fraction of peak by FLOPs per call (sorted by FLOPs); empty: roofline only.
  std::vector<std::pair<double, double>> matmul_curve;
  // Measured bandwidth (bytes/s) of a memory-bound kernel by the bytes it moves (sorted by
  // bytes; `weft calibrate`: the triad from cache-sized to memory-sized arrays); empty:
  // memory_bandwidth at every size.
  std::vector<std::pair<double, double>> memory_curve;
  // The optimizer step as the device runs it (`weft calibrate`: the cpu backend's AdamW over
  // shards of several sizes, [parameters, seconds per parameter], sorted; and the gradient
  // norm's sum of squares, seconds per parameter, on the rank's threads); empty / 0: the update
  // priced as memory traffic at memory_bandwidth, the norm not at all.
  std::vector<std::pair<double, double>> adamw_curve;
  double norm_param_seconds = 0;
  // Measured product rates by shape and layout (`weft calibrate`; plan/gemm_table.h): when
  // present, a product's rate is the table's, not the curve's or the tile model's.
  GemmTable gemm_table;
  // Per-shape product model (plan/kernel_model.h); compute_units 0: the curve above instead.
  int64_t compute_units = 0;          // streaming multiprocessors / compute units
  std::vector<GemmTile> gemm_tiles;   // candidate tiles (default one 128 x 128 at 1.0)
  double gemm_k_overhead = 0;         // k elements each tile's fill + epilogue costs
  int64_t gemm_align = 0;             // elements the dimensions must be multiples of
  double gemm_misaligned_fraction = 1.0;
  // Fused (flash) attention kernel: fractions of peak, forward and backward; 0: none measured.
  double attention_efficiency = 0, attention_bwd_efficiency = 0;
  // The fp32 product library weft's cpu backend takes from this file ("": its default).
  std::string fp32_kernel;
  // weft's cpu backend has native bf16 products here (`weft calibrate` measured oneDNN's bf16
  // matmul: --matmul fast reads bf16 tensors in place, which changes its staging arena).
  bool native_bf16 = false;

  double peak_flops(Precision p) const { return p == Precision::kFp32 ? peak_flops_32 : peak_flops_16; }
};

struct LinkLevel {
  std::string name;
  int64_t devices = 0;     // devices in one unit of this level; 0: the whole machine
  double bandwidth = 0;    // bytes/s per device per direction
  double latency = 0;      // s per message
  // Measured share of `bandwidth` each kind of collective reaches on this level ("all_reduce",
  // "all_gather", "reduce_scatter": `weft calibrate` times them as weft issues them, against
  // the ring formula with the ping-pong's figures); a kind not listed: 1.
  std::map<std::string, double> collective_efficiency;
};

struct SoftwareDefaults {
  bool flash_attention = false;
  bool dropout = false;
  // Attention's products (scores, weighted sums) run at the 16-bit rate when the model's products
  // do (the GPU stacks' flash attention); false: in fp32 always (weft's CPU attention, whose
  // internal products are fp32 sgemms in every matmul mode).
  bool attention_16 = true;
  bool fp32_grad_accumulation = true;
  bool overlap_dp = true;
  // Share of a data-parallel collective's time that compute on the same device can hide (with
  // overlap_dp): 1 on a GPU (its own engines move the data); on a CPU rank the reductions and
  // copies of MPI's progress run on the rank's own cores (`weft calibrate` measures it).
  double comm_overlap = 1.0;
  // Pipeline sends carry 1/t of the activations, all-gathered over tp by the receiver
  // (Narayanan et al. 2021 sec. 4.1; Megatron-LM's default and weft's); false: every tp rank
  // sends the whole activations (DeepSpeed's pipeline engine without partitioned activations).
  bool pp_scatter_gather = true;
  // Whose buffers the memory model counts: "megatron" (plan/memory.h: Megatron-LM/DeepSpeed
  // mixed precision, the published systems), "fsdp" (the same formulas with PyTorch FSDP's
  // fp32 sharded parameters and gradients: plan/memory.h bytes_per_param) or "weft"
  // (plan/weft_memory.h: weft's own buffers, exact for its CPU backend; what `weft calibrate` writes).
  std::string memory_model = "megatron";
  // Whose tensor-parallel calls per layer the time model counts: "megatron" (Megatron-LM and
  // Megatron-DeepSpeed: a recomputed layer repeats the forward's collectives; under sequence
  // parallelism the backward gathers its input again for the weight gradients; Korthikanti
  // et al. 2022 sec. 4.2.2, 5) or "weft" (plan/comm_model.h's tp_layer_comm, checked against
  // weft's traces: its recompute stops at the GELU). `weft calibrate` writes "weft"; a file
  // without the key takes its memory_model's value.
  std::string tp_comm = "megatron";
  // Interleaved pipelines: the transfers between chunks overlap the other chunks' queued work
  // (weft's engine; Megatron-LM's --overlap-p2p-communication, 2023). false: every chunk's
  // send/receive waits as in 1F1B, 2v transfers per micro-batch on the critical path
  // (Megatron-LM's interleaved schedule of the published 2021-22 runs).
  bool pp_p2p_overlap = true;
  // Scale effects (plan/scale_model.h). Seconds per optimizer step that no parallelism
  // shrinks: the framework's step (data loading, launches, logging, loss and norm bookkeeping).
  double step_overhead = 0;
  // Coefficient of variation of one device's busy time over a step: a synchronous step waits
  // for the slowest of its devices (stragglers).
  double jitter = 0;
  // Measured (`weft calibrate` on >= 2 ranks): [segment seconds, coefficient of variation] pairs,
  // segments increasing. How much one rank's time for a segment of work between two
  // synchronisations varies independently of the other ranks' (a shared machine's scheduler, a
  // VM's vCPUs), by the segment's length. Non-empty: the planner prices each synchronisation of
  // a step (tensor-parallel collectives, pipeline transfers, the step's closing collectives) from
  // it (plan/scale_model.h's sync_wait) instead of `jitter`.
  std::vector<std::pair<double, double>> sync_jitter;
  // Small all-reduces over every rank per step (loss, gradient norm, overflow check): latency.
  int world_allreduces = 0;
  // The pipeline's fill and drain as a multiple of the schedule's ideal (p - 1) stage times.
  double bubble_factor = 1.0;
};

// Speed of one codec (plan/compression.h): bytes of fp32 input per second (values per second x
// 4) compressed (encode) and decompressed (decode).
struct CodecSpeed {
  double encode = 0, decode = 0;
};

// Measured codec speeds ([codecs] of a system file; `weft calibrate` writes them). A speed is
// one core's; a device runs its codecs on `cores` cores at once (a GPU counts as one core,
// its speed the device's). Keys: a codec family ("bf16", "fp16", "int8", "int4", "zfp",
// "zstd": every rate or level) or one codec's name ("zfp:8", "zstd:3"), which wins over its
// family.
struct CodecRates {
  std::map<std::string, CodecSpeed> per_core;
  double cores = 1;
  // zstd's wire bytes per raw byte measured on gradients (0: codec_nominal_ratio's estimate).
  double zstd_ratio = 0;
  bool empty() const { return per_core.empty() && cores == 1 && zstd_ratio == 0; }
};

struct System {
  std::string name = "system";
  std::string description;
  std::string path;  // the file it was loaded from
  Device device;
  std::vector<LinkLevel> levels;  // innermost first
  SoftwareDefaults defaults;
  CodecRates codecs;
  MachineFingerprint machine;  // [machine]: where weft calibrate measured it (empty: a published system)

  // Devices in one unit of level i (the top level: unbounded).
  int64_t unit_devices(size_t i) const;
  // InputError naming the value when a figure is missing or out of range.
  void validate() const;
};

// Loads a system file. InputError naming the file, key and value for a missing file, bad
// TOML, an unknown key, a wrong type or an out-of-range figure.
System load_system(const std::string& path);
// The system file a command prices with when none is given (weft train, weft tune): the
// environment's WEFT_SYSTEM (a path; "none": no system file), else systems/local.toml in the
// working folder when it exists (what `weft calibrate --out systems/local.toml` writes); ""
// for none.
std::string implicit_system_path();
// The implicit system file's [device] fp32_kernel (what `weft calibrate` measured faster), "" when
// there is no such file or it names none: the products weft train runs when a config names none.
std::string implicit_fp32_kernel();
// The TOML text of a system (comments carry `notes`, one per line, at the top).
std::string system_to_toml(const System& s, const std::vector<std::string>& notes = {});

}  // namespace weft::plan
