#!/usr/bin/env bash
# The decoder variants' CPU throughput (issue 36): llama-tiny (rotary positions, RMSNorm, no
# biases, SwiGLU 768, 2 kv heads of 4, tied head: 16.03M parameters) against the GPT tiny preset
# (16.1M: the same FLOPs per token) in the same run, alternating, same data, batch and threads, fp32; with the planner's
# step-time prediction for each (a calibrated system file: systems/local.toml, written by
# `weft calibrate` when missing).   bash bench/decoder_bench.sh [rounds=3]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS="${1:-3}"
STEPS="${STEPS:-8}"
SYSTEM="${SYSTEM:-systems/local.toml}"
source bench/common.sh
[ -d data/fortunes ] || "$WEFT" prepare --input /usr/share/games/fortunes --out data/fortunes >/dev/null
[ -f "$SYSTEM" ] || "$WEFT" calibrate --out "$SYSTEM" >/dev/null

measure() {
  python3 - "$1" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl")]
rows = [r for r in lines if "loss" in r and "ms" in r][1:]  # the first step warms up
rep = [r["step_time_report"] for r in lines if "step_time_report" in r][-1]
ms = sum(r["ms"] for r in rows) / len(rows)
tokens = rows[0]["tokens_per_s"] * rows[0]["ms"] / 1000.0
print(json.dumps({"tokens_per_s": tokens / (ms / 1000.0), "ms_per_step": ms,
                  "predicted_s": rep["predicted_s"], "measured_s": rep["measured_s"]}))
PY
}

echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"
results=()
for r in $(seq 1 "$ROUNDS"); do
  for model in tiny llama-tiny; do
    "$WEFT" train configs/tiny.toml --model "$model" --steps "$STEPS" --val_batches 0 --sample_tokens 0 \
      --ckpt_every 0 --log_every 1000 --system "$SYSTEM" --overwrite --out "$TMP/$model" >/dev/null
    j=$(measure "$TMP/$model")
    echo "{\"round\":$r,\"model\":\"$model\",\"result\":$j}"
    results+=("$model $j")
  done
done
python3 - "$(printf '%s\n' "${results[@]}")" <<'PY'
import json, statistics, sys
by = {}
for line in sys.argv[1].splitlines():
    model, j = line.split(" ", 1)
    by.setdefault(model, []).append(json.loads(j))
med = {m: statistics.median(x["tokens_per_s"] for x in v) for m, v in by.items()}
for m, v in by.items():
    pred = statistics.median(x["predicted_s"] for x in v)
    meas = statistics.median(x["measured_s"] for x in v)
    print(f"{m:11s} tokens/s {med[m]:9.0f}  step measured {meas:.3f} s, predicted {pred:.3f} s "
          f"({100 * (pred - meas) / meas:+.1f}%)")
print(f"llama-tiny / tiny tokens/s: {med['llama-tiny'] / med['tiny']:.3f}")
PY
