#!/usr/bin/python3
"""The planner against published measurements (bench/planner_validation/rows.csv).

For each row, runs `weft plan` with every layout choice pinned and compares its prediction
with the published figure: step time (seconds per iteration), HFU/MFU (fraction of peak), or
a scaling efficiency between the row and its `base` row (strong: T_base N_base / (T N);
weak: T_base / T, the batch growing with the devices). Prints one line per row and, per split
(`fit`: rows the system files' fitted constants were set from; `heldout`: rows never used for
that), the mean and worst |error|: percent for step times, points for fractions.

  bench/planner_validation/validate.py [--weft build/weft] [--split fit|heldout|all] [--json]
                                       [--max-mean PCT --max-worst PCT]

--max-mean / --max-worst: exit 1 when the held-out step-time errors exceed them.
"""
import argparse
import csv
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
KINDS = ("step_time_s", "hfu", "mfu", "strong_scaling", "weak_scaling", "base")


def plan_args(r):
    bools = lambda v: v.strip().lower() == "true"
    args = ["plan", "--layers", r["layers"], "--hidden", r["hidden"], "--heads", r["heads"], "--seq", r["seq"],
            "--vocab", r["vocab"], "--ffn", r["ffn"], "--system", r["system"], "--gpus", r["gpus"],
            "--global-batch", r["global_batch"], "--precision", r["precision"], "--tp", r["tp"], "--pp", r["pp"],
            "--dp", r["dp"], "--micro-batch", r["micro_batch"], "--zero", r["zero"], "--recompute", r["recompute"],
            "--sequence-parallel" if bools(r["sequence_parallel"]) else "--no-sequence-parallel",
            "--flash-attention" if bools(r["flash_attention"]) else "--no-flash-attention",
            "--dropout" if bools(r["dropout"]) else "--no-dropout", "--format", "json",
            # The published runs used neither ZeRO++ nor compressed collectives: pinned off, so
            # that the search cannot price a ZeRO-3 row with a ZeRO++ variant it prefers.
            "--zeropp", "none", "--compression", "none"]
    if int(r["pp"]) > 1:
        args += ["--schedule", r["schedule"], "--virtual-stages", r["virtual_stages"]]
    return args


def predict(weft, r):
    p = subprocess.run([weft] + plan_args(r), capture_output=True, text=True, cwd=ROOT)
    if p.returncode != 0:
        return None, p.stderr.strip()
    return json.loads(p.stdout)[0], ""


def evaluate(weft, rows):
    by_id = {r["id"]: r for r in rows}
    preds, out = {}, []
    for r in rows:
        if r["kind"] not in KINDS:
            raise SystemExit(f"rows.csv: row {r['id']}: unknown kind '{r['kind']}' (known: {', '.join(KINDS)})")
        preds[r["id"]] = predict(weft, r)
    for r in rows:
        if r["kind"] == "base":
            continue
        j, err = preds[r["id"]]
        res = {"id": r["id"], "split": r["split"], "kind": r["kind"], "published": float(r["published"]),
               "source": r["source"]}
        if j is None:
            res.update(predicted=None, error=None, refused=err)
        elif not j["fits"]:
            res.update(predicted=None, error=None, refused=f"does not fit: {j['memory_bytes']['total'] / 1e9:.1f} GB")
        else:
            if r["kind"] == "step_time_s":
                pred = j["step_time_s"]
                res["error"] = 100 * (pred / res["published"] - 1)  # percent
            elif r["kind"] in ("hfu", "mfu"):
                pred = j[r["kind"]]
                res["error"] = 100 * (pred - res["published"])  # points
            else:
                base = by_id.get(r["base"])
                bj = preds.get(r["base"], (None, ""))[0]
                if base is None or bj is None:
                    res.update(predicted=None, error=None, refused=f"base row '{r['base']}' missing or refused")
                    out.append(res)
                    continue
                if r["kind"] == "strong_scaling":
                    pred = bj["step_time_s"] * int(base["gpus"]) / (j["step_time_s"] * int(r["gpus"]))
                else:
                    pred = bj["step_time_s"] / j["step_time_s"]
                res["error"] = 100 * (pred - res["published"])  # points
            res.update(predicted=pred, refused="", terms=j["time_s"])
        out.append(res)
    return out


def source_of(row_id):
    """A row's source: its id's first part (k22: Korthikanti et al. 2022, dash: Dash et al. 2023,
    llmf: LLM Foundry's MPT tables, n21t2: Narayanan et al. 2021 Table 2)."""
    return row_id.split("-")[0]


def summary(results, per_source=False):
    if per_source:
        out = {}
        for src in sorted({source_of(r["id"]) for r in results}):
            for k, v in summary([r for r in results if source_of(r["id"]) == src]).items():
                out[f"{src}/{k}"] = v
        return out
    s = {}
    for split in ("fit", "heldout"):
        for group, kinds in (("step_time", ("step_time_s",)), ("fraction", ("hfu", "mfu", "strong_scaling", "weak_scaling"))):
            signed = [r["error"] for r in results if r["split"] == split and r["kind"] in kinds and r["error"] is not None]
            e = [abs(x) for x in signed]
            refused = sum(1 for r in results if r["split"] == split and r["kind"] in kinds and r["error"] is None)
            if e or refused:
                s[f"{split}/{group}"] = {"count": len(e), "refused": refused, "mean": sum(e) / len(e) if e else None,
                                         "signed": sum(signed) / len(e) if e else None, "worst": max(e) if e else None}
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weft", default=os.path.join(ROOT, "build", "weft"))
    ap.add_argument("--rows", default=os.path.join(HERE, "rows.csv"))
    ap.add_argument("--split", choices=("fit", "heldout", "all"), default="all")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--max-mean", type=float)
    ap.add_argument("--max-worst", type=float)
    a = ap.parse_args()
    if not os.access(a.weft, os.X_OK):
        sys.exit(f"validate.py: {a.weft} is not an executable weft (build it first, or pass --weft PATH)")
    with open(a.rows, newline="") as f:
        rows = list(csv.DictReader(f))
    results = evaluate(os.path.abspath(a.weft), rows)
    if a.split != "all":
        results = [r for r in results if r["split"] == a.split]
    s = summary(results)
    by_source = summary(results, per_source=True)
    if a.json:
        print(json.dumps({"rows": results, "summary": s, "by_source": by_source}, indent=1))
    else:
        print(f"{'row':24} {'split':8} {'kind':15} {'published':>10} {'predicted':>10} {'error':>9}")
        for r in results:
            unit = "%" if r["kind"] == "step_time_s" else " pts"
            if r["error"] is None:
                print(f"{r['id']:24} {r['split']:8} {r['kind']:15} {r['published']:>10.4g} {'-':>10} REFUSED: {r['refused']}")
            else:
                print(f"{r['id']:24} {r['split']:8} {r['kind']:15} {r['published']:>10.4g} {r['predicted']:>10.4g} "
                      f"{r['error']:>+8.2f}{unit}")
        for table in (by_source, s):
            print()
            for k, v in table.items():
                unit = "%" if k.endswith("step_time") else " points"
                if v["count"]:
                    print(f"{k:28} {v['count']:3} rows: mean |error| {v['mean']:.2f}{unit} (signed {v['signed']:+.2f}), "
                          f"worst {v['worst']:.2f}{unit}" + (f"; {v['refused']} refused" if v["refused"] else ""))
                else:
                    print(f"{k:28} {v['refused']} refused")
    held = s.get("heldout/step_time")
    if held and (a.max_mean is not None or a.max_worst is not None):
        if held["refused"] or held["count"] == 0:
            return 1
        if a.max_mean is not None and held["mean"] > a.max_mean:
            return 1
        if a.max_worst is not None and held["worst"] > a.max_worst:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
