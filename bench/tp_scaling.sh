#!/usr/bin/env bash
# Tensor-parallel throughput on one machine: `weft train` with tp 2 (one thread per rank)
# against one rank with one thread, same model and batch, alternating runs, with the trace's
# tensor-parallel communication time (all of it is exposed: the all-reduces sit between
# dependent products).   bash bench/tp_scaling.sh [rounds=2] [models="small"]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS="${1:-2}"
MODELS="${2:-small}"
STEPS="${STEPS:-6}"
source bench/common.sh

measure() {
  python3 - "$1" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl") if '"loss"' in l][1:]
ms = sum(r["ms"] for r in rows) / len(rows)
tokens = rows[0]["tokens_per_s"] * rows[0]["ms"] / 1000.0
tp = [r.get("comm", {}).get("tp", {}).get("time_s", 0.0) * 1000.0 for r in rows]
calls = [r.get("comm", {}).get("tp", {}).get("calls", 0) for r in rows]
print(json.dumps({"tokens_per_s": tokens / (ms / 1000.0), "ms_per_step": ms,
                  "tp_comm_ms": sum(tp) / len(tp), "tp_calls": sum(calls) / len(calls)}))
PY
}

for model in $MODELS; do
  one=(); two=()
  for r in $(seq 1 "$ROUNDS"); do
    args=(train configs/tiny.toml --model "$model" --steps "$STEPS" --global_batch 8 --micro_batch 8
          --val_batches 0 --sample_tokens 0 --log_every 1000 --threads 1 --trace true --overwrite)
    env -u OPENBLAS_CORETYPE OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE "$WEFT" "${args[@]}" --out "$TMP/one" >/dev/null
    j1=$(measure "$TMP/one"); one+=("$j1")
    echo "{\"model\":\"$model\",\"tp\":1,\"result\":$j1}"
    env -u OPENBLAS_CORETYPE mpirun --oversubscribe $ROOT_FLAG --bind-to none -np 2 -x OMP_NUM_THREADS=1 \
      -x OMP_WAIT_POLICY=PASSIVE "$WEFT" "${args[@]}" --tp 2 --out "$TMP/two" >/dev/null
    j2=$(measure "$TMP/two"); two+=("$j2")
    echo "{\"model\":\"$model\",\"tp\":2,\"result\":$j2}"
  done
  python3 - "$model" "$(printf '%s\n' "${one[@]}")" "$(printf '%s\n' "${two[@]}")" <<'PY'
import json, statistics, sys
model = sys.argv[1]
one = [json.loads(l) for l in sys.argv[2].splitlines()]
two = [json.loads(l) for l in sys.argv[3].splitlines()]
a = statistics.median(r["tokens_per_s"] for r in one)
b = statistics.median(r["tokens_per_s"] for r in two)
ms = statistics.median(r["ms_per_step"] for r in two)
comm = statistics.median(r["tp_comm_ms"] for r in two)
print(json.dumps({"summary": "tp_scaling", "model": model, "one_rank_tokens_per_s": a, "tp2_tokens_per_s": b,
                  "speedup": b / a, "tp2_ms_per_step": ms, "tp2_comm_ms_per_step": comm,
                  "tp2_comm_fraction": comm / ms}))
PY
done
