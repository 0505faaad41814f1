// Compressed collectives in the planner (issue 18): what a CompressionPolicy (comm/codec_spec.h,
// docs/compression.md) does to a layout's step. For each kind of traffic (dp gradient
// reductions, params all-gathers, tp activation collectives, pp transfers) the bytes on the
// links become the raw bytes x the codec's wire ratio, and the step gains the codec's time:
// (values compressed + values decompressed) x 4 bytes / its speed (bytes of fp32 input per
// second). A compressed all-reduce runs as a compressed reduce-scatter (an all-to-all of
// compressed chunks, summed in fp32) and a compressed all-gather: its link time is the plain
// all-reduce's on the wire bytes, its codec work "compress the whole buffer, decompress n-1
// chunks, compress the own chunk, decompress n chunks" (codec_work). The max reductions of
// the vocabulary-parallel loss stay exact (uncompressed), as the runtime keeps them.
//
// Codec speeds: the system file's [codecs] (measured by `weft calibrate`), else defaults:
//   GPU devices (compute_units > 0): bf16, fp16, int8, int4 are element-wise kernels, memory-
//     bound: encode reads 4 bytes and writes w per value, decode the reverse, so a speed of
//     4 B / (4 + w) bytes of fp32 input per second at memory bandwidth B (hundreds of GB/s);
//     zfp and zstd run on the CPU only in weft (libzfp and libzstd have no GPU path here):
//     refused on GPU systems, as the runtime refuses them.
//   CPU devices, per core (placeholders, ASSUMED until `weft calibrate` measures this
//     machine; the first three from throwaway C benchmarks on a 2-core EPYC VM in the research
//     notes, research/zeropp-and-compression.md sec. 4):
//     int8, int4  1.3 GB/s encode, 2.0 GB/s decode (scalar block absmax quantizer)
//     zfp         0.15 / 0.17 GB/s (libzfp fixed rate 8, serial)
//     zstd        0.5 / 1.0 GB/s (level 1-3 measured 0.4-0.75 compressing; decode assumed 2x)
//     bf16, fp16  2.0 / 2.0 GB/s (assumed: one streaming pass, no measurement)
//   A device runs its codecs on [codecs] cores (default 1).
// Wire ratio (wire bytes per raw byte) of a buffer of e-byte values: fixed-size codecs put
// 4 x codec_nominal_ratio bytes per value whatever the input width (they take fp32, or widen
// 16-bit values first), so the ratio is 4 codec_nominal_ratio / e: exactly codec_nominal_ratio
// on weft's fp32 wires, twice it on a 16-bit (Megatron-style) wire, where bf16 and fp16 save
// nothing; zstd's ratio applies to the raw bytes (the system's measured zstd_ratio, else
// codec_nominal_ratio's estimate).
#pragma once
#include <string>
#include <vector>

#include "comm/codec_spec.h"
#include "plan/predict.h"

namespace weft::plan {

// A device whose codecs run on the GPU: one with compute units (the per-shape product model
// of GPU system files); `weft calibrate`'s CPU devices have none.
bool gpu_device(const Device& d);

// Bytes of fp32 input per second one device compresses and decompresses with `c` (see the
// header comment for where the figure comes from; `source` receives it: "[codecs] int8",
// "memory-bound at 1.64 TB/s", "assumed CPU default"). InputError naming the values for zfp and
// zstd on a GPU system, and for off.
CodecSpeed codec_speed(const System& sys, const CodecSpec& c, std::string* source = nullptr);

// Wire bytes per raw byte of a buffer of `elem_bytes`-byte values under `c` (1 for off).
double wire_ratio(const System& sys, const CodecSpec& c, double elem_bytes);

// Values one rank compresses and decompresses for one compressed collective of `kind` over n
// ranks on a buffer of `values` (the whole logical buffer):
//   all-reduce      encode values (1 + 1/n), decode values ((n-1)/n + 1)
//   reduce-scatter  encode values, decode values (n-1)/n
//   all-gather      encode values / n, decode values
//   send/receive    encode values (sender) + decode values (receiver): both on the path
// All-to-all has no codec of its own (qgZ quantizes inside ZeRO++): InputError.
struct CodecWork {
  double encode = 0, decode = 0;  // values
};
CodecWork codec_work(Collective kind, int64_t n, double values);
// Seconds of that work: (encode x 4 / encode speed) + (decode x 4 / decode speed).
double codec_seconds(const System& sys, const CodecSpec& c, const CodecWork& w);

// One collective of a kind of traffic: its link cost on the wire bytes and the codec seconds
// (0 for off, where wire = raw and the link cost is collective_cost's on the raw bytes).
struct PricedCall {
  CollectiveCost link;
  double raw_bytes = 0, wire_bytes = 0, codec_s = 0;
  double seconds() const { return link.seconds + codec_s; }
};
PricedCall price_call(const System& sys, const CodecSpec& c, Collective kind, int64_t n, int64_t stride,
                      double raw_bytes, double elem_bytes);

// --- policies ---

// A policy with the name the planner reports: a preset ("none", "hybrid", "hybrid-zfp",
// "uniform-<codec>") or "custom" (given axis by axis).
struct NamedPolicy {
  std::string name = "none";
  CompressionPolicy policy;
};
// Every codec of the policy lossless (off or zstd).
bool lossless(const CompressionPolicy& p);
// The same codecs on every axis (and the same error feedback).
bool same_policy(const CompressionPolicy& a, const CompressionPolicy& b);

// Reads `weft plan --compression`: a preset, or a custom policy "dp=int4,params=int8,tp=bf16,
// pp=off,ef=on" (axes not named are off; ef: error feedback on the dp codec, on|off):
//   none         every axis off
//   hybrid       dp int4, params bf16, tp bf16, pp off (Xu et al. 2024's idea with weft's
//                codecs: aggressive on gradients, milder on parameters and activations; bf16
//                parameters as the loss study measured: int8 ones cost 2-3% of loss)
//   hybrid-zfp   dp zfp:8 (the paper's ZFP on data-parallel traffic; CPU systems only),
//                params bf16, tp bf16, pp off
//   uniform-C    codec C (any codec name: bf16, int8, zfp:8, zstd, ...) on every axis
// InputError naming the text and the forms for anything else. ("any" is not a policy: the
// caller reads it as "allow lossy presets in the search".)
NamedPolicy parse_compression(const std::string& text);

// What the loss study (docs/compression.md: the tiny GPT, 300 steps, tp 2 x pp 2 x dp 2 with
// ZeRO-1) measured each lossy codec of the policy to cost, one line per axis it compresses
// ("params int8: ... 2-3% ..."; "not measured" where the study has no run); empty for a
// lossless policy. `weft plan --explain` prints them.
std::vector<std::string> measured_loss_costs(const CompressionPolicy& p);

// The presets the search tries on `sys`: none and the lossless ones it can run (uniform-zstd on
// CPU systems), and with allow_lossy the lossy ones too (hybrid, uniform-bf16, -fp16, -int8,
// -int4; on CPU systems also hybrid-zfp and uniform-zfp:8). Lossy presets change the numbers
// the model trains on, so the search never picks one unless the user allows it.
std::vector<NamedPolicy> compression_presets(const System& sys, bool allow_lossy);
// The same for a CPU (cpu) or a GPU device.
std::vector<NamedPolicy> compression_presets(bool cpu, bool allow_lossy);

// The refusal of `p` on `sys`, naming the values, or "": zfp and zstd on a GPU system.
std::string compression_system_error(const CompressionPolicy& p, const System& sys);
// The refusal of `p` on layout `l`, or "": a dp or params codec with ZeRO++ (qwz, hpz, qgz
// already quantize or move those collectives; pick one of the two), or with HSDP
// (dp_replicate > 1: not supported yet, as in the trainer).
std::string compression_layout_error(const CompressionPolicy& p, const Layout& l);
// Codecs of `p` on kinds of traffic that `l` does not have (an axis of size 1; params with
// zero 0, which gathers no parameters): one line each. The planner warns and prices nothing
// for them (a preset names every axis, so refusing would refuse it on every layout without
// tp or pp).
std::vector<std::string> compression_warnings(const CompressionPolicy& p, const Layout& l);
// `p` with the codecs of the traffic `l` does not have turned off: what `l` prices.
CompressionPolicy effective_policy(const CompressionPolicy& p, const Layout& l);

}  // namespace weft::plan
