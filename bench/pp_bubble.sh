#!/usr/bin/env bash
# Pipeline bubble, measured against the closed forms (p-1)/m (GPipe, 1F1B) and (p-1)/(v m)
# (interleaved 1F1B), Narayanan et al. 2021 sec. 2.2. The model is made to balance: 8 layers,
# hidden 256, and a 512-token vocabulary so that the output head costs 0.17 of a layer (with
# GPT-2's 50304 rows it would cost 16 layers and dominate the last stage). One thread per
# rank; random tokens. bubble_fraction in metrics.jsonl is (p x longest stage span - sum of
# stage busy times) / sum of busy times, the quantity the closed forms predict.
#   bash bench/pp_bubble.sh [stages="2"] [micro_batches="2 4 8"]
# pp 4 needs 4 cores to be meaningful: on fewer, stages time-share cores and the busy times
# inflate.
set -euo pipefail
cd "$(dirname "$0")/.."
STAGES="${1:-2}"
MBS="${2:-2 4 8}"
STEPS="${STEPS:-6}"
source bench/common.sh

python3 bench/random_shards.py "$TMP/data" 512 400000

measure() {  # median over the steps after the first of bubble_fraction and ms
  python3 - "$1" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl") if '"loss"' in l][1:]
b = statistics.median(r["pipeline"]["bubble_fraction"] for r in rows)
ms = statistics.median(r["ms"] for r in rows)
busy = [statistics.median(r["pipeline"]["busy_ms"][s] for r in rows) for s in range(len(rows[0]["pipeline"]["busy_ms"]))]
print(f'{b:.3f} {ms:.0f} {"/".join(f"{x:.0f}" for x in busy)}')
PY
}

printf "%-12s %3s %3s %3s %10s %10s %8s  %s\n" schedule p v m predicted measured ms_step busy_ms_per_stage
for p in $STAGES; do
  for m in $MBS; do
    for sched in gpipe 1f1b interleaved:2 interleaved:4; do
      name="${sched%%:*}"; v=1
      [ "$name" = interleaved ] && v="${sched##*:}"
      [ "$name" = interleaved ] && [ $((m % p)) -ne 0 ] && continue
      [ $((p * v)) -gt 8 ] && continue
      env -u OPENBLAS_CORETYPE mpirun --oversubscribe $ROOT_FLAG --bind-to none -np "$p" -x OMP_NUM_THREADS=1 \
        -x OMP_WAIT_POLICY=PASSIVE "$WEFT" train configs/tiny.toml --n_layer 8 --vocab_size 512 --data "$TMP/data" \
        --seq_len 256 --micro_batch 4 --global_batch $((4 * m)) --steps "$STEPS" --warmup_steps 1 --val_batches 0 \
        --sample_tokens 0 --log_every 1000 --threads 1 --pp "$p" --schedule "$name" --virtual_stages "$v" \
        --out "$TMP/run" --overwrite >/dev/null
      read -r meas ms busy < <(measure "$TMP/run")
      pred=$(python3 -c "print(f'{($p - 1) / ($v * $m):.3f}')")
      printf "%-12s %3d %3d %3d %10s %10s %8s  %s\n" "$name" "$p" "$v" "$m" "$pred" "$meas" "$ms" "$busy"
    done
  done
done
