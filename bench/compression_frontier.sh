#!/usr/bin/env bash
# Compressed collectives as the planner prices them (no run): the predicted speedup of the
# hybrid policy and of uniform lossy compression over uncompressed collectives, for
#   (a) GPT-NeoX-20B on 192 V100s of LLNL Lassen (systems/lassen.toml), the setting of Xu et al.
#       2024, "Accelerating Large Language Model Training with Hybrid GPU-based Compression"
#       (arXiv 2409.02423: 3D parallelism + ZeRO-1; published +17.3% TFLOPS per GPU for their
#       hybrid scheme, +22.5% for compression on every collective). Their layout is not in the
#       abstract (the only part that could be read): the layout is GPT-NeoX's own configs/20B.yml
#       parallelism (tp 2, pp 4), so dp 24, ZeRO-1, activation checkpointing (full recompute),
#       1F1B, no sequence parallelism, micro-batch 1 (4, NeoX's, does not fit a 16 GB V100 in
#       this model), at global batches 192, 384 and 1536 (NeoX's).
#   (b) GPT-175B on Frontier (systems/frontier.toml) with Dash et al. 2023's layout (tp 4, pp 16,
#       micro-batch 1, ZeRO-1, full recompute, 1F1B): 128 GCDs at batch 640 (their Table VI) and
#       1,024 GCDs at batch 8000 (the end of their strong scaling).
# Policies (weft plan --compression): none, hybrid (dp int4, params bf16, tp bf16, pp off: bf16
# parameters since the loss study measured int8 ones to cost 2-3% of loss, docs/compression.md),
# hybrid-int8tp (dp int4, params int8, tp int8: hybrid's milder-on-activations idea on 16-bit
# wires, where bf16 saves nothing), uniform-int8, uniform-int4. zfp is CPU-only in weft, so
# the paper's ZFP codecs are not available on these GPU systems.
# Prints one JSON line per case, then the tables of docs/planner.md ("Compression"):
# TFLOPS per device (model FLOPs: MFU x peak) and each policy's speedup over none.
#   bash bench/compression_frontier.sh
# NET_SCALE=0.25 multiplies the bandwidth of every level above the node (the network) by 0.25
# in temporary copies of the system files: a sensitivity to the effective inter-node bandwidth,
# not a fit.
set -euo pipefail
cd "$(dirname "$0")/.."
WEFT="${WEFT:-build/weft}"
NET_SCALE="${NET_SCALE:-1}"
tmpdir="$(mktemp -d)"
trap 'rm -rf "$tmpdir"' EXIT
out="$tmpdir/out.jsonl"

# A copy of system file $1 with the levels above "node" scaled by NET_SCALE.
system_file() {
  if [ "$NET_SCALE" = "1" ]; then echo "$1"; return; fi
  local copy="$tmpdir/$(basename "$1")"
  python3 - "$1" "$copy" "$NET_SCALE" <<'PY'
import re, sys
src, dst, scale = sys.argv[1], sys.argv[2], float(sys.argv[3])
text = open(src).read()
parts = re.split(r"(?m)^\[\[level\]\]\n", text)
above = False
for i in range(1, len(parts)):
    if above:
        parts[i] = re.sub(r"(?m)^bandwidth = ([0-9.e+-]+)", lambda m: f"bandwidth = {float(m.group(1)) * scale:g}", parts[i], count=1)
    if re.search(r'(?m)^name = "node"', parts[i]):
        above = True
open(dst, "w").write("[[level]]\n".join(parts))
PY
  echo "$copy"
}

POLICIES="none hybrid dp=int4,params=int8,tp=int8 uniform-int8 uniform-int4"
policy_name() { if [ "$1" = "dp=int4,params=int8,tp=int8" ]; then echo hybrid-int8tp; else echo "$1"; fi; }

# case system model gpus batch peak_tflops pins...
run_case() {
  local name="$1" system="$2" model="$3" gpus="$4" batch="$5" peak="$6"
  shift 6
  for policy in $POLICIES; do
    "$WEFT" plan --model "$model" --system "$system" --gpus "$gpus" --global-batch "$batch" --precision fp16 "$@" \
      --compression "$policy" --format json --explain |
      python3 -c '
import json, sys
name, system, gpus, batch, peak, policy = sys.argv[1:7]
p = json.load(sys.stdin)[0]
t = p["time_s"]
traffic = {k: {"codec": v["codec"], "raw_gb": v["raw_bytes"] / 1e9, "wire_gb": v["wire_bytes"] / 1e9, "codec_s": v["codec_s"]}
           for k, v in p["explain"]["traffic"].items()}
print(json.dumps({"case": name, "system": system, "gpus": int(gpus), "global_batch": int(batch), "policy": policy,
                  "layout": p["layout"], "compression": p["compression"], "step_time_s": p["step_time_s"],
                  "tflops_per_device": p["mfu"] * float(peak), "mfu": p["mfu"], "fits": p["fits"],
                  "memory_gb": p["memory_bytes"]["total"] / 1e9,
                  "time_s": t, "traffic_per_device": traffic}))' "$name" "$system" "$gpus" "$batch" "$peak" "$(policy_name "$policy")"
  done
}

LASSEN="$(system_file systems/lassen.toml)"
FRONTIER="$(system_file systems/frontier.toml)"
NEOX="--tp 2 --pp 4 --micro-batch 1 --zero 1 --recompute full --no-sequence-parallel --schedule 1f1b"
DASH="--tp 4 --pp 16 --micro-batch 1 --zero 1 --recompute full --no-sequence-parallel --schedule 1f1b"
{
  for batch in 192 384 1536; do
    # shellcheck disable=SC2086
    run_case "neox-20b-lassen" "$LASSEN" gpt-20b 192 "$batch" 125 $NEOX
  done
  # shellcheck disable=SC2086
  run_case "gpt-175b-frontier" "$FRONTIER" gpt-175b 128 640 191.5 $DASH
  # shellcheck disable=SC2086
  run_case "gpt-175b-frontier" "$FRONTIER" gpt-175b 1024 8000 191.5 $DASH
} | tee "$out"

python3 - "$out" "$NET_SCALE" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
scale = sys.argv[2]
policies = ["hybrid", "hybrid-int8tp", "uniform-int8", "uniform-int4"]
published = {"neox-20b-lassen": "hybrid +17.3%, uniform +22.5%"}
keys = sorted({(r["case"], r["gpus"], r["global_batch"]) for r in rows}, key=lambda k: (k[0], k[1], k[2]))
print(f"\nnetwork bandwidth x {scale}")
print("| case | devices | batch | micro-batches | none TFLOPS/device | " + " | ".join(policies) + " | published |")
print("| --- | --- | --- | --- | --- | " + " | ".join("---" for _ in policies) + " | --- |")
for k in keys:
    by = {r["policy"]: r for r in rows if (r["case"], r["gpus"], r["global_batch"]) == k}
    base = by["none"]
    mb = base["global_batch"] // (base["layout"]["dp"] * base["layout"]["micro_batch"])
    cells = []
    for p in policies:
        r = by[p]
        cells.append(f"{100 * (r['tflops_per_device'] / base['tflops_per_device'] - 1):+.1f}%" + ("" if r["fits"] else " (no fit)"))
    print(f"| {k[0]} | {k[1]} | {k[2]} | {mb} | {base['tflops_per_device']:.1f} | " + " | ".join(cells) +
          f" | {published.get(k[0], '-')} |")
print("\nwhere the uncompressed step goes (share of the step) and what each policy's codecs cost:")
for k in keys:
    by = {r["policy"]: r for r in rows if (r["case"], r["gpus"], r["global_batch"]) == k}
    t = by["none"]["time_s"]
    total = by["none"]["step_time_s"]
    parts = ", ".join(f"{n} {100 * t[n] / total:.1f}%" for n in ("compute", "tp_comm", "pp_bubble", "dp_exposed"))
    codecs = ", ".join(f"{p} {by[p]['compression']['codec_s']:.3g} s" for p in policies)
    print(f"  {k[0]} {k[1]} x batch {k[2]}: step {total:.4g} s: {parts}; codec seconds: {codecs}")
PY
