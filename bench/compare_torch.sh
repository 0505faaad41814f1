#!/usr/bin/env bash
# Training-step throughput of weft against the PyTorch peer, measured in the same run.
#
#   bash bench/compare_torch.sh [rounds=3] [models="tiny small"]
#
# For each model, ROUNDS rounds; each round runs both (order alternates between rounds):
#   build/weft bench --model M --batch 8 --seq 256 --threads 2 --steps 10 --format json
#   /usr/bin/python3 bench/torch_peer.py --model M --batch 8 --seq 256 --threads 2 --steps 10
# both under `env -u OPENBLAS_CORETYPE OMP_WAIT_POLICY=PASSIVE` (a user's machine has no
# OPENBLAS_CORETYPE; PyTorch's default busy-waiting OpenMP threads slow 2 threads here).
# Every JSON line is printed as it comes, then one summary line per model:
#   {"summary": "compare_torch", "model", "rounds", "weft_tokens_per_s" (median),
#    "torch_tokens_per_s" (median), "ratio_weft_over_torch", ...}
# A weft run that fails or prints no JSON line with tokens_per_s is reported on stderr and
# counted as missing (ratio null); the torch side still runs. Exit status 1 if any run failed.
#
# Overrides (environment): WEFT (default build/weft), PYTHON (default /usr/bin/python3),
# BATCH (8), SEQ (256), THREADS (2), STEPS (10).
set -u

ROUNDS="${1:-3}"
MODELS="${2:-tiny small}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WEFT="${WEFT:-$ROOT/build/weft}"
PYTHON="${PYTHON:-/usr/bin/python3}"
BATCH="${BATCH:-8}"
SEQ="${SEQ:-256}"
THREADS="${THREADS:-2}"
STEPS="${STEPS:-10}"
RUNENV=(env -u OPENBLAS_CORETYPE OMP_WAIT_POLICY=PASSIVE)

if ! [[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]]; then
  echo "compare_torch.sh: rounds must be a positive integer, got '$ROUNDS'" >&2
  exit 2
fi

failed=0
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# Prints the last stdout line of "$1" that is a JSON object with a numeric tokens_per_s.
pick_json() {
  "$PYTHON" - "$1" <<'EOF'
import json, sys
best = None
for line in open(sys.argv[1], errors="replace"):
    line = line.strip()
    if not line.startswith("{"):
        continue
    try:
        rec = json.loads(line)
    except ValueError:
        continue
    if isinstance(rec, dict) and isinstance(rec.get("tokens_per_s"), (int, float)):
        best = line
if best is None:
    sys.exit(1)
print(best)
EOF
}

# run_one IMPL MODEL OUTFILE: runs one benchmark, appends its JSON line to OUTFILE.
run_one() {
  local impl="$1" model="$2" outfile="$3" rc line
  local log="$tmp/$impl.out" err="$tmp/$impl.err"
  if [[ "$impl" == weft ]]; then
    if [[ ! -x "$WEFT" ]]; then
      echo "compare_torch.sh: weft binary '$WEFT' not found or not executable (build it: cmake --build build)" >&2
      failed=1; return
    fi
    "${RUNENV[@]}" "$WEFT" bench --model "$model" --batch "$BATCH" --seq "$SEQ" \
      --threads "$THREADS" --steps "$STEPS" --format json >"$log" 2>"$err"
  else
    "${RUNENV[@]}" "$PYTHON" "$ROOT/bench/torch_peer.py" --model "$model" --batch "$BATCH" \
      --seq "$SEQ" --threads "$THREADS" --steps "$STEPS" >"$log" 2>"$err"
  fi
  rc=$?
  if [[ $rc -ne 0 ]]; then
    echo "compare_torch.sh: $impl bench --model $model failed with exit code $rc; stderr tail:" >&2
    tail -n 5 "$err" | sed 's/^/  /' >&2
    failed=1; return
  fi
  if ! line="$(pick_json "$log")"; then
    echo "compare_torch.sh: $impl bench --model $model exited 0 but printed no JSON line with tokens_per_s" \
         "(stdout: $(head -c 200 "$log" | tr '\n' ' '))" >&2
    failed=1; return
  fi
  echo "$line"
  echo "$line" >>"$outfile"
}

for model in $MODELS; do
  : >"$tmp/weft.$model.jsonl"
  : >"$tmp/torch.$model.jsonl"
  for ((r = 1; r <= ROUNDS; r++)); do
    if ((r % 2 == 1)); then order=(weft torch); else order=(torch weft); fi
    for impl in "${order[@]}"; do
      run_one "$impl" "$model" "$tmp/$impl.$model.jsonl"
    done
  done
  "$PYTHON" - "$model" "$ROUNDS" "$BATCH" "$SEQ" "$THREADS" \
      "$tmp/weft.$model.jsonl" "$tmp/torch.$model.jsonl" <<'EOF'
import json, statistics, sys
model, rounds, batch, seq, threads, wf, tf = sys.argv[1:]
def load(p):
    return [json.loads(l) for l in open(p) if l.strip()]
w, t = load(wf), load(tf)
def med(recs, key):
    vals = [r[key] for r in recs if isinstance(r.get(key), (int, float))]
    return statistics.median(vals) if vals else None
wt, tt = med(w, "tokens_per_s"), med(t, "tokens_per_s")
out = {"summary": "compare_torch", "model": model, "batch": int(batch), "seq": int(seq),
       "threads": int(threads), "rounds": int(rounds),
       "weft_runs": len(w), "torch_runs": len(t),
       "weft_tokens_per_s": wt, "torch_tokens_per_s": tt,
       "weft_ms_per_step": med(w, "ms_per_step"), "torch_ms_per_step": med(t, "ms_per_step"),
       "weft_model_flops_per_s": med(w, "model_flops_per_s"),
       "torch_model_flops_per_s": med(t, "model_flops_per_s"),
       "ratio_weft_over_torch": round(wt / tt, 4) if wt and tt else None}
print(json.dumps(out), flush=True)
EOF
done
exit "$failed"
