#!/usr/bin/env bash
# Predicted (src/plan/weft_memory.h) against measured (core/memory.h tracker) bytes per rank
# and category, over a matrix of layouts of the tiny and small presets: the table of
# docs/memory.md. Two training steps each on random tokens; prints Markdown.
#   bash bench/memory_table.sh > /tmp/table.md
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
python3 bench/random_shards.py "$TMP/data" 50257 200000
echo "| model | layout | rank (stage) | params | grads | optimizer | activations | workspace | comm | total |"
echo "|---|---|---|---|---|---|---|---|---|---|"
run() {  # model np args...
  local model=$1 np=$2; shift 2
  local out="$TMP/run"
  local cmd=("$WEFT" train configs/tiny.toml --model "$model" --data "$TMP/data" --seq_len 64 --global_batch 8
             --micro_batch 2 --steps 2 --val_batches 0 --sample_tokens 0 --threads 1 --out "$out" --overwrite "$@")
  if [ "$np" -gt 0 ]; then
    mpirun --oversubscribe $ROOT_FLAG -np "$np" -x OMP_NUM_THREADS=1 "${cmd[@]}" >/dev/null 2>&1
  else
    OMP_NUM_THREADS=1 "${cmd[@]}" >/dev/null 2>&1
  fi
  python3 - "$out" "$model" "$*" <<'PY'
import json, sys
out, model, layout = sys.argv[1:4]
rep = [json.loads(l) for l in open(out + "/metrics.jsonl") if "memory_report" in l][-1]["memory_report"]
seen = set()
for r in rep:
    if r["stage"] in seen: continue
    seen.add(r["stage"])
    cells = []
    for k in ("params", "grads", "optimizer", "activations", "workspace", "comm", "total"):
        p, m = r["predicted"][k], r["measured"][k]
        err = f"{100.0 * (p - m) / m:+.1f}%" if m else "-"
        cells.append(f"{p / 2**20:.2f} / {m / 2**20:.2f} ({err})")
    print(f"| {model} | {layout or '1 rank'} | {r['rank']} ({r['stage']}) | " + " | ".join(cells) + " |")
PY
}
run tiny 0
run tiny 0 --recompute selective
run tiny 0 --recompute full
run tiny 2 --tp 2
run tiny 2 --tp 2 --sequence_parallel true --recompute selective
run tiny 2 --dp 2 --zero 1 --recompute full
run tiny 2 --dp 2 --zero 3
run tiny 2 --pp 2 --schedule gpipe --recompute full --recompute_layers 1
run tiny 4 --tp 2 --pp 2
run tiny 4 --pp 2 --dp 2 --zero 1 --micro_batch 1 --schedule interleaved --virtual_stages 2
run tiny 2 --pp 2 --schedule interleaved --virtual_stages 2 --micro_batch 1
run small 0
run small 0 --recompute selective
run small 2 --tp 2 --sequence_parallel true --zero 1 --dp 1
run small 2 --pp 2 --recompute full
run small 2 --dp 2 --zero 2 --recompute selective
# 16-bit storage (issue 32): activations in bf16 buffers, the staging arena in the workspace
run tiny 0 --precision bf16
run tiny 0 --precision bf16 --recompute full
run tiny 2 --tp 2 --precision bf16
run tiny 2 --tp 2 --sequence_parallel true --precision bf16 --recompute selective
run tiny 2 --pp 2 --schedule interleaved --virtual_stages 2 --micro_batch 1 --precision fp16
run tiny 4 --tp 2 --dp 2 --zero 3 --precision bf16
