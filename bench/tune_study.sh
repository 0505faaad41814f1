#!/usr/bin/env bash
# weft tune against an exhaustive sweep of the same space on this machine (docs/tune.md):
#   1. calibrate this machine on 2 ranks (the planner's system file);
#   2. the sweep: every valid layout of the tiny preset (seq 64, global batch 8) on 2 ranks, as a
#      search whose random phase covers the space (--initial = --trials = everything), with
#      --recalibrate (the planner's error on every layout before and after);
#   3. searches replayed against the sweep's measurements (--oracle, milliseconds each), 5 seeds
#      each: CBO seeded by the planner, CBO without the planner's seeds, random search;
#   4. a live 12-trial search on 2 ranks, and on 4 ranks OVERSUBSCRIBED on this 2-core machine
#      (its timings measure the oversubscription as much as the layouts).
# Prints one JSON line per method: the trials needed to come within 5% of the sweep's best
# (per seed and the median), and the sweep's figures (best, planner pick, planner error,
# SHAP ranking).
#   bench/tune_study.sh [OUT_DIR] [TRIALS]      (defaults: runs/tune-study, 40)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/tune-study}
TRIALS=${2:-40}
W=${WEFT:-build/weft}
[ -d data/fortunes ] || $W prepare --input /usr/share/games/fortunes --out data/fortunes >/dev/null
ROOT=""; [ "$(id -u)" = 0 ] && ROOT=--allow-run-as-root
MPI="mpirun --oversubscribe $ROOT -x OMP_NUM_THREADS=1"
mkdir -p "$OUT"
RUN="configs/tiny.toml --set seq_len=64 --set global_batch=8 --set threads=1 --system $OUT/local.toml"
$MPI -np 2 $W calibrate --threads 1 --out "$OUT/local.toml" > "$OUT/calibrate.log" 2>&1
$MPI -np 2 $W tune $RUN --trials 100000 --initial 100000 --planner-seeds 0 --steps 3 --warmup 1 --confirm 5 \
  --recalibrate "$OUT/recalibrated.toml" --out "$OUT/sweep" > "$OUT/sweep.log" 2>&1
for s in 1 2 3 4 5; do
  $MPI -np 2 $W tune $RUN --oracle "$OUT/sweep/tune.csv" --trials "$TRIALS" --seed $s --out "$OUT/cbo-$s" > /dev/null 2>&1
  $MPI -np 2 $W tune $RUN --oracle "$OUT/sweep/tune.csv" --trials "$TRIALS" --seed $s --planner-seeds 0 \
    --out "$OUT/cbo-unseeded-$s" > /dev/null 2>&1
  $MPI -np 2 $W tune $RUN --oracle "$OUT/sweep/tune.csv" --trials "$TRIALS" --seed $s --planner-seeds 0 \
    --initial "$TRIALS" --out "$OUT/random-$s" > /dev/null 2>&1
done
$MPI -np 2 $W tune $RUN --trials 12 --steps 3 --warmup 1 --out "$OUT/live-2" > "$OUT/live-2.log" 2>&1
$MPI -np 4 $W tune $RUN --trials 12 --steps 3 --warmup 1 --out "$OUT/live-4-oversubscribed" \
  > "$OUT/live-4-oversubscribed.log" 2>&1
python3 - "$OUT" "$TRIALS" <<'PY'
import csv, json, statistics, sys
out, trials = sys.argv[1], int(sys.argv[2])
def rows(run):
    return list(csv.DictReader(open(f"{out}/{run}/tune.csv")))
sweep = rows("sweep")
ok = [float(r["objective"]) for r in sweep if r["objective"] != "F"]
best = max(ok)
def to_within(run, frac=0.05):
    for i, r in enumerate(rows(run)):
        if r["objective"] != "F" and float(r["objective"]) >= (1 - frac) * best:
            return i + 1
    return None  # not reached within the budget
for method in ["cbo", "cbo-unseeded", "random"]:
    n = [to_within(f"{method}-{s}") for s in range(1, 6)]
    reached = [x for x in n if x is not None]
    med = statistics.median([x if x is not None else trials + 1 for x in n])
    print(json.dumps({"method": method, "trials_to_within_5pct": n, "median": med,
                      "budget": trials, "note": "None: not within the budget; the median counts it as budget + 1"}))
s = json.load(open(f"{out}/sweep/summary.json"))
shap = json.load(open(f"{out}/sweep/shap.json"))
print(json.dumps({"sweep_layouts": len(sweep), "failed": s["failed"], "best": s["best"], "best_tokens_per_s": best,
                  "planner_error": s.get("planner_error"), "recalibration": s.get("recalibration"),
                  "shap_ranking": [(r["knob"], round(r["mean_abs_phi"], 1)) for r in shap["ranking"]]}))
for live in ["live-2", "live-4-oversubscribed"]:
    l = json.load(open(f"{out}/{live}/summary.json"))
    print(json.dumps({"live": live, "best": l["best"], "planner_pick": l["planner_pick"],
                      "best_over_planner_pick": l.get("best_over_planner_pick")}))
PY
