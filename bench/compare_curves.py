#!/usr/bin/python3
"""Compares the training-loss curve of a run folder with a reference run folder.

  python3 bench/compare_curves.py REF_RUN RUN [--key loss] [--rtol 1e-5] [--mean-last N --mean-rtol R]

Reads "step" and KEY from each folder's metrics.jsonl (what `weft train` writes). Every step of
REF must be in RUN with |run - ref| <= rtol * |ref|; with --mean-last N, the mean over the last
N steps must also agree within --mean-rtol (a looser pointwise bound with a tighter average,
for curves that carry rounding noise: bf16 against fp32). Prints one JSON line
{"ref", "run", "key", "steps", "max_rel_diff", "worst_step", "mean_rel_diff", "ok"} and exits 0
when the curves agree, 1 when they do not, 2 when a folder has no such curve.
"""

import argparse
import json
import os
import sys


def curve(run, key):
    out = {}
    path = os.path.join(run, "metrics.jsonl")
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            j = json.loads(line)
            if key in j and "step" in j:
                out[int(j["step"])] = float(j[key])
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ref")
    ap.add_argument("run")
    ap.add_argument("--key", default="loss")
    ap.add_argument("--rtol", type=float, default=1e-5)
    ap.add_argument("--mean-last", type=int, default=0)
    ap.add_argument("--mean-rtol", type=float, default=0.0)
    a = ap.parse_args(argv)
    ref, run = curve(a.ref, a.key), curve(a.run, a.key)
    if not ref or not run:
        print(json.dumps({"ref": a.ref, "run": a.run, "key": a.key, "error": "no %s curve in %s" %
                          (a.key, a.ref if not ref else a.run)}))
        return 2
    worst, worst_step, ok = 0.0, None, True
    for step, r in sorted(ref.items()):
        if step not in run:
            ok, worst_step = False, step
            break
        d = abs(run[step] - r) / max(abs(r), 1e-30)
        if d > worst:
            worst, worst_step = d, step
    ok = ok and worst <= a.rtol
    rec = {"ref": a.ref, "run": a.run, "key": a.key, "steps": len(ref), "max_rel_diff": worst,
           "worst_step": worst_step}
    if a.mean_last > 0:
        last = sorted(ref)[-a.mean_last:]
        mr = sum(ref[s] for s in last) / len(last)
        mu = sum(run.get(s, float("nan")) for s in last) / len(last)
        rec["mean_rel_diff"] = abs(mu - mr) / max(abs(mr), 1e-30)
        ok = ok and rec["mean_rel_diff"] <= a.mean_rtol
    rec["ok"] = ok
    print(json.dumps(rec))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
