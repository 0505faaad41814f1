#!/usr/bin/env bash
# Bytes per category of one rank, fp32 against bf16 storage (issue 32): GPT-2 124M (B 4, T 1024)
# and the tiny preset (B 8, T 256), one rank, one training step on random tokens, predicted
# (src/plan/weft_memory.h) / measured (core/memory.h tracker peaks), and the bf16/fp32 ratio
# of the measured bytes, with [precision] matmul = "exact" and "fast" (native bf16 products
# where the CPU has them: the staging arena differs). Prints Markdown.
#   bash bench/precision_memory.sh > /tmp/precision_memory.md
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
python3 bench/random_shards.py "$TMP/data" 50257 200000
echo "| model | precision | params | grads | optimizer | activations | workspace | comm | total |"
echo "|---|---|---|---|---|---|---|---|---|"
run() {  # model seq micro_batch precision matmul
  local out="$TMP/run-$1-$4-$5"
  OMP_NUM_THREADS=2 "$WEFT" train configs/tiny.toml --model "$1" --data "$TMP/data" --seq_len "$2" \
    --global_batch "$3" --micro_batch "$3" --steps 1 --val_batches 0 --sample_tokens 0 --precision "$4" \
    --matmul "$5" --out "$out" --overwrite >/dev/null 2>&1
  echo "$out"
}
for spec in "tiny 256 8" "gpt2-124m 1024 4"; do
  set -- $spec
  f32=$(run "$1" "$2" "$3" fp32 exact)
  for mm in exact fast; do
  b16=$(run "$1" "$2" "$3" bf16 $mm)
  python3 - "$f32" "$b16" "$1 (B $3, T $2)" "$mm" <<'PY'
import json, sys
f32, b16, model, mm = sys.argv[1:5]
def report(out):
    return [json.loads(l) for l in open(out + "/metrics.jsonl") if "memory_report" in l][-1]["memory_report"][0]
keys = ("params", "grads", "optimizer", "activations", "workspace", "comm", "total")
a, b = report(f32), report(b16)
for name, r in (("fp32", a), (f"bf16 {mm}", b)):
    cells = []
    for k in keys:
        p, m = r["predicted"][k], r["measured"][k]
        err = f"{100.0 * (p - m) / m:+.1f}%" if m else "-"
        cells.append(f"{p / 2**20:.1f} / {m / 2**20:.1f} ({err})")
    print(f"| {model} | {name} | " + " | ".join(cells) + " |")
ratios = [f"{b['measured'][k] / a['measured'][k]:.3f}" if a["measured"][k] else "-" for k in keys]
print(f"| {model} | bf16 {mm} / fp32 measured | " + " | ".join(ratios) + " |")
PY
  done
done
