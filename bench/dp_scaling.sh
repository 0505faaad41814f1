#!/usr/bin/env bash
# Data-parallel scaling on one machine: tokens/s of `weft train` on 2 ranks with one thread
# each against one rank with one thread, same model, same global batch, alternating runs.
# Prints one JSON line per run and a summary per model and ZeRO stage.
#   bash bench/dp_scaling.sh [rounds=2] [models="tiny small"] [zero="0 1"]
# Needs prepared data in data/fortunes (see README) and an MPI installation.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS="${1:-2}"
MODELS="${2:-tiny small}"
ZEROS="${3:-0 1}"
STEPS="${STEPS:-8}"
source bench/common.sh

# Mean tokens/s over the steps after the first (which pays one-time costs), and the mean
# exposed data-parallel communication per step.
measure() {
  python3 - "$1" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl") if '"loss"' in l]
rows = rows[1:]
ms = sum(r["ms"] for r in rows) / len(rows)
tok = rows[0]["tokens_per_s"] * rows[0]["ms"] / 1000.0
exp = sum(r.get("dp_exposed_ms", 0.0) for r in rows) / len(rows)
print(json.dumps({"tokens_per_s": tok / (ms / 1000.0), "ms_per_step": ms, "dp_exposed_ms": exp}))
PY
}

for model in $MODELS; do
  for zero in $ZEROS; do
    one=(); two=()
    for r in $(seq 1 "$ROUNDS"); do
      args=(train configs/tiny.toml --model "$model" --steps "$STEPS" --global_batch 8 --micro_batch 4
            --val_batches 0 --sample_tokens 0 --log_every 1000 --threads 1 --zero "$zero" --overwrite)
      env -u OPENBLAS_CORETYPE OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE "$WEFT" "${args[@]}" --out "$TMP/one" >/dev/null
      j1=$(measure "$TMP/one"); one+=("$j1")
      echo "{\"model\":\"$model\",\"zero\":$zero,\"ranks\":1,\"result\":$j1}"
      env -u OPENBLAS_CORETYPE mpirun --oversubscribe $ROOT_FLAG --bind-to none -np 2 -x OMP_NUM_THREADS=1 \
        -x OMP_WAIT_POLICY=PASSIVE "$WEFT" "${args[@]}" --dp 2 --out "$TMP/two" >/dev/null
      j2=$(measure "$TMP/two"); two+=("$j2")
      echo "{\"model\":\"$model\",\"zero\":$zero,\"ranks\":2,\"result\":$j2}"
    done
    python3 - "$model" "$zero" "$(printf '%s\n' "${one[@]}")" "$(printf '%s\n' "${two[@]}")" <<'PY'
import json, statistics, sys
model, zero = sys.argv[1], int(sys.argv[2])
one = [json.loads(l) for l in sys.argv[3].splitlines()]
two = [json.loads(l) for l in sys.argv[4].splitlines()]
a = statistics.median(r["tokens_per_s"] for r in one)
b = statistics.median(r["tokens_per_s"] for r in two)
print(json.dumps({"summary": "dp_scaling", "model": model, "zero": zero, "one_rank_tokens_per_s": a,
                  "two_ranks_tokens_per_s": b, "speedup": b / a,
                  "dp_exposed_ms": statistics.median(r["dp_exposed_ms"] for r in two)}))
PY
  done
done
