#!/usr/bin/python3
"""Self-test of the PyTorch references in tests/reference/.

  /usr/bin/python3 tests/reference/selftest.py [--keep DIR]

Builds a tiny random GPT-2 (L=2, NH=2, C=16, n_positions=8, V=50), writes a
checkpoint folder (config.json + model.safetensors) and a batch file with the
plain-Python safetensors writer, runs gpt2_reference.py on them, and checks:
  1. safetensors round trip for every supported dtype, 8-byte header alignment;
  2. output file: names, shapes, dtypes (all F64), losses[0] == loss;
  3. loss at the checkpoint's weights against a second, independent forward pass
     written with loops and numpy (no torch);
  4. gradients of every tensor against central finite differences of that naive
     numpy forward in float64 (a few elements per tensor, incl. the largest |grad|);
  5. losses and final parameters against a hand-written AdamW (numpy) with
     decay on >=2-dim tensors only, and the naive loss at each step's weights.
Prints one line per check; exits 1 on any failure.
"""

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gpt2_torch  # noqa: E402
from gpt2_torch import load_safetensors, save_safetensors, expected_parameter_names  # noqa: E402

CONFIG = {"model_type": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 16, "n_positions": 8,
          "vocab_size": 50, "layer_norm_epsilon": 1e-5, "n_inner": None}
S, B, T = 3, 2, 8
OPT = {"steps": 5, "lr": 1e-2, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1}

failures = []


def check(ok, what):
    print("%s  %s" % ("PASS" if ok else "FAIL", what))
    if not ok:
        failures.append(what)


# ---------------------------------------------------------------------------
# naive forward: loops + numpy, float64, written independently of gpt2_torch
# ---------------------------------------------------------------------------

def naive_layernorm(x, w, b, eps):
    out = np.empty_like(x)
    n = x.shape[-1]
    for t in range(x.shape[0]):
        mean = 0.0
        for i in range(n):
            mean += x[t, i]
        mean /= n
        var = 0.0
        for i in range(n):
            var += (x[t, i] - mean) ** 2
        var /= n
        rstd = 1.0 / math.sqrt(var + eps)
        for i in range(n):
            out[t, i] = (x[t, i] - mean) * rstd * w[i] + b[i]
    return out


def naive_gelu(x):
    c = math.sqrt(2.0 / math.pi)
    out = np.empty_like(x)
    flat, fo = x.reshape(-1), out.reshape(-1)
    for i in range(flat.size):
        u = flat[i]
        fo[i] = 0.5 * u * (1.0 + math.tanh(c * (u + 0.044715 * u * u * u)))
    return out


def naive_attention(qkv, NH):
    # qkv is (T,3C): q | k | v along the last dim; head h uses columns h*hs:(h+1)*hs
    Tn, C3 = qkv.shape
    C = C3 // 3
    hs = C // NH
    y = np.zeros((Tn, C))
    for h in range(NH):
        for t in range(Tn):
            q = qkv[t, h * hs:(h + 1) * hs]
            scores = []
            for s in range(t + 1):
                k = qkv[s, C + h * hs:C + (h + 1) * hs]
                scores.append(sum(q[i] * k[i] for i in range(hs)) / math.sqrt(hs))
            m = max(scores)
            e = [math.exp(sc - m) for sc in scores]
            z = sum(e)
            for s in range(t + 1):
                v = qkv[s, 2 * C + h * hs:2 * C + (h + 1) * hs]
                y[t, h * hs:(h + 1) * hs] += (e[s] / z) * v
    return y


def naive_loss(P, cfg, inputs, targets):
    """Mean cross-entropy over all B*T positions; inputs/targets are (B,T) ints."""
    L, NH, eps = cfg["n_layer"], cfg["n_head"], cfg["layer_norm_epsilon"]
    total, count = 0.0, 0
    for b in range(inputs.shape[0]):
        Tn = inputs.shape[1]
        x = np.stack([P["transformer.wte.weight"][inputs[b, t]] + P["transformer.wpe.weight"][t]
                      for t in range(Tn)])
        for l in range(L):
            p = "transformer.h.%d." % l
            h = naive_layernorm(x, P[p + "ln_1.weight"], P[p + "ln_1.bias"], eps)
            qkv = h @ P[p + "attn.c_attn.weight"] + P[p + "attn.c_attn.bias"]
            a = naive_attention(qkv, NH)
            x = x + (a @ P[p + "attn.c_proj.weight"] + P[p + "attn.c_proj.bias"])
            h = naive_layernorm(x, P[p + "ln_2.weight"], P[p + "ln_2.bias"], eps)
            f = naive_gelu(h @ P[p + "mlp.c_fc.weight"] + P[p + "mlp.c_fc.bias"])
            x = x + (f @ P[p + "mlp.c_proj.weight"] + P[p + "mlp.c_proj.bias"])
        x = naive_layernorm(x, P["transformer.ln_f.weight"], P["transformer.ln_f.bias"], eps)
        for t in range(Tn):
            logits = [float(np.dot(x[t], P["transformer.wte.weight"][v]))
                      for v in range(P["transformer.wte.weight"].shape[0])]
            m = max(logits)
            lse = m + math.log(sum(math.exp(z - m) for z in logits))
            total += lse - logits[targets[b, t]]
            count += 1
    return total / count


# ---------------------------------------------------------------------------

def random_params(cfg, rng):
    P = {}
    C, V, Tp, Fh = cfg["n_embd"], cfg["vocab_size"], cfg["n_positions"], 4 * cfg["n_embd"]
    P["transformer.wte.weight"] = rng.normal(0, 0.3, (V, C))
    P["transformer.wpe.weight"] = rng.normal(0, 0.3, (Tp, C))
    for l in range(cfg["n_layer"]):
        p = "transformer.h.%d." % l
        for ln in ("ln_1", "ln_2"):
            P[p + ln + ".weight"] = 1.0 + rng.normal(0, 0.2, C)
            P[p + ln + ".bias"] = rng.normal(0, 0.2, C)
        P[p + "attn.c_attn.weight"] = rng.normal(0, 0.4, (C, 3 * C))
        P[p + "attn.c_attn.bias"] = rng.normal(0, 0.2, 3 * C)
        P[p + "attn.c_proj.weight"] = rng.normal(0, 0.2, (C, C))
        P[p + "attn.c_proj.bias"] = rng.normal(0, 0.2, C)
        P[p + "mlp.c_fc.weight"] = rng.normal(0, 0.3, (C, Fh))
        P[p + "mlp.c_fc.bias"] = rng.normal(0, 0.2, Fh)
        P[p + "mlp.c_proj.weight"] = rng.normal(0, 0.2, (Fh, C))
        P[p + "mlp.c_proj.bias"] = rng.normal(0, 0.2, C)
    P["transformer.ln_f.weight"] = 1.0 + rng.normal(0, 0.2, C)
    P["transformer.ln_f.bias"] = rng.normal(0, 0.2, C)
    # stored as F32, as weft's checkpoints are; every F32 value is exact in F64
    return {k: v.astype(np.float32) for k, v in P.items()}


def test_safetensors(tmp):
    rng = np.random.default_rng(1)
    t = {
        "f32": rng.normal(size=(3, 5)).astype(np.float32),
        "f64": rng.normal(size=(7,)).astype(np.float64),
        "i32": rng.integers(-2**31, 2**31 - 1, size=(2, 3, 4), dtype=np.int32),
        "i64": rng.integers(-2**62, 2**62, size=(5,), dtype=np.int64),
        "u16": rng.integers(0, 65535, size=(9,), dtype=np.uint16),
        "scalar": np.array(3.5, dtype=np.float32),
        "empty": np.zeros((0, 4), dtype=np.float32),
        "big_endian": np.arange(6, dtype=">f4").reshape(2, 3),
    }
    path = os.path.join(tmp, "roundtrip.safetensors")
    save_safetensors(path, t, metadata={"k": "v"})
    with open(path, "rb") as f:
        raw = f.read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    check(n % 8 == 0, "safetensors header length %d is a multiple of 8" % n)
    check(header.get("__metadata__") == {"k": "v"}, "safetensors metadata kept")
    ends = sorted(tuple(h["data_offsets"]) for k, h in header.items() if k != "__metadata__")
    contiguous = ends[0][0] == 0 and all(a[1] == b[0] for a, b in zip(ends, ends[1:])) \
        and ends[-1][1] == len(raw) - 8 - n
    check(contiguous, "safetensors data offsets tile the buffer exactly")
    back, meta = load_safetensors(path, with_metadata=True)
    ok = set(back) == set(t) and all(
        back[k].shape == t[k].shape and back[k].dtype.kind == t[k].dtype.kind
        and back[k].dtype.itemsize == t[k].dtype.itemsize and np.array_equal(back[k], t[k])
        for k in t)
    check(ok, "safetensors round trip F32/F64/I32/I64/U16/scalar/empty/big-endian input")
    check(header["big_endian"]["dtype"] == "F32" and
          raw[8 + n + header["big_endian"]["data_offsets"][0]:][:8] ==
          np.arange(2, dtype="<f4").tobytes(), "safetensors writes little-endian data")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--keep", help="write the checkpoint/batch/output files here and keep them")
    args = ap.parse_args()

    tmp = args.keep or tempfile.mkdtemp(prefix="weft_ref_selftest_")
    os.makedirs(tmp, exist_ok=True)
    try:
        test_safetensors(tmp)

        rng = np.random.default_rng(1234)
        cfg = gpt2_torch.normalize_config(CONFIG)
        P32 = random_params(cfg, rng)
        ckpt = os.path.join(tmp, "ckpt")
        os.makedirs(ckpt, exist_ok=True)
        with open(os.path.join(ckpt, "config.json"), "w") as f:
            json.dump(CONFIG, f, indent=2)
        save_safetensors(os.path.join(ckpt, "model.safetensors"), P32, metadata={"format": "pt"})
        inputs = rng.integers(0, CONFIG["vocab_size"], size=(S, B, T)).astype(np.int32)
        targets = rng.integers(0, CONFIG["vocab_size"], size=(S, B, T)).astype(np.int32)
        batch = os.path.join(tmp, "batch.safetensors")
        save_safetensors(batch, {"inputs": inputs, "targets": targets})
        out = os.path.join(tmp, "ref.safetensors")

        # load_model: same weights in the HF hub layout (no "transformer." prefix, lm_head.weight,
        # attn.bias mask buffers, two shards + index, F64) give the same parameters
        import torch
        hub = os.path.join(tmp, "hub")
        os.makedirs(hub, exist_ok=True)
        with open(os.path.join(hub, "config.json"), "w") as f:
            json.dump(CONFIG, f)
        hubt = {k[len("transformer."):]: v.astype(np.float64) for k, v in P32.items()}
        hubt["lm_head.weight"] = hubt["wte.weight"]
        hubt["h.0.attn.bias"] = np.tril(np.ones((1, 1, 8, 8), dtype=np.float32))
        keys = sorted(hubt)
        half = len(keys) // 2
        wm = {}
        for i, part in enumerate((keys[:half], keys[half:])):
            fn = "model-%05d-of-00002.safetensors" % (i + 1)
            save_safetensors(os.path.join(hub, fn), {k: hubt[k] for k in part})
            wm.update({k: fn for k in part})
        with open(os.path.join(hub, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {}, "weight_map": wm}, f)
        m1 = gpt2_torch.load_model(ckpt, torch.float64)
        m2 = gpt2_torch.load_model(hub, torch.float64)
        s1, s2 = dict(m1.named_parameters()), dict(m2.named_parameters())
        check(list(s1) == expected_parameter_names(CONFIG) and
              all(torch.equal(s1[k], s2[k]) and s1[k].dtype == torch.float64 for k in s1),
              "load_model: HF names; F32 single file == F64 sharded hub layout")

        cmd = [sys.executable, os.path.join(HERE, "gpt2_reference.py"), "--checkpoint", ckpt,
               "--batch", batch, "--out", out, "--steps", str(OPT["steps"]), "--lr", str(OPT["lr"]),
               "--beta1", str(OPT["beta1"]), "--beta2", str(OPT["beta2"]), "--eps", str(OPT["eps"]),
               "--weight-decay", str(OPT["weight_decay"])]
        print("running: " + " ".join(cmd))
        r = subprocess.run(cmd)
        check(r.returncode == 0, "gpt2_reference.py exit code %d" % r.returncode)
        if r.returncode != 0:
            return 1
        R = load_safetensors(out)

        # 2. output layout
        names = expected_parameter_names(CONFIG)
        want = {"loss", "losses"} | {"grad." + n for n in names} | {"final." + n for n in names}
        check(set(R) == want, "output has loss, losses, grad.* and final.* for %d parameters"
              % len(names))
        check(all(v.dtype == np.float64 for v in R.values()), "output tensors are all F64")
        check(R["loss"].shape == (1,) and R["losses"].shape == (OPT["steps"],),
              "loss shape %s, losses shape %s" % (list(R["loss"].shape), list(R["losses"].shape)))
        check(all(R["grad." + n].shape == P32[n].shape and R["final." + n].shape == P32[n].shape
                  for n in names), "grad/final shapes equal the stored shapes (Conv1D (in,out))")
        check(R["losses"][0] == R["loss"][0], "losses[0] == loss")

        # 3. loss vs naive forward
        P = {k: v.astype(np.float64) for k, v in P32.items()}
        naive = naive_loss(P, cfg, inputs[0], targets[0])
        err = abs(naive - R["loss"][0])
        check(err < 1e-11, "loss %.15f vs naive loops %.15f (|diff| %.2e < 1e-11)"
              % (R["loss"][0], naive, err))

        # 4. gradients vs central finite differences of the naive forward
        h = 1e-5
        worst = 0.0
        grad_rng = np.random.default_rng(7)
        n_checked = 0
        for n in names:
            g = R["grad." + n]
            flat_idx = [int(np.argmax(np.abs(g)))] + list(grad_rng.choice(g.size, size=3, replace=False))
            if n == "transformer.wte.weight":
                # include a row used only as an output-head row (not an input) and an input row
                flat_idx.append(int(inputs[0, 0, 0]) * g.shape[1] + 1)
            bad = []
            for fi in flat_idx:
                idx = np.unravel_index(fi, g.shape)
                orig = P[n][idx]
                P[n][idx] = orig + h
                lp = naive_loss(P, cfg, inputs[0], targets[0])
                P[n][idx] = orig - h
                lm = naive_loss(P, cfg, inputs[0], targets[0])
                P[n][idx] = orig
                fd = (lp - lm) / (2 * h)
                e = abs(fd - g[idx]) / (1e-6 + abs(g[idx]))
                worst = max(worst, abs(fd - g[idx]) / max(1e-3, abs(g[idx])))
                n_checked += 1
                if abs(fd - g[idx]) > 1e-8 + 1e-5 * abs(g[idx]):
                    bad.append("%s%s grad %.10e fd %.10e (rel %.1e)" % (n, list(idx), g[idx], fd, e))
            for b in bad:
                print("      " + b)
            check(not bad, "grad %-34s %d elements match finite differences (|max g| %.3e)"
                  % (n, len(flat_idx), np.abs(g).max()))
        print("      %d gradient elements checked, worst |fd-g|/max(1e-3,|g|) = %.2e" % (n_checked, worst))

        # 5. AdamW by hand (numpy), gradients from an in-process torch float64 model
        import torch
        torch.set_default_dtype(torch.float64)
        model = gpt2_torch.GPT2(CONFIG).double()
        tparams = dict(model.named_parameters())
        W = {k: v.copy() for k, v in P.items()}
        m = {k: np.zeros_like(v) for k, v in W.items()}
        v2 = {k: np.zeros_like(v) for k, v in W.items()}
        losses_hand, losses_naive = [], []
        b1, b2, lr, eps, wd = OPT["beta1"], OPT["beta2"], OPT["lr"], OPT["eps"], OPT["weight_decay"]
        for k in range(OPT["steps"]):
            with torch.no_grad():
                for n, p in tparams.items():
                    p.copy_(torch.from_numpy(W[n]))
            model.zero_grad(set_to_none=True)
            _, loss = model(torch.from_numpy(inputs[k % S].astype(np.int64)),
                            torch.from_numpy(targets[k % S].astype(np.int64)))
            loss.backward()
            losses_hand.append(loss.item())
            if k < 3:
                losses_naive.append(naive_loss(W, cfg, inputs[k % S], targets[k % S]))
            t = k + 1
            for n in names:
                g = tparams[n].grad.numpy()
                if W[n].ndim >= 2:
                    W[n] = W[n] * (1.0 - lr * wd)
                m[n] = b1 * m[n] + (1 - b1) * g
                v2[n] = b2 * v2[n] + (1 - b2) * g * g
                mhat = m[n] / (1 - b1 ** t)
                vhat = v2[n] / (1 - b2 ** t)
                W[n] = W[n] - lr * mhat / (np.sqrt(vhat) + eps)
        lerr = np.max(np.abs(np.array(losses_hand) - R["losses"]))
        check(lerr < 1e-12, "losses %s vs hand AdamW run (max |diff| %.2e < 1e-12)"
              % (np.array2string(R["losses"], precision=6), lerr))
        nerr = max(abs(a - b) for a, b in zip(losses_naive, R["losses"]))
        check(nerr < 1e-11, "losses[0:%d] vs naive loops at hand-stepped weights (max |diff| %.2e)"
              % (len(losses_naive), nerr))
        ferr = max(np.max(np.abs(W[n] - R["final." + n])) for n in names)
        if os.environ.get("SELFTEST_DEBUG"):
            for n in names:
                d = np.abs(W[n] - R["final." + n]); i = np.unravel_index(np.argmax(d), d.shape)
                print("      %s %s diff %.2e m %.3e v %.3e" % (n, list(i), d[i], m[n][i], v2[n][i]))
        moved = min(np.max(np.abs(R["final." + n] - P[n])) for n in names)
        # 1e-9, not tighter: the key third of c_attn.bias has a gradient that is exactly zero in
        # exact arithmetic (a bias on k shifts every score of a row equally), so its float
        # gradient is rounding noise ~1e-18 that Adam turns into updates up to lr*|m|/eps ~ 1e-11,
        # and two runs that differ in the last bit of the weights get different noise.
        check(ferr < 1e-9, "final params vs hand AdamW (max |diff| %.2e < 1e-9)" % ferr)
        C = cfg["n_embd"]
        kb = max(np.max(np.abs(R["grad.transformer.h.%d.attn.c_attn.bias" % l][C:2 * C]))
                 for l in range(cfg["n_layer"]))
        check(kb < 1e-12, "grad of the key part of c_attn.bias is ~0 as it must be (max %.2e); "
              "compare it with an absolute tolerance" % kb)
        check(moved > 1e-3, "every parameter tensor moved (min max|change| %.2e)" % moved)
        # a group mistake (decay on 1-dim tensors or none on matrices) moves final params by
        # ~steps*lr*wd*|p| ~ 5e-3*|p|, far above the 1e-10 tolerance of ferr.
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)

    print("selftest: %s (%d failure%s)" % ("OK" if not failures else "FAILED", len(failures),
                                            "" if len(failures) == 1 else "s"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
