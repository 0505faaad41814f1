#!/usr/bin/env bash
# ZeRO++ on CPU ranks standing for nodes (docs/zeropp.md): the tiny preset on the fortunes
# corpus, the same seed and global batch, ZeRO-3 against qwZ, qgZ (with and without error
# feedback), ZeRO++ (qwZ + hpZ + qgZ) on 4 ranks as 2 nodes of 2, and the 3-level variant
# (levels pair 2, node 4; hpZ on the pair) on 8 ranks as 2 nodes of 4 beside ZeRO-3 there.
# Prints one JSON line per run: final validation loss, its gap to ZeRO-3, bytes crossing each
# level per step (comm_report.json), hpZ's measured memory beside the model's, step time.
#   bench/zeropp_study.sh [STEPS] [OUT_DIR]      (defaults: 200, runs/zeropp-study)
#   ONLY="zpp-4 l3-8" WEFT=/tmp/weft bench/zeropp_study.sh   a subset, another binary
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-200}
OUT=${2:-runs/zeropp-study}
W=${WEFT:-build/weft}  # WEFT=path: another binary (e.g. a copy, so a rebuild does not change it mid-study)
[ -d data/fortunes ] || $W prepare --input /usr/share/games/fortunes --out data/fortunes >/dev/null
ROOT=""; [ "$(id -u)" = 0 ] && ROOT=--allow-run-as-root
mkdir -p "$OUT"
COMMON="--steps $STEPS --seq_len 64 --global_batch 8 --micro_batch 1 --warmup_steps 20 --val_every 50 --val_batches 4
        --ckpt_every 0 --keep_last 1 --log_every 50 --sample_tokens 0 --threads 1 --trace --zero 3 --overwrite"
run() {  # name np ranks_per_node args...
  local name=$1 np=$2 rpn=$3; shift 3
  # ONLY="qgz-ef-4 zpp-4": run just these (the others keep what an earlier call left in OUT_DIR).
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then return; fi
  mpirun --oversubscribe $ROOT -np "$np" -x OMP_NUM_THREADS=1 $W train configs/tiny.toml $COMMON \
    --ranks_per_node "$rpn" --out "$OUT/$name" "$@" > "$OUT/$name.log" 2>&1 || { echo "{\"run\": \"$name\", \"failed\": true}"; return; }
}
run z3-4 4 2
run qwz-4 4 2 --zero-quantized-weights
run qgz-4 4 2 --zero-quantized-gradients
run qgz-ef-4 4 2 --zero-quantized-gradients --zero.error_feedback true
run hpz-4 4 2 --zero-hpz-partition-size 2
run zpp-4 4 2 --zero-quantized-weights --zero-hpz-partition-size 2 --zero-quantized-gradients
run zpp-ef-4 4 2 --zero-quantized-weights --zero-hpz-partition-size 2 --zero-quantized-gradients --zero.error_feedback true
run z3-8 8 4
run zpp-8 8 4 --zero-quantized-weights --zero-hpz-partition-size 4 --zero-quantized-gradients
run l3-8 8 4 --zero-quantized-weights --zero-hpz-partition-size 2 --zero-quantized-gradients --zero.hierarchy 2,4
python3 - "$OUT" <<'PY'
import json, sys, os
out = sys.argv[1]
def metrics(run):
    return [json.loads(l) for l in open(f"{out}/{run}/metrics.jsonl")]
def val(run):
    return [m["val_loss"] for m in metrics(run) if "val_loss" in m][-1]
for run in ["z3-4", "qwz-4", "qgz-4", "qgz-ef-4", "hpz-4", "zpp-4", "zpp-ef-4", "z3-8", "zpp-8", "l3-8"]:
    if not os.path.exists(f"{out}/{run}/comm_report.json"):
        print(json.dumps({"run": run, "failed": True})); continue
    base = "z3-8" if run.endswith("-8") else "z3-4"
    rep = json.load(open(f"{out}/{run}/comm_report.json"))
    lv = rep["levels"]; steps = len(lv["steps"])
    per_level = {k: v / steps for k, v in lv["total"]["bytes"].items()}
    mem = [m["memory"] for m in metrics(run) if "memory" in m][-1]
    times = [m["ms"] for m in metrics(run) if "ms" in m and "loss" in m]
    print(json.dumps({"run": run, "val_loss": round(val(run), 5), "gap_vs_zero3": round(val(run) / val(base) - 1, 5),
                      "crossing_bytes_per_step": per_level, "mismatches": rep["mismatches"],
                      "hpz_bytes": mem.get("hpz"), "params_bytes": mem.get("params"),
                      "step_ms_median": sorted(times)[len(times) // 2] if times else None}))
PY
