#!/usr/bin/env python3
"""The hostile-input catalogue (issue 34): bad inputs and faults as data, run against `weft`.

Each case of tests/hostile/cases.json sets up a folder (shell commands, run in a fresh folder
with the fixtures below in the environment), runs one command there with a timeout, and checks:
  - the exit code ("exit"; default 2, the code of refused input);
  - stderr: its lines that start with "weft:" are exactly one (the one-line message; none
    when "exit" is 0; "lines" says otherwise, e.g. 0 for a process ended by a signal, null
    under mpirun, whose other ranks may or may not report the signal that ends them), and the
    "stderr" regular expression is found in stderr;
  - nothing written before changed: the paths in "unchanged" (files, folders, links: type,
    mode, link target and SHA-256 of every file, recursively, without following links) are the
    same after the command as before it;
  - "absent": paths that must not exist afterwards (temporary files, outputs of refused work);
  - "max_seconds": the command finishes within that (default: the case's timeout, 60 s).

Environment of the setup and the command: WEFT (the binary), SRC (the source tree), FIX (the
shared fixtures, read-only by convention: copy what a case changes), CFG (a one-layer tiny
model's config training FIX/data), and the case's folder as the working directory.
Fixtures (made once per invocation): FIX/data (random token shards), FIX/text (a corpus
prepared by `weft prepare`, with meta.json), FIX/run (a finished 2-step run with checkpoints),
FIX/tune (a 2-trial tune), FIX/local.toml (a quick calibration).

usage: run_hostile.py --weft BIN --src DIR [--class N ...] [--table] [--keep DIR]
Exit 0 when every selected case passes; 1 otherwise (each failure explained on stderr).
"""
import argparse
import hashlib
import json
import os
import random
import re
import shutil
import stat
import struct
import subprocess
import sys
import tempfile
import time


def random_shards(d, vocab, n_train, n_val):
    os.makedirs(d, exist_ok=True)
    rng = random.Random(3)
    for split, n in (("train", n_train), ("val", n_val)):
        with open(f"{d}/rand_{split}_000000.bin", "wb") as f:
            f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
            f.write(struct.pack(f"<{n}H", *(rng.randrange(vocab) for _ in range(n))))


def run(cmd, cwd, env, timeout=120):
    p = subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"fixture command failed ({p.returncode}): {cmd}\n{p.stdout}\n{p.stderr}")
    return p


def make_fixtures(fix, weft, src):
    env = base_env(weft, src, fix)
    random_shards(f"{fix}/data", 50257, 8000, 2000)
    with open(f"{fix}/run.toml", "w") as f:
        f.write('[model]\nmodel = "tiny"\nn_layer = 1\nn_head = 2\nn_embd = 32\nn_ctx = 16\n'
                f'[data]\ndata = "{fix}/data"\n'
                '[train]\nglobal_batch = 2\nmicro_batch = 2\nsteps = 2\nthreads = 1\n'
                '[eval]\nval_batches = 1\n[checkpoint]\nckpt_every = 1\nkeep_last = 0\n'
                '[sample]\nsample_tokens = 0\n')
    os.makedirs(f"{fix}/corpus", exist_ok=True)
    for doc in range(10):
        with open(f"{fix}/corpus/doc{doc}.txt", "w") as f:
            for i in range(60):
                f.write(f"Line {i} of {doc}: the quick brown fox jumps over the lazy dog {i * 7 % 13}.\n")
    run(f"$WEFT prepare --input {fix}/corpus --out {fix}/text --val-fraction 0.1", fix, env)
    run(f"$WEFT train {fix}/run.toml --out {fix}/run --trace true", fix, env)
    run(f"$WEFT calibrate --quick --threads 1 --out {fix}/local.toml", fix, env)
    run(f"$WEFT tune {fix}/run.toml --system {fix}/local.toml --out {fix}/tune --trials 2 --steps 1 --warmup 0 "
        "--initial 2 --seed 1", fix, env, timeout=300)


def base_env(weft, src, fix):
    env = dict(os.environ)
    env.update({"WEFT": weft, "SRC": src, "FIX": fix, "CFG": f"{fix}/run.toml", "WEFT_SYSTEM": "none",
                "OMP_NUM_THREADS": "1"})
    return env


def fingerprint(path):
    """Type, mode, link target and content hash of path and (for a folder) everything under it."""
    out = {}

    def one(p, rel):
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            out[rel] = "missing"
            return
        if stat.S_ISLNK(st.st_mode):
            out[rel] = ("link", os.readlink(p))
        elif stat.S_ISDIR(st.st_mode):
            out[rel] = ("dir", stat.S_IMODE(st.st_mode))
            for name in sorted(os.listdir(p)):
                one(os.path.join(p, name), f"{rel}/{name}")
        elif stat.S_ISREG(st.st_mode):
            h = hashlib.sha256()
            with open(p, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
            out[rel] = ("file", stat.S_IMODE(st.st_mode), h.hexdigest())
        else:
            out[rel] = ("special", stat.S_IFMT(st.st_mode))

    one(path, os.path.basename(path))
    return out


def check_case(case, weft, src, fix, work):
    """Runs one case in a fresh folder under work; returns (passed, detail, seconds)."""
    d = tempfile.mkdtemp(prefix=case["name"] + "-", dir=work)
    env = base_env(weft, src, fix)
    for k, v in case.get("env", {}).items():  # $CASE: the case's folder; $NAME: the caller's NAME
        env[k] = os.path.expandvars(v.replace("$CASE", d))
    if case.get("setup"):
        p = subprocess.run(["bash", "-ec", case["setup"]], cwd=d, env=env, capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            return False, f"setup failed ({p.returncode}): {p.stderr.strip()}", 0.0
    watched = [os.path.join(d, u) for u in case.get("unchanged", [])]
    before = {u: fingerprint(u) for u in watched}
    timeout = case.get("timeout", 60)
    t0 = time.monotonic()
    try:
        p = subprocess.run(["bash", "-c", case["command"]], cwd=d, env=env, capture_output=True, text=True,
                           timeout=timeout, errors="replace")
    except subprocess.TimeoutExpired:
        return False, f"no answer within {timeout} s (hang)", time.monotonic() - t0
    secs = time.monotonic() - t0
    problems = []
    want = case.get("exit", 2)
    if p.returncode != want:
        problems.append(f"exit {p.returncode}, expected {want}")
    weft_lines = [l for l in p.stderr.splitlines() if l.startswith("weft:")]
    lines = case.get("lines", 0 if want == 0 else 1)  # 0: killed by a signal, or a success
    if lines is not None and len(weft_lines) != lines:
        problems.append(f"{len(weft_lines)} 'weft:' lines on stderr, expected {lines}")
    if case.get("stderr") and not re.search(case["stderr"], p.stderr):
        problems.append(f"stderr does not match /{case['stderr']}/")
    for u in watched:
        if fingerprint(u) != before[u]:
            problems.append(f"{os.path.relpath(u, d)} changed")
    for a in case.get("absent", []):
        for hit in (subprocess.run(["bash", "-c", f"ls -d {a} 2>/dev/null"], cwd=d, capture_output=True,
                                   text=True).stdout.split()):
            problems.append(f"{hit} exists")
    if secs > case.get("max_seconds", timeout):
        problems.append(f"took {secs:.1f} s, more than {case['max_seconds']} s")
    detail = "; ".join(problems) if problems else (weft_lines[0] if weft_lines else p.stderr.strip()[-200:])
    if problems:
        detail += f"\n      stderr: {p.stderr.strip()[-600:]}"
    shutil.rmtree(d, ignore_errors=True)
    return not problems, detail, secs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--weft", required=True)
    ap.add_argument("--src", required=True)
    ap.add_argument("--class", dest="classes", type=int, action="append", default=[])
    ap.add_argument("--table", action="store_true", help="print a Markdown table of the results")
    ap.add_argument("--keep", help="make the fixtures and the cases' folders here (kept)")
    a = ap.parse_args()
    with open(os.path.join(a.src, "tests/hostile/cases.json")) as f:
        catalogue = json.load(f)
    cases = [c for c in catalogue["cases"] if not a.classes or c["class"] in a.classes]
    if not cases:
        sys.exit(f"run_hostile.py: no case of class {a.classes} in the catalogue")
    work = a.keep or tempfile.mkdtemp(prefix="weft-hostile-")
    os.makedirs(work, exist_ok=True)
    fix = os.path.join(work, "fixtures")
    if not os.path.exists(os.path.join(fix, ".complete")):  # made whole or made again
        shutil.rmtree(fix, ignore_errors=True)
        os.makedirs(fix)
        make_fixtures(fix, os.path.abspath(a.weft), os.path.abspath(a.src))
        open(os.path.join(fix, ".complete"), "w").close()
    results = []
    for c in cases:
        ok, detail, secs = check_case(c, os.path.abspath(a.weft), os.path.abspath(a.src), fix, work)
        results.append((c, ok, detail, secs))
        print(f"{'PASS' if ok else 'FAIL'} class {c['class']} {c['name']} ({secs:.1f} s): {detail}",
              file=sys.stderr if a.table or not ok else sys.stdout, flush=True)
    if a.table:
        print("\n| class | case | result | seconds | what weft said (or what failed) |\n|---|---|---|---|---|")
        for c, ok, detail, secs in results:
            said = (detail.splitlines() or ["(nothing on stderr)"])[0].replace("|", "\\|")[:160]
            print(f"| {c['class']} | {c['name']} | {'pass' if ok else 'FAIL'} | {secs:.1f} | {said} |")
        by = {}
        for c, ok, _, _ in results:
            by.setdefault(c["class"], [0, 0])[0 if ok else 1] += 1
        print("\n| class | passed | failed |\n|---|---|---|")
        for k in sorted(by):
            print(f"| {k} | {by[k][0]} | {by[k][1]} |")
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(0 if all(ok for _, ok, _, _ in results) else 1)


if __name__ == "__main__":
    main()
