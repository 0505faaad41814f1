#!/usr/bin/python3
"""CTest: bench/planner_validation/validate.py over the whole validation set.

Checks that every row gets a prediction (or one of the known memory refusals), that the JSON is
sane, holds the planner to issue 16's targets on the held-out Megatron-LM step times
(Korthikanti et al. 2022: mean |error| <= 3%, worst <= 6%) and the fitted Frontier fractions
(<= 2 points), and holds the sources issue 35 added (LLM Foundry, Narayanan et al. 2021 Table 2,
where the planner is still optimistic) at this model's figures, so that a change to the model or
a system file that loses accuracy fails here.
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
    rows, s, src = out["rows"], out["summary"], out["by_source"]
    assert len(rows) >= 140, len(rows)
    # Rows weft refuses as not fitting in memory although they ran (its memory model is
    # pessimistic there: docs/planner.md); every other row is priced. LLM Foundry's 30B rows at
    # sequence 8192 were refused until the FSDP stack files counted FSDP's 16 bytes a parameter
    # (memory_model = "fsdp", stop 61) instead of Megatron-LM's 20.
    known_refusals = {"n21t2-zero3-530b-g640"}
    for r in rows:
        if r["id"] not in known_refusals:
            assert r["error"] is not None, f"{r['id']} refused: {r['refused']}"
            assert math.isfinite(r["predicted"]) and r["predicted"] > 0, r
        assert r["split"] in ("fit", "heldout"), r
        assert r["source"], r
    for k, v in src.items():
        if v["count"]:
            print(f"{k}: {v['count']} rows, mean |error| {v['mean']:.2f} (signed {v['signed']:+.2f}), worst {v['worst']:.2f}")
    # Issue 16's targets hold on the Megatron-LM rows the model was built on (Korthikanti et al.
    # 2022): mean |error| <= 3%, worst <= 6%.
    held = src["k22/heldout/step_time"]
    assert held["count"] >= 5 and held["refused"] == 0, held
    assert held["mean"] <= 3.0, held
    assert held["worst"] <= 6.0, held
    # The sources added by issue 35: LLM Foundry's FSDP tables, priced on the FSDP stack files
    # (systems/*-fsdp.toml, fitted on the `fit` rows only by fit_stack.py: held-out 3.6% mean,
    # 18.2% worst at stop 55, 25.7% / 39.0% on the Megatron-LM files before; 3.94% / 21.9% on 88
    # rows since stop 61, the two 30B rows at sequence 8192 priced -15% and -22%), and Narayanan et
    # al. 2021 Table 2's DeepSpeed ZeRO-3 rows, priced on systems/dgx-a100-80gb-ds-zero3.toml
    # (its network collective efficiency fitted on the one usable fit row by fit_stack.py --fit
    # network: held-out 10.2% mean, 17.1% worst at stop 60, 45.1% / 63.9% on the base file;
    # docs/planner.md, "Validation set"). Held at what this commit's model reaches, so that a
    # change that loses accuracy on them fails; a change that gains tightens these bounds.
    llmf = src["llmf/heldout/step_time"]
    assert llmf["count"] >= 88 and llmf["refused"] == 0 and llmf["mean"] <= 4.5 and llmf["worst"] <= 22.5, llmf
    assert abs(llmf["signed"]) <= 2.0, llmf
    zero3 = src["n21t2/heldout/step_time"]
    assert zero3["count"] >= 4 and zero3["mean"] <= 11.0 and zero3["worst"] <= 18.0, zero3
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
