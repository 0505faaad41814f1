#!/usr/bin/env bash
# ZeRO-3 vs ZeRO++ vs the 3-level variant on Frontier, as the planner prices them (no run):
# `weft plan --model gpt-20b --system systems/frontier.toml` at 48, 96, 192 and 384 GCDs, pure
# data parallel (tp 1, pp 1, ZeRO-3) as in Xu et al. 2025 (arXiv 2501.04266), each pinned to
# --zeropp none | zero++ | 3-level. Prints one JSON line per case, then the table of
# docs/planner.md ("ZeRO++"): TFLOPS per GCD (model FLOPs: MFU x 191.5 TFLOP/s), the ratios
# zero++/ZeRO-3 and 3-level/zero++ (published 1.41x and 1.71x) and 3-level's scaling
# efficiency 48 -> 384 GCDs (TFLOPS per GCD at 384 over 48; published 0.94).
#   bash bench/zeropp_frontier.sh [micro_batch=4] [grad_accum=1] [recompute=full] [overlap=--overlap-dp]
# Defaults: GPT-NeoX-20B's configuration (micro-batch 4 per GPU, checkpoint-activations) and
# DeepSpeed's (gradient accumulation 1; ZeRO-3 overlap_comm on; fp16 gradients, so
# --no-fp32-grad-accumulation). The global batch is GCDs x micro-batch x accumulation (the
# per-GCD batch is fixed: weak scaling). overlap=--no-overlap-dp prices every collective exposed.
set -euo pipefail
cd "$(dirname "$0")/.."
MB="${1:-4}"
GA="${2:-1}"
RC="${3:-full}"
OVERLAP="${4:---overlap-dp}"
WEFT="${WEFT:-build/weft}"
SYSTEM="${SYSTEM:-systems/frontier.toml}"  # e.g. a copy with other link bandwidths (a sensitivity, not a fit)
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
for gpus in 48 96 192 384; do
  for z in none zero++ 3-level; do
    batch=$((gpus * MB * GA))
    "$WEFT" plan --model gpt-20b --system "$SYSTEM" --gpus "$gpus" --global-batch "$batch" \
      --precision fp16 --tp 1 --pp 1 --micro-batch "$MB" --zero 3 --recompute "$RC" --zeropp "$z" \
      --no-fp32-grad-accumulation "$OVERLAP" --format json --explain |
      python3 -c '
import json, sys
gpus, z, batch = sys.argv[1], sys.argv[2], sys.argv[3]
p = json.load(sys.stdin)[0]
t = p["time_s"]
print(json.dumps({"gpus": int(gpus), "zeropp": z, "global_batch": int(batch), "zeropp_knobs": p["zeropp"],
                  "step_time_s": p["step_time_s"], "tflops_per_gcd": p["mfu"] * 191.5, "mfu": p["mfu"],
                  "compute_s": t["compute"], "dp_exposed_s": t["dp_exposed"], "fits": p["fits"],
                  "memory_gb": p["memory_bytes"]["total"] / 1e9,
                  "dp_bytes_per_device": p["explain"]["dp_bytes_per_device"]}))' "$gpus" "$z" "$batch"
  done
done | tee "$out"
python3 - "$out" "$MB" "$GA" "$RC" "$OVERLAP" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
mb, ga, rc, ov = sys.argv[2:6]
by = {(r["gpus"], r["zeropp"]): r for r in rows}
print(f"\ngpt-20b on Frontier, tp 1 pp 1 ZeRO-3, micro-batch {mb}, accumulation {ga}, recompute {rc}, {ov}, fp16 gradients")
print("| GCDs | ZeRO-3 TFLOPS/GCD | zero++ | 3-level | zero++/ZeRO-3 (pub. 1.41) | 3-level/zero++ (pub. 1.71) | 3-level/ZeRO-3 (pub. 2.40) | 3-level GB | cross-node GB/GCD/step ZeRO-3 : zero++ : 3-level |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for g in sorted({r["gpus"] for r in rows}):
    a, b, c = by[(g, "none")], by[(g, "zero++")], by[(g, "3-level")]
    net = lambda r: r["dp_bytes_per_device"].get("group", 0) / 1e9
    print(f"| {g} | {a['tflops_per_gcd']:.1f} | {b['tflops_per_gcd']:.1f} | {c['tflops_per_gcd']:.1f} | "
          f"{b['tflops_per_gcd'] / a['tflops_per_gcd']:.2f} | {c['tflops_per_gcd'] / b['tflops_per_gcd']:.2f} | "
          f"{c['tflops_per_gcd'] / a['tflops_per_gcd']:.2f} | {c['memory_gb']:.1f}{'' if c['fits'] else ' (no fit)'} | "
          f"{net(a):.2f} : {net(b):.2f} : {net(c):.2f} |")
gs = sorted({r["gpus"] for r in rows})
for z in ("none", "zero++", "3-level"):
    eff = by[(gs[-1], z)]["tflops_per_gcd"] / by[(gs[0], z)]["tflops_per_gcd"]
    print(f"scaling efficiency {gs[0]} -> {gs[-1]} GCDs ({z}): {eff:.3f}" + ("  (published 3-level: 0.94)" if z == "3-level" else ""))
PY
