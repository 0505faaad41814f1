"""Where a weft step's GPU time goes: every kernel of a `weft bench --backend cuda` run timed by
Nsight Compute (one metric, gpu__time_duration.sum), summed per kernel name, against the step's
wall time measured without the profiler.

usage: python3 bench/cuda_kernel_times.py WEFT OUT_DIR [weft bench arguments ...]
Writes OUT_DIR/kernels.csv (ncu's raw page) and prints the top kernels, their share of the summed
kernel time and the gap between that and the wall time (host work, launches, synchronisation).
Needs ncu (Nsight Compute) on the PATH or at /usr/local/cuda/bin/ncu; pass the same bench
arguments the timed run used, with few steps (every kernel is replayed by the profiler).
"""
import csv
import io
import json
import os
import shutil
import subprocess
import sys
from collections import defaultdict


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    weft, out = sys.argv[1], sys.argv[2]
    args = sys.argv[3:]
    os.makedirs(out, exist_ok=True)
    ncu = shutil.which("ncu") or "/usr/local/cuda/bin/ncu"
    bench = [weft, "bench", "--backend", "cuda", "--format", "json", "--no-peak"] + args
    wall = json.loads(subprocess.run(bench, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1])
    prof = subprocess.run([ncu, "--clock-control", "none", "--metrics", "gpu__time_duration.sum", "--csv",
                           "--page", "raw"] + bench, capture_output=True, text=True)
    with open(os.path.join(out, "kernels.csv"), "w") as f:
        f.write(prof.stdout)
    if prof.returncode != 0:
        sys.stderr.write(prof.stderr[-4000:])
        sys.exit(f"ncu failed ({prof.returncode})")
    lines = [l for l in prof.stdout.splitlines() if l.startswith('"')]
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    head, units = rows[0], rows[1]
    name_col, t_col = head.index("Kernel Name"), head.index("gpu__time_duration.sum")
    scale = {"ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0, "nsecond": 1e-6}.get(units[t_col], 1e-6)
    total, count = defaultdict(float), defaultdict(int)
    for r in rows[2:]:
        try:
            t = float(r[t_col].replace(",", "")) * scale
        except ValueError:
            continue
        name = r[name_col].split("(")[0][:90]
        total[name] += t
        count[name] += 1
    steps = wall.get("steps", 1) + wall.get("warmup", 0)
    all_ms = sum(total.values())
    per_step = all_ms / steps if steps else all_ms
    print(f"wall {wall['ms_per_step']:.2f} ms/step (no profiler); kernels {per_step:.2f} ms/step summed over "
          f"{sum(count.values())} launches in {steps} steps (init included); gap {wall['ms_per_step'] - per_step:.2f} ms")
    print(f"{'kernel':90s} {'calls':>6s} {'ms':>9s} {'share':>6s}")
    for name, t in sorted(total.items(), key=lambda kv: -kv[1])[:30]:
        print(f"{name:90s} {count[name]:6d} {t:9.3f} {100 * t / all_ms:5.1f}%")


if __name__ == "__main__":
    main()
