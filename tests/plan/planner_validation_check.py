#!/usr/bin/python3
"""CTest: bench/planner_validation/validate.py over the whole validation set.

Checks that every row gets a prediction (or a stated refusal: none is expected), that the
JSON is sane, and holds the planner to issue 16's targets on the held-out published step
times (mean |error| <= 3%, worst <= 6%) and the fitted Frontier fractions (<= 2 points), so
that a change to the model or a system file that loses accuracy fails here.
  planner_validation_check.py WEFT_BINARY
"""
import json
import math
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "bench", "planner_validation", "validate.py")


def main():
    weft = sys.argv[1]
    p = subprocess.run([sys.executable, SCRIPT, "--weft", weft, "--json"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    rows, s = out["rows"], out["summary"]
    assert len(rows) >= 12, len(rows)
    for r in rows:
        assert r["error"] is not None, f"{r['id']} refused: {r['refused']}"
        assert math.isfinite(r["predicted"]) and r["predicted"] > 0, r
        assert r["split"] in ("fit", "heldout"), r
        assert r["source"], r
    held = s["heldout/step_time"]
    assert held["count"] >= 5 and held["refused"] == 0, held
    print(f"held-out step times: {held['count']} rows, mean {held['mean']:.2f}%, worst {held['worst']:.2f}%")
    assert held["mean"] <= 3.0, held
    assert held["worst"] <= 6.0, held
    fr = s["fit/fraction"]
    print(f"fitted fractions: {fr['count']} rows, worst {fr['worst']:.2f} points")
    assert fr["worst"] <= 2.0, fr
    # --max-mean: the exit status follows the held-out errors.
    strict = subprocess.run([sys.executable, SCRIPT, "--weft", weft, "--max-mean", "0.01"], capture_output=True, text=True)
    assert strict.returncode == 1, strict.stdout
    bad = subprocess.run([sys.executable, SCRIPT, "--weft", "/nonexistent/weft"], capture_output=True, text=True)
    assert bad.returncode != 0 and "not an executable" in bad.stderr, bad.stderr


if __name__ == "__main__":
    main()
