#!/usr/bin/python3
"""The planner's step-time error on the layouts of a `weft tune` run (its tune.csv).

For every successful trial: predicted (m:predicted_ms, the planner on the run's system file,
without --recalibrate) against measured (m:step_ms). Prints the mean and worst |error|, the
signed mean, the errors by axis value (tp, pp, dp, micro-batch, ZeRO, recompute, schedule),
and where the planner ranks the measured fastest layout (1 = its first pick among these
trials). A tune run with --confirm re-ran its fastest trials (m:runs 3: the median of three
runs); the measured fastest is then the fastest of those, as `weft tune` picks it, and the
confirmed trials' own error is reported apart. --json for a machine-readable line; --max-mean/--max-worst/--max-rank: exit 1 when
exceeded.

  bench/tune_accuracy.py runs/tune-study/sweep/tune.csv [--json] [--max-mean PCT] [--max-worst PCT] [--max-rank N]
"""
import argparse
import csv
import json
import statistics
import sys


def load(path):
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if r.get("m:failure") or not r.get("m:step_ms") or not r.get("m:predicted_ms"):
                continue
            r["measured"] = float(r["m:step_ms"])
            r["predicted"] = float(r["m:predicted_ms"])
            if r["measured"] > 0 and r["predicted"] > 0:
                r["error"] = 100.0 * (r["predicted"] / r["measured"] - 1.0)
                rows.append(r)
    return rows


def summary(rows):
    e = [r["error"] for r in rows]
    by_pred = sorted(rows, key=lambda r: r["predicted"])
    confirmed = [r for r in rows if int(r.get("m:runs") or 1) > 1]
    best = min(confirmed or rows, key=lambda r: r["measured"])
    s = {"layouts": len(rows), "mean_abs": statistics.mean(abs(x) for x in e), "worst_abs": max(abs(x) for x in e),
         "signed": statistics.mean(e), "best_measured_ms": best["measured"],
         "best_rank_by_planner": 1 + by_pred.index(best),
         "planner_pick_measured_ms": by_pred[0]["measured"],
         "planner_pick_over_best": by_pred[0]["measured"] / best["measured"],
         "within_10pct": sum(1 for x in e if abs(x) <= 10.0), "confirmed": len(confirmed)}
    if confirmed:
        ce = [r["error"] for r in confirmed]
        s["confirmed_mean_abs"] = statistics.mean(abs(x) for x in ce)
        s["confirmed_worst_abs"] = max(abs(x) for x in ce)
    # The error's shape without its scale: every prediction divided by the median predicted /
    # measured ratio (a machine that changed speed between calibration and trials moves the
    # scale, not the layouts' order or their ratios).
    scale = statistics.median(r["predicted"] / r["measured"] for r in rows)
    s["scale"] = scale
    s["mean_abs_rescaled"] = statistics.mean(abs(100.0 * (r["predicted"] / r["measured"] / scale - 1.0)) for r in rows)
    axes = {}
    for key in ("p:tp", "p:pp", "p:dp", "p:micro_batch", "p:zero", "p:recompute", "p:schedule"):
        groups = {}
        for r in rows:
            groups.setdefault(r.get(key, ""), []).append(r["error"])
        axes[key[2:]] = {v: {"n": len(x), "mean_abs": statistics.mean(abs(y) for y in x), "signed": statistics.mean(x)}
                         for v, x in sorted(groups.items())}
    s["by_axis"] = axes
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tune_csv")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--max-mean", type=float)
    ap.add_argument("--max-worst", type=float)
    ap.add_argument("--max-rank", type=int)
    a = ap.parse_args()
    rows = load(a.tune_csv)
    if not rows:
        sys.exit(f"tune_accuracy.py: {a.tune_csv} has no successful trial with a prediction (was a system file given?)")
    s = summary(rows)
    if a.json:
        print(json.dumps(s))
    else:
        print(f"{s['layouts']} layouts: mean |error| {s['mean_abs']:.1f}% (signed {s['signed']:+.1f}%), worst "
              f"{s['worst_abs']:.1f}%, {s['within_10pct']} within 10%")
        print(f"median predicted/measured {s['scale']:.3f}; mean |error| after dividing by it "
              f"{s['mean_abs_rescaled']:.1f}%")
        print(f"measured fastest: {s['best_measured_ms']:.1f} ms, ranked {s['best_rank_by_planner']} by the planner "
              f"(its first pick measured {s['planner_pick_measured_ms']:.1f} ms, "
              f"{s['planner_pick_over_best']:.3f}x the fastest)")
        if s["confirmed"]:
            print(f"confirmed trials (the median of their runs): {s['confirmed']}, mean |error| "
                  f"{s['confirmed_mean_abs']:.1f}%, worst {s['confirmed_worst_abs']:.1f}%")
        for axis, groups in s["by_axis"].items():
            print(f"  {axis:13} " + ", ".join(f"{v}: {g['signed']:+.1f}% ({g['n']})" for v, g in groups.items()))
    bad = (a.max_mean is not None and s["mean_abs"] > a.max_mean) or \
          (a.max_worst is not None and s["worst_abs"] > a.max_worst) or \
          (a.max_rank is not None and s["best_rank_by_planner"] > a.max_rank)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
