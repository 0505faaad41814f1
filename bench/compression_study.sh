#!/usr/bin/env bash
# The loss impact of compressed collectives (docs/compression.md; Xu et al. 2024, "Accelerating
# Large Language Model Training with Hybrid GPU-based Compression"): one model, one seed, one
# global batch, a 3D layout on 8 CPU ranks (tp 2 x pp 2 x dp 2, ZeRO-1), the uncompressed
# baseline against
#   uniform      the same lossy codec on every axis (dp, params, tp, pp), with and without
#                error feedback
#   hybrid       aggressive on the data-parallel gradients (int4), mild on parameters (int8)
#                and tensor-parallel activations (bf16), pipeline traffic exact, with and
#                without error feedback
# Prints one JSON line per run: final validation loss and its gap to the baseline, wire bytes
# per axis as a fraction of the baseline's (comm_report.json), the mean relative error per
# (op, axis), step time. Overlays the curves with `weft report`.
#   bench/compression_study.sh [STEPS] [OUT_DIR] [MODEL] [UNIFORM_CODEC]
#   (defaults: 300, runs/compression-study, small, int4)
#   HYBRID_DP=int8, HYBRID_PARAMS=bf16: the hybrid policy's gradient and parameter codecs
#   (defaults int4, int8); ONLY="hybrid hybrid-ef":
#   a subset of the runs (the summary reads the others, base included, from OUT_DIR)
# On 2 cores the small preset takes hours for 300 steps x 5 runs; `tiny` is the quick variant.
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-300}
OUT=${2:-runs/compression-study}
MODEL=${3:-small}
UNI=${4:-int4}
W=${WEFT:-build/weft}  # WEFT=path: another binary (e.g. a copy, so a rebuild does not change it mid-study)
[ -d data/fortunes ] || $W prepare --input /usr/share/games/fortunes --out data/fortunes >/dev/null
ROOT=""; [ "$(id -u)" = 0 ] && ROOT=--allow-run-as-root
mkdir -p "$OUT"
COMMON="--model $MODEL --steps $STEPS --seq_len 64 --global_batch 8 --micro_batch 1 --warmup_steps 20
        --val_every 50 --val_batches 4 --ckpt_every 0 --keep_last 1 --log_every 50 --sample_tokens 0
        --threads 1 --trace --tp 2 --pp 2 --zero 1 --ranks_per_node 4 --overwrite"
run() {  # name args...
  local name=$1; shift
  # ONLY="hybrid hybrid-ef": run just these (the others keep what an earlier call left in OUT_DIR).
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then return; fi
  mpirun --oversubscribe $ROOT -np 8 -x OMP_NUM_THREADS=1 $W train configs/tiny.toml $COMMON \
    --out "$OUT/$name" "$@" > "$OUT/$name.log" 2>&1 || echo "{\"run\": \"$name\", \"failed\": true}"
}
UNIFORM="--compression.dp $UNI --compression.params $UNI --compression.tp $UNI --compression.pp $UNI"
HYBRID="--compression.dp ${HYBRID_DP:-int4} --compression.params ${HYBRID_PARAMS:-int8} --compression.tp bf16 --compression.pp off"
run base
run uniform $UNIFORM
run uniform-ef $UNIFORM --compression.error_feedback true
run hybrid $HYBRID
run hybrid-ef $HYBRID --compression.error_feedback true
$W report "$OUT/base" "$OUT/hybrid-ef" --out "$OUT/report-hybrid-ef.md" >/dev/null 2>&1 || true
$W report "$OUT/base" "$OUT/uniform" --out "$OUT/report-uniform.md" >/dev/null 2>&1 || true
python3 - "$OUT" <<'PY'
import json, sys, os
out = sys.argv[1]
def metrics(run):
    return [json.loads(l) for l in open(f"{out}/{run}/metrics.jsonl")]
def val(run):
    return [m["val_loss"] for m in metrics(run) if "val_loss" in m][-1]
def wire_by_axis(run):
    rep = json.load(open(f"{out}/{run}/comm_report.json"))
    axes = {}
    for r in rep["rows"]:
        a = axes.setdefault(r["axis"], [0, 0])
        a[0] += r["total_bytes"]
        a[1] += r.get("wire_total_bytes", r["total_bytes"])
    return axes, rep
base_axes, _ = wire_by_axis("base")
for run in ["base", "uniform", "uniform-ef", "hybrid", "hybrid-ef"]:
    if not os.path.exists(f"{out}/{run}/comm_report.json"):
        print(json.dumps({"run": run, "failed": True})); continue
    axes, rep = wire_by_axis(run)
    frac = {k: round(v[1] / base_axes[k][0], 4) for k, v in axes.items() if base_axes.get(k, [0])[0] > 0}
    errs = {f'{e["op"]}/{e["axis"]}': round(e["rel_err"]["mean"], 5)
            for e in rep.get("compression", {}).get("by_op_axis", []) if e["rel_err"]["mean"] >= 0}
    times = sorted(m["ms"] for m in metrics(run) if "ms" in m and "loss" in m)
    print(json.dumps({"run": run, "val_loss": round(val(run), 5), "gap_vs_base": round(val(run) / val("base") - 1, 5),
                      "wire_fraction_by_axis": frac, "rel_err_mean": errs, "mismatches": rep["mismatches"],
                      "step_ms_median": times[len(times) // 2] if times else None}))
PY
