#!/usr/bin/env bash
# Every family's step time against the planner on this machine (issue 35 item 4): a calibration
# (one rank, THREADS threads), then each family's run priced from it (`weft train --system`:
# the run prints the prediction beside the mean measured step), then `weft calibrate --check`
# of the same file, so that a machine whose speed moved while the runs ran is seen. ROUNDS
# rounds; one JSON line per family and round, then a table. The families run alone, one after
# the other, each for a few seconds (STEPS_GPT steps of configs/tiny.toml, STEPS steps of the
# others).
#
#   bench/family_accuracy.sh                 # ROUNDS=2 THREADS=2 STEPS=300 STEPS_GPT=12 QUICK=0
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
ROUNDS=${ROUNDS:-2}
THREADS=${THREADS:-2}
STEPS=${STEPS:-300}
STEPS_GPT=${STEPS_GPT:-12}
QUICK=${QUICK:-0}
OUT=${OUT:-runs/family-accuracy}
mkdir -p "$OUT"
[ -d data/fortunes ] || "$WEFT" prepare --input /usr/share/games/fortunes --out data/fortunes >/dev/null
[ -d data/weather ] || "$WEFT" prepare --synthetic-weather data/weather >/dev/null
[ -d data/lj ] || "$WEFT" prepare --synthetic-lj data/lj --structures 2000 >/dev/null

common=(--val_every 0 --val_batches 1 --ckpt_every 0 --threads "$THREADS" --log_every 1000 --overwrite)
# name | config | its own options
FAMILIES=(
  "gpt-tiny|configs/tiny.toml|--steps $STEPS_GPT --sample_tokens 0"
  "climax-tiny|configs/climax-tiny.toml|--steps $STEPS"
  "schnet|configs/gnn-lj.toml|--steps $STEPS --model.layer schnet"
  "egnn|configs/gnn-lj.toml|--steps $STEPS --model.layer egnn"
  "pna|configs/gnn-lj.toml|--steps $STEPS --model.layer pna"
)
quick=()
[ "$QUICK" = 1 ] && quick=(--quick)
results="$OUT/results.jsonl"
: >"$results"
for round in $(seq 1 "$ROUNDS"); do
  sys="$OUT/local-round$round.toml"
  "$WEFT" calibrate --threads "$THREADS" "${quick[@]}" --out "$sys" >"$OUT/calibrate-$round.log" 2>&1
  for spec in "${FAMILIES[@]}"; do
    IFS='|' read -r name config opts <<<"$spec"
    log="$OUT/$name-$round.log"
    # shellcheck disable=SC2086
    "$WEFT" train "$config" $opts "${common[@]}" --system "$sys" --out "$OUT/run-$name" >"$log" 2>&1 ||
      { echo "{\"family\": \"$name\", \"round\": $round, \"error\": \"train failed, see $log\"}" | tee -a "$results"; continue; }
    python3 - "$log" "$name" "$round" <<'EOF' | tee -a "$results"
import json, re, sys
text = open(sys.argv[1]).read()
m = re.search(r"step time: predicted ([\d.]+) ms, measured ([\d.]+) ms \(mean of (\d+) steps\), error ([+-][\d.]+)%", text)
if not m:
    print(json.dumps({"family": sys.argv[2], "round": int(sys.argv[3]), "error": "no step time line in " + sys.argv[1]}))
else:
    print(json.dumps({"family": sys.argv[2], "round": int(sys.argv[3]), "predicted_ms": float(m[1]),
                      "measured_ms": float(m[2]), "steps": int(m[3]), "error_pct": float(m[4])}))
EOF
  done
  check=held
  "$WEFT" calibrate --check "$sys" >"$OUT/check-$round.log" 2>&1 || check="did not hold"
  echo "{\"round\": $round, \"calibrate_check\": \"$check\"}" | tee -a "$results"
done

python3 - "$results" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
fams = []
for r in rows:
    if "family" in r and r["family"] not in fams:
        fams.append(r["family"])
rounds = sorted({r["round"] for r in rows})
print("\n| round | " + " | ".join(fams) + " | calibrate --check |")
print("|---" * (len(fams) + 2) + "|")
for k in rounds:
    cells = []
    for f in fams:
        r = next((x for x in rows if x.get("family") == f and x["round"] == k), None)
        cells.append("failed" if r is None or "error_pct" not in r else
                     f"{r['error_pct']:+.1f}% ({r['predicted_ms']:.1f}/{r['measured_ms']:.1f})")
    chk = next((x["calibrate_check"] for x in rows if x.get("calibrate_check") and x["round"] == k), "")
    print(f"| {k} | " + " | ".join(cells) + f" | {chk} |")
# Each family against GPT tiny in the same round: the machine's drift cancels.
if "gpt-tiny" in fams:
    print("\nrelative to gpt-tiny in the same round (prediction/measurement over GPT's):")
    for f in fams[1:]:
        rel = []
        for k in rounds:
            g = next((x for x in rows if x.get("family") == "gpt-tiny" and x["round"] == k and "error_pct" in x), None)
            r = next((x for x in rows if x.get("family") == f and x["round"] == k and "error_pct" in x), None)
            if g and r:
                rel.append(100.0 * ((1 + r["error_pct"] / 100) / (1 + g["error_pct"] / 100) - 1))
        print(f"  {f}: " + ", ".join(f"{v:+.1f}%" for v in rel))
EOF
