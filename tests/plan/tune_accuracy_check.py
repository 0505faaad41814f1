#!/usr/bin/python3
"""CTest (issue 35 item 3): the planner's step time on a short `weft tune` sweep, without
--recalibrate, from a quick `weft calibrate` made in the same test.

20 layouts of the tiny preset (seq 64, global batch 8) drawn at random from the whole space on
2 ranks, 3 timed steps each after 1 warm-up; bench/tune_accuracy.py compares each trial's
measured step with the planner's prediction on the calibrated file. Held to bounds this
machine's noise allows (3-step trials of one layout differ by up to ~20% on a shared 2-core
VM; docs/planner.md "Local truth" has the full 198-layout sweep's figures): mean |error| <= 25%,
the measured fastest layout among the planner's 4 first, or else the planner's first pick at most
10% slower than the sweep's fastest when the two are re-timed back to back. When `weft calibrate --check` after the
trials says the calibrated file no longer holds (the machine changed speed), the attempt is
repeated with a new calibration (also when its fp32 products moved by more than 12%: the check
holds a file within 25%); after two such attempts the bounds that do not depend on the
machine's speed hold instead: the rank, and the mean |error| after dividing every prediction by
the median predicted/measured ratio.
  tune_accuracy_check.py WEFT_BINARY WORK_DIR MPIRUN...
"""
import csv
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, **kw)
    assert p.returncode == 0, f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p


def attempt(weft, work, mpi, data):
    """One calibration, the sweep, and `weft calibrate --check` after it: (summary, None) when the
    file still held after the trials, else (summary or None, the reason)."""
    system = os.path.join(work, "local.toml")
    cal = run(mpi + [weft, "calibrate", "--quick", "--threads", "1", "--out", system])
    if "WARNING" in cal.stdout:
        return None, "the calibration saw a busy machine:\n" + cal.stdout[-1500:]
    sweep = os.path.join(work, "sweep")
    shutil.rmtree(sweep, ignore_errors=True)
    run(mpi + [weft, "tune", os.path.join(ROOT, "configs", "tiny.toml"), "--set", f"data={data}", "--set", "seq_len=64",
               "--set", "global_batch=8", "--set", "threads=1", "--system", system, "--trials", "20", "--initial", "20",
               "--planner-seeds", "0", "--steps", "3", "--warmup", "1", "--seed", "7", "--out", sweep])
    p = run([sys.executable, os.path.join(ROOT, "bench", "tune_accuracy.py"), os.path.join(sweep, "tune.csv"), "--json"])
    s = json.loads(p.stdout)
    s["csv"] = os.path.join(sweep, "tune.csv")
    print(f"{s['layouts']} layouts: mean |error| {s['mean_abs']:.1f}% (signed {s['signed']:+.1f}%), worst "
          f"{s['worst_abs']:.1f}%, {s['within_10pct']} within 10%; measured fastest ranked "
          f"{s['best_rank_by_planner']} (the pick measured {s['planner_pick_measured_ms']:.1f} ms, the fastest "
          f"{s['best_measured_ms']:.1f} ms); median predicted/measured {s['scale']:.3f}, mean |error| after dividing "
          f"by it {s['mean_abs_rescaled']:.1f}%")
    check = subprocess.run(mpi + [weft, "calibrate", "--check", system], capture_output=True, text=True,
                           stdin=subprocess.DEVNULL)
    print(check.stdout[-1500:])
    if check.returncode != 0:
        return s, "the calibrated file no longer held after the trials:\n" + check.stdout[-1500:]
    drift = product_drift(check.stdout)
    if drift > PRODUCT_DRIFT:
        return s, (f"the products ran {drift:.2f}x away from the calibration's after the trials (more than "
                   f"{PRODUCT_DRIFT}x): the machine changed speed")
    return s, None


# `weft calibrate --check` holds a file while its products stay within 25%; the absolute bound
# below (25%) cannot tell the planner from the machine when the machine's own speed moved that
# much between the calibration and the trials (a CI run, 2026-12-07: every layout +30%, the
# check holding, the error 10.7% after dividing by the median ratio). The absolute bound is
# asserted only when the products measured after the trials are within this factor of the file's.
PRODUCT_DRIFT = 1.12


def product_drift(check_stdout):
    """The largest factor between the check's fp32 products and the file's (>= 1)."""
    worst = 1.0
    for line in check_stdout.splitlines():
        if line.startswith("fp32 product"):
            fields = line.replace("<- off", "").split()
            ratio = float(fields[-1])
            assert ratio > 0, line
            worst = max(worst, ratio, 1.0 / ratio)
    assert worst >= 1.0 and "fp32 product" in check_stdout, check_stdout
    return worst


def layout_args(row):
    """weft train's layout options for a tune.csv row (its p: columns)."""
    keys = ["tp", "pp", "dp", "micro_batch", "zero", "recompute", "sequence_parallel", "schedule", "virtual_stages"]
    out = []
    for k in keys:
        out += ["--" + k, row["p:" + k]]
    return out


def retimed_ms(weft, mpi, data, work, row, name):
    """The median step (ms, the slowest rank's, the first step left out) of 5 steps of a tune row's
    layout with the sweep's settings."""
    out = os.path.join(work, "retime-" + name)
    run(mpi + [weft, "train", os.path.join(ROOT, "configs", "tiny.toml"), "--data", data, "--seq_len", "64",
               "--global_batch", "8", "--threads", "1", "--steps", "5", "--val_batches", "0", "--sample_tokens", "0",
               "--ckpt_every", "0", "--log_every", "1000", "--overwrite", "--out", out] + layout_args(row))
    rows = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
    ms = sorted([r["ms"] for r in rows if "loss" in r and "ms" in r][1:])
    return ms[len(ms) // 2]


def picks_the_best(s, weft, mpi, data, work):
    """The planner's first pick is the measured fastest layout or as fast: ranked at most 4th, or,
    re-timed back to back with the fastest (alternately, twice each), at most 10% slower. 20
    layouts of 3 steps on a shared VM hold trials of near-equal layouts that differ by 20-30%
    (2026-12-07, AMD EPYC: the fastest ranked 7th while the pick measured 467.1 ms against 466.9;
    another sweep measured tp 2 mb 8 without recompute at 527 ms and with full recompute at 440)."""
    if s["best_rank_by_planner"] <= 4:
        return True
    with open(s["csv"]) as f:
        trials = [r for r in csv.DictReader(f) if r["m:step_ms"] and r["m:predicted_ms"]]
    pick = min(trials, key=lambda r: float(r["m:predicted_ms"]))
    best = min(trials, key=lambda r: float(r["m:step_ms"]))
    times = {"pick": [], "best": []}
    for _ in range(2):
        for name, row in (("pick", pick), ("best", best)):
            times[name].append(retimed_ms(weft, mpi, data, work, row, name))
    p, b = min(times["pick"]), min(times["best"])
    print(f"re-timed back to back: the planner's pick {p:.1f} ms, the sweep's fastest {b:.1f} ms ({times})")
    return p <= 1.10 * b


def main():
    weft, work, mpirun = sys.argv[1], sys.argv[2], sys.argv[3:]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    data = os.path.join(work, "fortunes")
    run([weft, "prepare", "--input", "/usr/share/games/fortunes", "--out", data])
    mpi = mpirun + ["-np", "2", "-x", "OMP_NUM_THREADS=1"]
    # A shared VM changes speed without a visible load (here: products 95 GFLOP/s at the
    # calibration, 205 at the check a minute later, no other process; a CI run: every layout
    # +97%, the fastest still ranked 2nd). The absolute error then measures the machine, not the
    # planner. `weft calibrate --check` after the trials tells: when it holds, the absolute
    # bound; when it did not hold in 2 attempts, the bounds that do not depend on the machine's
    # speed (the rank, and the error after dividing by the median predicted/measured ratio).
    last, reasons = None, []
    for _ in range(2):
        s, why = attempt(weft, work, mpi, data)
        if why is None:
            assert s["layouts"] == 20, s
            assert s["mean_abs"] <= 25.0, s
            assert picks_the_best(s, weft, mpi, data, work), s
            return
        print(why)
        reasons.append(why)
        last = s if s is not None else last
    assert last is not None, "every calibration saw a busy machine:\n" + "\n".join(reasons)
    print("the machine changed speed between the calibration and the trials in both attempts: the bounds that do not "
          "depend on its speed")
    assert last["layouts"] == 20, last
    assert last["mean_abs_rescaled"] <= 25.0, last
    assert picks_the_best(last, weft, mpi, data, work), last

if __name__ == "__main__":
    main()
