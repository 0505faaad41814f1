#!/usr/bin/python3
"""Fits a software stack's efficiencies on the `fit` rows of the validation set that use it.

A stack file (e.g. systems/dgx-h100-fsdp.toml) names its hardware file as `[system] base` and
sets what the software changes. This script searches its products' large-size efficiency
(`[device] matmul_efficiency`), its attention kernels' efficiency (`attention_efficiency`,
with `attention_bwd_efficiency` kept at the base file's ratio to it) and its memory-bound
kernels' share of the bandwidth (`memory_efficiency`) that minimise the mean
|log(predicted / published)| over the rows.csv rows with `split = fit` whose `system` is the
stack file. Held-out rows are never read. Prints the values, the fit rows' errors, and the
TOML lines to put in the stack file (it does not edit the file).

--fit network instead fits one figure: the share of the ring formula the stack's collectives
reach on the system's top link level (its last [[level]]'s `collective_efficiency`, one value
for all-gather, reduce-scatter and all-reduce), the compute efficiencies kept as the stack file
has them: a stack whose communication, not its kernels, sets its step (DeepSpeed's ZeRO-3 of
2021 without model parallelism): the value, found by bisection in log space, at which the fit
rows' mean log(predicted / published) is 0 (with one row, its error is 0). A fit row whose layout
does not fit in memory is left out and the count of rows used printed.

  bench/planner_validation/fit_stack.py systems/dgx-h100-fsdp.toml [--weft build/weft] [--fit compute|network]
"""
import argparse
import csv
import math
import os
import re
import subprocess
import sys
import tempfile
import tomllib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import validate  # noqa: E402


def device_value(path, key):
    """`key` of the [device] section of a system file, following `base` (a plain reader: the
    files are weft's, one key per line)."""
    text = open(path).read()
    m = re.search(r"^\[device\](.*?)(^\[|\Z)", text, re.S | re.M)
    if m:
        v = re.search(rf"^{key}\s*=\s*([0-9.eE+-]+)", m.group(1), re.M)
        if v:
            return float(v.group(1))
    b = re.search(r'^base\s*=\s*"([^"]+)"', text, re.M)
    if not b:
        raise SystemExit(f"fit_stack.py: {path} has no [device] {key} and no base")
    return device_value(os.path.join(os.path.dirname(path), b.group(1)), key)


def top_level(path):
    """The stack file's last [[level]] table (its own, else its base's, followed)."""
    with open(path, "rb") as f:
        t = tomllib.load(f)
    if t.get("level"):
        return t["level"]
    b = t.get("system", {}).get("base")
    if not b:
        raise SystemExit(f"fit_stack.py: {path} has no [[level]] and no base")
    return top_level(os.path.join(os.path.dirname(path), b))


def toml_value(v):
    """A level's value as TOML: a string, a number, or an inline table of numbers."""
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {x}" for k, x in v.items()) + " }"
    return f"{v}"


def level_toml(levels, eff):
    """[[level]] tables as TOML, the last one's collective_efficiency set to `eff` on every
    collective (the other levels' kept as they are)."""
    out = ""
    for i, lv in enumerate(levels):
        out += "[[level]]\n"
        last = i == len(levels) - 1
        if last:
            lv = dict(lv, collective_efficiency={"all_gather": f"{eff:.4g}", "reduce_scatter": f"{eff:.4g}",
                                                 "all_reduce": f"{eff:.4g}"})
        for k, v in lv.items():
            out += f"{k} = {toml_value(v)}\n"
    return out


def fit_network(stack, base_path, rows, weft, tmp):
    """--fit network: the top level's collective efficiency on the fit rows (see the docstring)."""
    levels = top_level(base_path)

    def errors(eff):
        trial = os.path.join(tmp, "trial.toml")
        with open(trial, "w") as f:
            f.write(f'[system]\nbase = "{os.path.abspath(base_path)}"\n' + level_toml(levels, eff))
        out = []
        for r in rows:
            j, err = validate.predict(weft, dict(r, system=trial))
            if j is None or not j["fits"]:
                continue  # a row the layout does not fit in is no evidence about the links
            out.append(math.log(j["step_time_s"] / float(r["published"])))
        if not out:
            raise SystemExit(f"fit_stack.py: every fit row of {stack} is refused")
        return out

    # The step grows as the efficiency falls: the signed mean error crosses 0 once in (0.01, 1].
    lo, hi = 0.01, 1.0
    for _ in range(40):
        mid = math.sqrt(lo * hi)
        if sum(errors(mid)) > 0:
            lo = mid
        else:
            hi = mid
    e = [100 * (math.exp(x) - 1) for x in errors(mid)]
    print(f"{stack}: {len(e)} fit rows used; top level collective_efficiency {mid:.4f}")
    print(f"fit rows: mean |error| {sum(abs(x) for x in e) / len(e):.2f}%, worst {max(abs(x) for x in e):.2f}%")
    print(level_toml(levels, mid), end="")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stack")
    ap.add_argument("--weft", default=os.path.join(ROOT, "build", "weft"))
    ap.add_argument("--rows", default=os.path.join(HERE, "rows.csv"))
    ap.add_argument("--fit", choices=["compute", "network"], default="compute")
    a = ap.parse_args()
    stack = os.path.relpath(os.path.abspath(a.stack), ROOT)
    with open(a.rows, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["split"] == "fit" and r["system"] == stack and r["kind"] == "step_time_s"]
    if not rows:
        raise SystemExit(f"fit_stack.py: no fit rows with system = {stack} in {a.rows}")
    base_path = os.path.join(ROOT, stack)
    if a.fit == "network":
        return fit_network(stack, base_path, rows, os.path.abspath(a.weft), tempfile.mkdtemp(prefix="fit-stack-"))
    bwd_ratio = device_value(base_path, "attention_bwd_efficiency") / device_value(base_path, "attention_efficiency")
    weft = os.path.abspath(a.weft)
    tmp = tempfile.mkdtemp(prefix="fit-stack-")

    def errors(p):
        m, att, mem = p
        trial = os.path.join(tmp, "trial.toml")
        with open(trial, "w") as f:
            f.write(f'[system]\nbase = "{os.path.abspath(base_path)}"\n[device]\nmatmul_efficiency = {m}\n'
                    f"attention_efficiency = {att}\nattention_bwd_efficiency = {att * bwd_ratio}\n"
                    f"memory_efficiency = {mem}\n")
        out = []
        for r in rows:
            j, err = validate.predict(weft, dict(r, system=trial))
            if j is None or not j["fits"]:
                raise SystemExit(f"fit_stack.py: row {r['id']} refused at {p}: {err}")
            out.append(math.log(j["step_time_s"] / float(r["published"])))
        return out

    cache = {}

    def cost(p):
        if p not in cache:
            cache[p] = sum(abs(x) for x in errors(p)) / len(rows)
        return cache[p]

    # A coarse grid of the two compute efficiencies, then halving steps of all three around the
    # best point (each only scales its own kernels' times: one valley).
    best = min((cost((m, att, 1.0)), (m, att, 1.0)) for m in (0.5, 0.6, 0.7, 0.8, 0.9) for att in (0.1, 0.2, 0.35, 0.5, 0.65))
    step = 0.1
    while step > 0.004:
        improved = True
        while improved:
            improved = False
            for axis in range(3):
                for sign in (1, -1):
                    q = list(best[1])
                    q[axis] = round(q[axis] + sign * step, 4)
                    if not 0.02 <= q[axis] <= 1.0:
                        continue
                    c = cost(tuple(q))
                    if c < best[0]:
                        best, improved = (c, tuple(q)), True
        step /= 2
    m, att, mem = best[1]
    e = [100 * (math.exp(x) - 1) for x in errors(best[1])]
    print(f"{stack}: {len(rows)} fit rows, {len(cache)} trials; matmul_efficiency {m:.4f}, attention_efficiency "
          f"{att:.4f}, attention_bwd_efficiency {att * bwd_ratio:.4f}, memory_efficiency {mem:.4f}")
    print(f"fit rows: mean |error| {sum(abs(x) for x in e) / len(e):.2f}% (signed {sum(e) / len(e):+.2f}%), "
          f"worst {max(abs(x) for x in e):.2f}%")
    for r, x in zip(rows, e):
        print(f"  {r['id']:32} {x:+7.2f}%")
    print(f"[device]\nmatmul_efficiency = {m:.4g}\nattention_efficiency = {att:.4g}\n"
          f"attention_bwd_efficiency = {att * bwd_ratio:.4g}\nmemory_efficiency = {mem:.4g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
