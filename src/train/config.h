// A run's configuration: a TOML file whose every key can be overridden on the command line
// (`--steps 100` or `--train.steps 100`). Unknown keys and wrong types are errors that name
// the key, the value and the file.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "model/config.h"

namespace weft {

struct RunConfig {
  // [model]
  std::string model = "tiny";  // preset; the shape keys below override it when non-zero
  int64_t n_layer = 0, n_head = 0, n_embd = 0, n_ctx = 0, vocab_size = 0;
  // A checkpoint folder (weft's, or a Hugging Face save_pretrained folder) whose parameters start
  // the run (fine-tuning): the model's shape is read from its config.json (the `model` preset
  // is not used; shape keys above must agree with it), the optimizer starts fresh at step 0.
  std::string init_from = "";
  // The family's own settings ([model] keys beyond the shape keys, e.g. a graph network's
  // `layer = "egnn"`; Family::setting_names), with their values as written; the family applies
  // and checks them (model_config). On the command line: --model.NAME VALUE.
  std::map<std::string, std::string> model_settings;
  // [data]
  std::string data = "data/fortunes";  // folder (or glob) holding *train*.bin shards
  std::string val_data = "";           // folder (or glob) of *val*.bin shards; empty: same as data
  // ClimaX models: `data` is a folder of NetCDF splits (train.nc, val.nc, stats.json;
  // docs/formats-weather.md); val_data a folder or a .nc file.
  std::string balance = "count";      // graphs: "count" (equal numbers per rank) or "cost" (by nodes + edges)
  std::string variables = "";          // comma-separated field names in model order; "": every field
  std::vector<int64_t> lead_hours{6};  // forecast lead times drawn per sample (hours)
  // [train]
  int64_t seq_len = 0;  // 0: the model's context
  int64_t global_batch = 8;  // sequences per optimizer step
  int64_t micro_batch = 8;   // sequences per forward/backward; global_batch / micro_batch = accumulation steps
  int64_t steps = 100;
  double lr = 6e-4;
  double min_lr_ratio = 0.1;
  int64_t warmup_steps = 10;
  int64_t lr_decay_steps = 0;  // 0: steps
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double grad_clip = 1.0;  // 0: off
  int64_t seed = 1337;
  int64_t threads = 0;     // 0: OMP_NUM_THREADS or every core
  int64_t head_chunk = 0;  // rows of logits materialised at once; 0: automatic
  std::string recompute = "none";  // activation recompute: none, selective (attention core), full (whole layers)
  int64_t recompute_layers = -1;   // full recompute: layers recomputed per pipeline stage (chunk); -1: all
  std::string precision = "fp32";  // fp32, bf16 or fp16 storage of parameters/activations (fp32 master weights)
  // [precision] How the model's matrix products compute (core/precision.h MatmulMode): "exact"
  // (fp32 products of the stored values: bitwise the emulated reference) or "fast" (the device's
  // native 16-bit product for bf16 storage: oneDNN on CPUs with AVX512-BF16/AMX; within the 16-bit
  // tolerance). fp32_kernel: the library of fp32 products on backends with a choice (cpu:
  // "openblas" or "onednn"); "": the system file's (`weft calibrate` measures both), else the
  // backend's default (openblas).
  std::string matmul = "exact";
  std::string fp32_kernel = "";
  // 16-bit storage: what the wires whose payload is stored in 16 bits carry (pipeline sends of
  // activations and their gradients; ZeRO 1-3 parameter all-gathers): "storage" (the storage
  // type: half the bytes, lossless, the bits of an fp32 wire) or "fp32" (every wire fp32, as
  // before). A [compression] codec set on that traffic wins. Reductions of fp32 sums (gradients,
  // tensor-parallel partial products) stay fp32 either way.
  std::string wires = "storage";
  // The data-parallel gradient reduction's wire: "fp32" (Megatron-LM's and torchtitan's
  // default: a 16-bit sum re-rounded at every hop loses bits as the group grows) or "bf16"
  // (Megatron's --grad-reduce-in-bf16, DeepSpeed's bf16 communication_data_type): each rank
  // sends its blocks in bf16 and the receiver sums them in fp32 (the compressed collectives'
  // bf16 codec), half the bytes. docs/precision.md.
  std::string reduce_dtype = "fp32";
  double loss_scale = 0.0;           // fp16: 0 = dynamic loss scaling, > 0 = this static scale (bf16/fp32: 0 = none)
  double initial_loss_scale = 65536.0;  // dynamic: starting scale (2^16)
  int64_t loss_scale_window = 1000;  // dynamic: good steps before the scale doubles
  double min_loss_scale = 1.0;       // dynamic: the scale never halves below this
  // Spikes (train/divergence.h): a loss or gradient norm more than spike_zscore standard
  // deviations above the mean of the last spike_window steps (judged once spike_min_steps are
  // held) is warned about, skips its update, or stops the run.
  std::string spike_policy = "warn";  // warn, skip-step, stop
  double spike_zscore = 5.0;
  int64_t spike_window = 128;
  int64_t spike_min_steps = 32;
  // [parallel]
  int64_t tp = 1;              // tensor-parallel size
  int64_t pp = 1;              // pipeline-parallel size
  int64_t dp = 0;              // data-parallel size; 0: world size / (tp * pp)
  // HSDP (Hybrid-STOP's dp split, parallel/grid.h): dp = dp_shard x dp_replicate; ZeRO shards
  // inside a dp_shard group of consecutive dp ranks, the dp_replicate groups all-reduce the
  // shards' gradients. --dp N alone is dp_shard N, dp_replicate 1.
  int64_t dp_shard = 0;        // 0: dp / dp_replicate
  int64_t dp_replicate = 1;    // 1: plain data parallelism
  std::string order = "tp-dp-pp";  // rank order, first axis varies fastest (tp inside a node)
  int64_t zero = 0;            // ZeRO stage 0..3
  bool sequence_parallel = false;  // with tp > 1: shard LayerNorm/residual regions along the tokens
  std::string schedule = "1f1b";   // pipeline schedule: gpipe, 1f1b, interleaved
  int64_t virtual_stages = 1;      // model chunks per pipeline stage (interleaved schedule)
  double bucket_mb = 8.0;      // gradient bucket size (MiB) for zero 0/1
  int64_t prefetch = 1;        // zero 3: parameter groups gathered ahead
  double comm_timeout = 300.0; // seconds a collective may wait before the job is stopped (0: never)
  // [zero] ZeRO++ (Wang et al. 2023; DeepSpeed's names) and the hierarchical partitioning of
  // Xu et al. 2025, with ZeRO-3 only (docs/zeropp.md). The data-parallel group is seen as
  // levels: `hierarchy` lists the data-parallel ranks of one domain at each level below the
  // whole group, innermost first, each dividing the next and the group (e.g. [2, 8]: GCD pairs
  // inside nodes of 8); empty: one level from the node map (its data-parallel peers per node).
  bool quantized_weights = false;    // qwZ: ZeRO-3 gathers carry int8 blocks + fp32 scales
  int64_t hpz_partition_size = 1;    // hpZ: ranks holding the secondary partition (1: off)
  bool quantized_gradients = false;  // qgZ: gradients reduced by all-to-all hops, one per level, quantized
  std::vector<int64_t> hierarchy;    // data-parallel ranks per domain, innermost first
  int64_t block_size = 2048;         // elements per quantization block (one fp32 scale each)
  int64_t weight_bits = 8;           // qwZ: 8 or 4
  int64_t gradient_bits = 4;         // qgZ: 8 or 4
  bool error_feedback = false;       // qgZ: each rank carries its quantization error into the next step
  // [compression] compressed collectives per kind of traffic (comm/codec_spec.h,
  // docs/compression.md): codec names off, bf16, fp16, int8, int4, zfp:RATE, zstd[:LEVEL].
  std::string compression_dp = "off";      // data-parallel gradient reductions
  std::string compression_params = "off";  // data-parallel parameter all-gathers (zero 1-3)
  std::string compression_tp = "off";      // tensor-parallel activations (not the loss statistics)
  std::string compression_pp = "off";      // pipeline sends and receives
  bool compression_error_feedback = false; // the dp codec's error carried to the next step
  int64_t compression_block_size = 2048;   // int8/int4: values per fp32 scale
  // [eval]
  int64_t val_every = 0;   // 0: only at the end
  int64_t val_batches = 8; // validation uses val_batches * global_batch windows
  // In-context-learning tasks scored during training (train/train_tasks.h; the files weft eval
  // --tasks reads): at step 0, every tasks_every steps (0: every val_every) and after the last.
  std::vector<std::string> tasks;
  int64_t tasks_every = 0;
  int64_t fewshot = 0;          // examples before each item
  int64_t tasks_limit = 0;      // the first N items of each file (0: all)
  int64_t tasks_seed = 1234;    // the draw of the few-shot examples
  std::string tokenizer = "";   // the tasks' tokenizer (weft prepare --tokenizer's forms); "": the data's meta.json, else GPT-2's
  // [checkpoint]
  int64_t ckpt_every = 0;  // 0: only at the end
  int64_t keep_last = 2;   // checkpoints kept in the run folder (0: all)
  bool on_signal = true;   // SIGTERM/SIGINT: write a checkpoint of the step the ranks stop after (docs/preemption.md)
  // [run]
  std::string out = "runs/tiny";
  int64_t log_every = 1;
  bool trace = false;
  // With trace: ranks per node for the communication report's link levels (comm/topology.h);
  // 0: the real nodes (one per host). > 0 emulates nodes of this many
  // consecutive ranks (a 2-core machine standing for several nodes).
  int64_t ranks_per_node = 0;
  // The backend every rank computes on (backend/registry.h): cpu; cpu-guarded (the CPU
  // backend with its device memory fenced from the host: a debugging and test backend, same
  // bits as cpu, much slower); cuda in a build with -DWEFT_CUDA=ON.
  std::string backend = "cpu";
  // How device buffers move between ranks (comm/device_comm_registry.h): "mpi" (through the
  // host communicator, staged through host buffers where the backend refuses host access;
  // ranks may share a GPU), "nccl" (cuda only, one GPU per rank); "": the backend's default
  // (nccl for cuda, mpi otherwise).
  std::string comm = "";
  // Whether the run must fit this machine's memory before the engine allocates
  // (train/memory_fit.h): "on" refuses a run whose predicted bytes exceed the available ones,
  // "warn" logs and runs, "off" skips the check.
  std::string memory_check = "on";
  std::string system = "";  // system file for the step-time prediction (empty: WEFT_SYSTEM, else systems/local.toml if present)  // per-rank JSONL trace of every collective (trace-rank<R>.jsonl) + per-step summary
  // [sample] printed at the end of training
  int64_t sample_tokens = 0;
  std::string sample_prompt = "";
  double temperature = 1.0;
  int64_t top_k = 40;

  ModelConfig model_config() const;  // preset + overrides, validated
  int64_t seq() const;               // seq_len resolved against the model context
  // The same for `mc` (a model config already made): its fixed positions (ClimaX: patches),
  // else seq_len, else the model's context.
  int64_t seq(const ModelConfig& mc) const;
  // Checks the values (ranges) but not the layout keys, which need the world size: see
  // validate_run_layout (train/run_layout.h). Throws InputError naming them.
  void validate() const;
  std::string to_toml() const;       // the resolved config, loadable again
};

// Sets key `name` ("key" or "section.key") from its text, as a `--key value` override does
// (InputError naming the key for an unknown key or a value of the wrong type).
void set_run_config_key(RunConfig& cfg, const std::string& name, const std::string& value);

// Loads a TOML file (empty path: defaults) and applies `--key value` overrides.
RunConfig load_run_config(const std::string& path, const std::vector<std::pair<std::string, std::string>>& overrides);

// InputError unless 0 <= threads <= 4096 (0: all cores); `name` is the key or option named.
void check_thread_count(int64_t threads, const std::string& name);

// Every known key as "section.key".
std::vector<std::string> run_config_keys();
// True when `name` ("key" or "section.key") is a true/false key, which the command line also
// takes as a bare flag (`--trace` = `--trace true`).
bool run_config_key_is_bool(const std::string& name);

}  // namespace weft
