#!/usr/bin/env bash
# Communication characterisation (docs/communication.md): the small preset (GPT-2 vocabulary)
# on random tokens, one traced training step per case (calls and bytes are deterministic:
# one step says it all), sweeping the layout (dp with each ZeRO stage, tp with and without
# sequence parallelism, pp with each schedule, one 3D layout), the sequence length and the
# micro-batch, on up to 8 ranks (mpirun --oversubscribe). Prints one JSON line per case (calls,
# bytes, message sizes per axis, share of calls under 64 KiB, model mismatches), then the
# Markdown tables of docs/communication.md.
#   bash bench/comm_study.sh [model=small]
# OUT=dir keeps the runs there (default: a scratch folder); ONLY="label ..." runs only those
# cases (the tables then read the others from OUT).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL="${1:-small}"
source bench/common.sh
python3 bench/random_shards.py "$TMP/data" 50257 200000 20000 >/dev/null
OUT="${OUT:-$TMP/study}"
mkdir -p "$OUT"

# label | ranks | arguments
CASES=(
  "dp4-zero0|4|--dp 4 --zero 0"
  "dp4-zero1|4|--dp 4 --zero 1"
  "dp4-zero2|4|--dp 4 --zero 2"
  "dp4-zero3|4|--dp 4 --zero 3"
  "mb1-dp4-zero1|4|--dp 4 --zero 1 --micro_batch 1"
  "mb1-dp4-zero3|4|--dp 4 --zero 3 --micro_batch 1"
  "tp2|2|--tp 2"
  "tp2-sp|2|--tp 2 --sequence_parallel true"
  "tp2-dp4-zero1|8|--tp 2 --dp 4 --zero 1"
  "pp2-gpipe|2|--pp 2 --schedule gpipe"
  "pp2-1f1b|2|--pp 2 --schedule 1f1b"
  "pp2-interleaved-v3|2|--pp 2 --schedule interleaved --virtual_stages 3"
  "pp3-1f1b|3|--pp 3 --schedule 1f1b"
  "tp2-pp2-dp2-zero1|8|--tp 2 --pp 2 --dp 2 --zero 1"
  "seq64-dp4-zero1|4|--dp 4 --zero 1 --seq_len 64"
  "seq256-dp4-zero1|4|--dp 4 --zero 1 --seq_len 256"
  "seq64-tp2|2|--tp 2 --seq_len 64"
  "seq256-tp2|2|--tp 2 --seq_len 256"
  "seq64-pp2-1f1b|2|--pp 2 --seq_len 64"
  "seq256-pp2-1f1b|2|--pp 2 --seq_len 256"
  "mb1-pp2-1f1b|2|--pp 2 --micro_batch 1"
  "mb4-pp2-1f1b|2|--pp 2 --micro_batch 4"
  "mb1-tp2|2|--tp 2 --micro_batch 1"
  "mb4-tp2|2|--tp 2 --micro_batch 4"
)

for c in "${CASES[@]}"; do
  IFS='|' read -r label np args <<<"$c"
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $label "* ]]; then continue; fi
  # shellcheck disable=SC2086
  env -u OPENBLAS_CORETYPE mpirun --oversubscribe $ROOT_FLAG --bind-to none -np "$np" -x OMP_NUM_THREADS=1 \
    -x OMP_WAIT_POLICY=PASSIVE "$WEFT" train configs/tiny.toml --model "$MODEL" --data "$TMP/data" --steps 1 \
    --seq_len 128 --global_batch 8 --micro_batch 2 --val_batches 0 --sample_tokens 0 --log_every 1000 --threads 1 \
    --trace true --overwrite $args --out "$OUT/$label" >"$OUT/$label.log" 2>&1 || { echo "$label failed:"; tail -5 "$OUT/$label.log"; exit 1; }
  rm -rf "$OUT/$label"/step-*  # the run's final checkpoint: not part of the study
done

python3 - "$OUT" "${CASES[@]}" <<'PY'
import json, statistics, sys
out, cases = sys.argv[1], [c.split("|")[0] for c in sys.argv[2:]]
# Bytes on the wire per rank (NCCL-tests' bus factor of the group): what the ZeRO paper and
# the Megatron papers count, where the tracer's bytes are the logical buffer.
def bus(op, n):
    if op == "recv": return 0.0  # a transfer's bytes are counted once, on its send
    if n <= 1: return 0.0
    return 2 * (n - 1) / n if op == "all_reduce" else (n - 1) / n if op in ("all_gather", "reduce_scatter") else 1.0
def fmt(b):
    for u, s in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= s: return f"{b / s:.1f} {u}"
    return f"{b} B"
results = {}
for label in cases:
    rep = json.load(open(f"{out}/{label}/comm_report.json"))
    axes = {}
    for r in rep["rows"]:
        if r["count"] == 0: continue
        a = axes.setdefault(r["axis"], {"calls": 0, "bytes": 0, "wire": 0.0, "sizes": [], "small": 0})
        a["calls"] += r["count"]; a["bytes"] += r["total_bytes"]
        a["wire"] += r["total_bytes"] * bus(r["op"], r["group_size"])
        a["sizes"] += [r["bytes"]] * r["count"]
        if r["bytes"] < 65536: a["small"] += r["count"]
    calls = sum(a["calls"] for a in axes.values()); small = sum(a["small"] for a in axes.values())
    res = {"case": label, "layout": rep["layout"], "mismatches": rep["mismatches"], "calls": calls,
           "bytes": sum(a["bytes"] for a in axes.values()), "wire_bytes": sum(a["wire"] for a in axes.values()),
           "share_under_64k": small / calls if calls else 0,
           "axes": {k: {"calls": a["calls"], "bytes": a["bytes"], "wire_bytes": a["wire"], "min": min(a["sizes"]), "median": statistics.median(a["sizes"]),
                        "max": max(a["sizes"]), "under_64k": a["small"]} for k, a in sorted(axes.items())}}
    results[label] = res
    print(json.dumps(res))
print()
print("| case | axis | calls | bytes (logical) | bytes on the wire | message size min / median / max | calls < 64 KiB |")
print("|---|---|---|---|---|---|---|")
for label, res in results.items():
    for ax, a in res["axes"].items():
        print(f"| {label} | {ax} | {a['calls']} | {fmt(a['bytes'])} | {fmt(int(a['wire_bytes']))} | {fmt(a['min'])} / {fmt(int(a['median']))} / {fmt(a['max'])} | {a['under_64k']} ({100 * a['under_64k'] / a['calls']:.0f}%) |")
print()
print("| case | calls | bytes | share of calls < 64 KiB | mismatches vs model |")
print("|---|---|---|---|---|")
for label, res in results.items():
    print(f"| {label} | {res['calls']} | {fmt(res['bytes'])} | {100 * res['share_under_64k']:.1f}% | {res['mismatches']} |")
print()
for pre, what in (("", "1 micro-batch per rank"), ("mb1-", "2 micro-batches per rank")):
    z = [f"{pre}dp4-zero{s}" for s in (0, 1, 2, 3)]
    z = {int(k[-1]): results[k]["axes"]["dp"] for k in z if k in results}
    if 1 not in z or 3 not in z: continue
    print(f"dp 4, {what}: " + ", ".join(f"ZeRO-{s} {fmt(a['bytes'])} ({fmt(int(a['wire_bytes']))} on the wire)" for s, a in z.items()) +
          f"; ZeRO-3 / ZeRO-1 = {z[3]['bytes'] / z[1]['bytes']:.3f} (wire {z[3]['wire_bytes'] / z[1]['wire_bytes']:.3f})")
PY
