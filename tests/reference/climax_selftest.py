#!/usr/bin/python3
"""Checks the ClimaX reference itself (climax_torch.py, climax_reference.py).

  /usr/bin/python3 tests/reference/climax_selftest.py [--keep DIR]

1. Building blocks, each against a hand computation from the contract's formulas:
   the per-variable Conv2d patch embedding = patch_k @ W_tok[v] + b_tok[v] (k = i*p + j);
   unpatchify(patchify(x)) == x and unpatchify's pixel mapping (channel (i*p+j)*V + c);
   lat_weighted_mse = loops over (b, c, y, x) with cos(lat)/mean(cos(lat));
   nn.MultiheadAttention with one query = per-head softmax(q.k/sqrt(hd)) . v, then out_proj;
   import_weft/export_weft round trip, and the weft tensors cover every module parameter once.
2. The whole module's loss = a naive numpy forward written from the contract (weft's (in, out)
   layout, explicit loops), at 1e-12.
3. torch.autograd.gradcheck (float64) of the loss in every parameter and in x, tiny instance.
4. climax_reference.py end to end: output layout, loss vs the naive forward, gradients vs
   central finite differences of the naive forward, AdamW vs a numpy AdamW with the decay
   list, the decay list in the metadata; config resolution from config.json, from the
   safetensors metadata, from the command line alone, and its errors.
5. How far a float32 run of the same module lands from float64 on a C++-test-like instance
   (informative: the C++ test's tolerances should be far above it).
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
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import climax_torch as ct  # noqa: E402

failures = []


def check(ok, what):
    print("  %s  %s" % ("ok  " if ok else "FAIL", what))
    if not ok:
        failures.append(what)


# ---------------------------------------------------------------------------
# parameters and data
# ---------------------------------------------------------------------------

def sincos_1d(D, pos):
    """1-D sine-cosine embedding (MAE's get_1d_sincos_pos_embed_from_grid), (len(pos), D)."""
    omega = 1.0 / 10000 ** (np.arange(D // 2, dtype=np.float64) / (D / 2.0))
    out = np.einsum("m,d->md", np.asarray(pos, dtype=np.float64).reshape(-1), omega)
    return np.concatenate([np.sin(out), np.cos(out)], axis=1)


def random_params(c, rng, style="random"):
    """weft-shape float32 parameters. style "random": every tensor O(0.1-0.4) so that no path
    is near-trivial; "weftlike": an init like ClimaX/weft's (N(0, 0.02) weights, zero biases,
    unit norms, sine-cosine embeddings, zero query) plus N(0, 0.05) noise on everything;
    "cpplike": "weftlike" plus the C++ test's larger noise on var_query (1.0), var_agg.q/kv
    weights (0.2) and the blocks' qkv weights (0.3), which makes both attentions non-uniform."""
    P = {}
    for n, shape in ct.weft_param_shapes(c).items():
        if style == "random":
            if n.endswith("norm1.weight") or n.endswith("norm2.weight") or n == "norm.weight":
                v = 1.0 + rng.normal(0, 0.2, shape)
            elif n.endswith(".weight") and len(shape) >= 2:
                fan_in = shape[-2] if n != "token_embeds.weight" else shape[1]
                v = rng.normal(0, 1.0 / math.sqrt(fan_in), shape)
            else:
                v = rng.normal(0, 0.3, shape)
        else:
            if n.endswith("norm1.weight") or n.endswith("norm2.weight") or n == "norm.weight":
                v = np.ones(shape)
            elif n == "var_embed":
                v = sincos_1d(c["n_embd"], np.arange(c["vars"]))
            elif n == "pos_embed":
                D = c["n_embd"]
                gh, gw = np.meshgrid(np.arange(c["w"]), np.arange(c["h"]))  # as MAE: w first
                v = np.concatenate([sincos_1d(D // 2, gh), sincos_1d(D // 2, gw)], axis=1)
            elif n.endswith(".weight"):
                v = rng.normal(0, 0.02, shape)
            else:
                v = np.zeros(shape)
            v = v + rng.normal(0, 0.05, shape)
            if style == "cpplike":  # tests/model/climax_reference_test.cc's extra perturbation
                extra = {"var_query": 1.0, "var_agg.q.weight": 0.2, "var_agg.kv.weight": 0.2}.get(n, 0.0)
                if n.endswith("attn.qkv.weight"):
                    extra = 0.3
                if extra:
                    v = v + rng.normal(0, extra, shape)
        P[n] = np.asarray(v, dtype=np.float64).reshape(shape).astype(np.float32)
    return P


def random_batch(c, rng, S, B):
    V, H, W = c["vars"], c["img_h"], c["img_w"]
    x = rng.normal(0, 1, (S, B, V, H, W)).astype(np.float32)
    y = (0.5 * x + rng.normal(0, 1, (S, B, V, H, W))).astype(np.float32)
    lead = rng.uniform(6, 72, (S, B)).astype(np.float32)
    lat = (-90.0 + (np.arange(H) + 0.5) * 180.0 / H).astype(np.float32)  # cell centres
    return x, y, lead, lat


# ---------------------------------------------------------------------------
# a naive forward from the contract's formulas (numpy, weft layout)
# ---------------------------------------------------------------------------

def n_layernorm(x, g, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def n_gelu(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def n_softmax(s):
    e = np.exp(s - s.max())
    return e / e.sum()


def naive_forward(P, c, x, lead):
    """x (B, V, H, W), lead (B) hours -> prediction (B, V, H, W); float64 numpy."""
    V, H, W, p, D, NH = c["vars"], c["img_h"], c["img_w"], c["patch"], c["n_embd"], c["n_head"]
    hd, h, w, L, eps = D // NH, c["h"], c["w"], c["L"], c["ln_eps"]
    B = x.shape[0]
    # 1-2. patch embedding per variable + variable embedding
    e = np.zeros((B, V, L, D))
    for b in range(B):
        for v in range(V):
            for hi in range(h):
                for wi in range(w):
                    patch = np.array([x[b, v, hi * p + i, wi * p + j] for i in range(p) for j in range(p)])
                    e[b, v, hi * w + wi] = patch @ P["token_embeds.weight"][v] + P["token_embeds.bias"][v] \
                        + P["var_embed"][v]
    # 3. variable aggregation
    q = P["var_query"] @ P["var_agg.q.weight"] + P["var_agg.q.bias"]
    kv = e @ P["var_agg.kv.weight"] + P["var_agg.kv.bias"]
    k, vv = kv[..., :D], kv[..., D:]
    o = np.zeros((B, L, D))
    for b in range(B):
        for l in range(L):
            for hh in range(NH):
                sl = slice(hh * hd, (hh + 1) * hd)
                s = np.array([q[sl] @ k[b, v, l, sl] / math.sqrt(hd) for v in range(V)])
                a = n_softmax(s)
                o[b, l, sl] = sum(a[v] * vv[b, v, l, sl] for v in range(V))
    agg = o @ P["var_agg.out_proj.weight"] + P["var_agg.out_proj.bias"]
    # 4. positions and lead time
    lt = (lead[:, None] / 100.0) * P["lead_time_embed.weight"][0][None, :] + P["lead_time_embed.bias"]
    z = agg + P["pos_embed"][None] + lt[:, None, :]
    # 5. blocks
    for li in range(c["n_layer"]):
        pre = "blocks.%d." % li
        a_in = n_layernorm(z, P[pre + "norm1.weight"], P[pre + "norm1.bias"], eps)
        qkv = a_in @ P[pre + "attn.qkv.weight"] + P[pre + "attn.qkv.bias"]
        att = np.zeros((B, L, D))
        for b in range(B):
            for hh in range(NH):
                qh = qkv[b, :, hh * hd:(hh + 1) * hd]
                kh = qkv[b, :, D + hh * hd:D + (hh + 1) * hd]
                vh = qkv[b, :, 2 * D + hh * hd:2 * D + (hh + 1) * hd]
                for t in range(L):
                    a = n_softmax(kh @ qh[t] / math.sqrt(hd))
                    att[b, t, hh * hd:(hh + 1) * hd] = a @ vh
        z = z + att @ P[pre + "attn.proj.weight"] + P[pre + "attn.proj.bias"]
        m_in = n_layernorm(z, P[pre + "norm2.weight"], P[pre + "norm2.bias"], eps)
        z = z + n_gelu(m_in @ P[pre + "mlp.fc1.weight"] + P[pre + "mlp.fc1.bias"]) @ P[pre + "mlp.fc2.weight"] \
            + P[pre + "mlp.fc2.bias"]
    # 6-7. final norm, head
    z = n_layernorm(z, P["norm.weight"], P["norm.bias"], eps)
    h1 = n_gelu(z @ P["head.0.weight"] + P["head.0.bias"])
    h2 = n_gelu(h1 @ P["head.2.weight"] + P["head.2.bias"])
    out = h2 @ P["head.4.weight"] + P["head.4.bias"]      # (B, L, V*p*p)
    # 8. unpatchify by the contract's index formula
    pred = np.zeros((B, V, H, W))
    for b in range(B):
        for hi in range(h):
            for wi in range(w):
                for i in range(p):
                    for j in range(p):
                        for cc in range(V):
                            pred[b, cc, hi * p + i, wi * p + j] = out[b, hi * w + wi, (i * p + j) * V + cc]
    return pred


def naive_wmse(pred, y, lat):
    cl = np.cos(np.asarray(lat, dtype=np.float64) * math.pi / 180.0)
    wl = cl / cl.mean()
    B, V, H, W = pred.shape
    total = 0.0
    for b in range(B):
        for cc in range(V):
            for r in range(H):
                for col in range(W):
                    total += wl[r] * (pred[b, cc, r, col] - y[b, cc, r, col]) ** 2
    return total / (B * V * H * W)


def naive_loss(P, c, x, y, lead, lat):
    return naive_wmse(naive_forward(P, c, x, lead), y, lat)


# ---------------------------------------------------------------------------
# 1. building blocks
# ---------------------------------------------------------------------------

def test_blocks():
    print("1. building blocks")
    torch.manual_seed(0)
    rng = np.random.default_rng(3)
    c = ct.make_config(3, 4, 6, 2, 8, 1, 2)
    m = ct.build(c)
    P = random_params(c, rng)
    P64 = {k: v.astype(np.float64) for k, v in P.items()}
    ct.import_weft(m, P64)
    back = ct.export_weft(m)
    check(list(back) == list(ct.weft_param_shapes(c)) and all(np.array_equal(back[k], P64[k]) for k in P64),
          "import_weft/export_weft round trip is exact, in weft's flat-buffer order")
    n_module = sum(p.numel() for p in m.parameters())
    n_weft = sum(int(np.prod(s)) for s in ct.weft_param_shapes(c).values())
    check(n_module == n_weft, "weft tensors hold %d elements = the module's %d" % (n_weft, n_module))
    # every module element is reached by exactly one weft element: import distinct values
    idx = {}
    off = 0
    for k, s in ct.weft_param_shapes(c).items():
        n = int(np.prod(s))
        idx[k] = np.arange(off, off + n, dtype=np.float64).reshape(s)
        off += n
    ct.import_weft(m, idx)
    seen = np.sort(np.concatenate([p.detach().reshape(-1).numpy() for p in m.parameters()]))
    check(np.array_equal(seen, np.arange(off, dtype=np.float64)),
          "each module parameter element comes from exactly one weft element")
    ct.import_weft(m, P64)

    # patch embedding: conv == patch_k @ W_tok[v] + b_tok[v]
    x = torch.from_numpy(rng.normal(size=(2, c["vars"], c["img_h"], c["img_w"])))
    p, w = c["patch"], c["w"]
    worst = 0.0
    for v in range(c["vars"]):
        got = m.token_embeds[v](x[:, v:v + 1]).detach().numpy()        # (B, L, D)
        for b in range(2):
            for hi in range(c["h"]):
                for wi in range(w):
                    patch = np.array([x[b, v, hi * p + i, wi * p + j].item() for i in range(p) for j in range(p)])
                    want = patch @ P64["token_embeds.weight"][v] + P64["token_embeds.bias"][v]
                    worst = max(worst, np.max(np.abs(got[b, hi * w + wi] - want)))
    check(worst < 1e-13, "Conv2d patch embedding = patch_k @ W_tok[v] + b_tok[v], k = i*p + j (max diff %.1e)" % worst)

    # unpatchify / patchify
    xx = torch.from_numpy(rng.normal(size=(2, c["vars"], c["img_h"], c["img_w"])))
    check(torch.equal(ct.unpatchify(ct.patchify(xx, p), c["vars"], c["img_h"], c["img_w"], p), xx),
          "unpatchify(patchify(x)) == x")
    tok = torch.from_numpy(rng.normal(size=(2, c["L"], p * p * c["vars"])))
    check(torch.equal(ct.patchify(ct.unpatchify(tok, c["vars"], c["img_h"], c["img_w"], p), p), tok),
          "patchify(unpatchify(t)) == t")
    img = ct.unpatchify(tok, c["vars"], c["img_h"], c["img_w"], p)
    ok = all(img[b, cc, hi * p + i, wi * p + j] == tok[b, hi * w + wi, (i * p + j) * c["vars"] + cc]
             for b in range(2) for cc in range(c["vars"]) for hi in range(c["h"]) for wi in range(w)
             for i in range(p) for j in range(p))
    check(ok, "unpatchify: channel (i*p + j)*V + c of patch hi*w + wi is pixel (c, hi*p + i, wi*p + j)")

    # lat_weighted_mse
    lat = np.array([-67.5, -22.5, 22.5, 67.5])
    pred, y = rng.normal(size=(2, 3, 4, 6)), rng.normal(size=(2, 3, 4, 6))
    got = ct.lat_weighted_mse(torch.from_numpy(pred), torch.from_numpy(y), lat).item()
    want = naive_wmse(pred, y, lat)
    check(abs(got - want) < 1e-14 * abs(want), "lat_weighted_mse %.15f = hand loops %.15f" % (got, want))
    w8 = ct.lat_weights(lat).numpy()
    check(abs(w8.mean() - 1.0) < 1e-15 and abs(w8[0] - w8[3]) < 1e-15 and w8[1] > w8[0],
          "latitude weights have mean 1, are symmetric, peak at the equator")

    # MultiheadAttention with one query
    D, NH, Vn, N = 8, 2, 5, 3
    mha = torch.nn.MultiheadAttention(D, NH, batch_first=True).double()
    with torch.no_grad():
        for prm in mha.parameters():
            prm.copy_(torch.from_numpy(rng.normal(0, 0.5, tuple(prm.shape))))
    qin = torch.from_numpy(rng.normal(size=(N, 1, D)))
    kin = torch.from_numpy(rng.normal(size=(N, Vn, D)))
    got, _ = mha(qin, kin, kin, need_weights=False)
    Wi, bi = mha.in_proj_weight.detach().numpy(), mha.in_proj_bias.detach().numpy()
    Wo, bo = mha.out_proj.weight.detach().numpy(), mha.out_proj.bias.detach().numpy()
    hd = D // NH
    worst = 0.0
    for n in range(N):
        qv = qin[n, 0].numpy() @ Wi[:D].T + bi[:D]
        kk = kin[n].numpy() @ Wi[D:2 * D].T + bi[D:2 * D]
        vv = kin[n].numpy() @ Wi[2 * D:].T + bi[2 * D:]
        o = np.zeros(D)
        for hh in range(NH):
            sl = slice(hh * hd, hh * hd + hd)
            s = np.array([sum(qv[sl][i] * kk[v, sl][i] for i in range(hd)) / math.sqrt(hd) for v in range(Vn)])
            e = np.exp(s - s.max())
            a = e / e.sum()
            o[sl] = sum(a[v] * vv[v, sl] for v in range(Vn))
        want = o @ Wo.T + bo
        worst = max(worst, np.max(np.abs(got[n, 0].detach().numpy() - want)))
    check(worst < 1e-13, "nn.MultiheadAttention, one query over %d tokens = manual per-head softmax (max diff %.1e)"
          % (Vn, worst))


# ---------------------------------------------------------------------------
# 2-3. the whole module
# ---------------------------------------------------------------------------

def test_module():
    print("2. the module vs a naive forward; 3. gradcheck")
    rng = np.random.default_rng(5)
    c = ct.make_config(3, 4, 8, 2, 8, 2, 2)
    m = ct.build(c)
    P = {k: v.astype(np.float64) for k, v in random_params(c, rng).items()}
    ct.import_weft(m, P)
    x, y, lead, lat = random_batch(c, rng, 1, 2)
    x64, y64, lead64 = (a[0].astype(np.float64) for a in (x, y, lead))
    got = m.loss(torch.from_numpy(x64), torch.from_numpy(y64), torch.from_numpy(lead64), lat).item()
    want = naive_loss(P, c, x64, y64, lead64, lat)
    check(abs(got - want) < 1e-12 * abs(want), "module loss %.15f = naive forward %.15f (|diff| %.1e)"
          % (got, want, abs(got - want)))
    pred = m(torch.from_numpy(x64), torch.from_numpy(lead64)).detach().numpy()
    np_pred = naive_forward(P, c, x64, lead64)
    check(np.max(np.abs(pred - np_pred)) < 1e-12, "module prediction = naive prediction elementwise (max diff %.1e)"
          % np.max(np.abs(pred - np_pred)))

    # gradcheck in every parameter and in x, tiny instance
    c2 = ct.make_config(2, 4, 4, 2, 8, 1, 2, ffn=8)
    m2 = ct.build(c2)
    ct.import_weft(m2, {k: v.astype(np.float64) for k, v in random_params(c2, rng).items()})
    names = [n for n, _ in m2.named_parameters()]
    xb, yb, lb, latb = random_batch(c2, rng, 1, 2)
    yt = torch.from_numpy(yb[0].astype(np.float64))
    lt = torch.from_numpy(lb[0].astype(np.float64))
    from torch.nn.utils import stateless

    def f(xin, *params):
        pred = stateless.functional_call(m2, dict(zip(names, params)), (xin, lt))
        return ct.lat_weighted_mse(pred, yt, latb)

    inputs = [torch.from_numpy(xb[0].astype(np.float64)).requires_grad_(True)] + \
             [p.detach().clone().requires_grad_(True) for p in m2.parameters()]
    n_el = sum(t.numel() for t in inputs)
    try:
        ok = torch.autograd.gradcheck(f, tuple(inputs), eps=1e-6, atol=1e-7, rtol=1e-5)
    except RuntimeError as e:
        print(str(e)[:2000])
        ok = False
    check(ok, "torch.autograd.gradcheck of the loss in x and all %d parameter tensors (%d elements)"
          % (len(names), n_el))
    # and the lead time enters through lead/100: d loss / d lead by autograd vs finite differences
    lt2 = lt.clone().requires_grad_(True)
    m2.zero_grad()
    ct.lat_weighted_mse(m2(inputs[0].detach(), lt2), yt, latb).backward()
    hstep = 1e-4
    with torch.no_grad():
        fd = [(ct.lat_weighted_mse(m2(inputs[0], lt + hstep * e), yt, latb)
               - ct.lat_weighted_mse(m2(inputs[0], lt - hstep * e), yt, latb)).item() / (2 * hstep)
              for e in torch.eye(lt.numel())]
    err = np.max(np.abs(np.array(fd) - lt2.grad.numpy()))
    check(err < 1e-9, "d loss / d lead (hours) by autograd = finite differences (max diff %.1e)" % err)


# ---------------------------------------------------------------------------
# 4. the CLI
# ---------------------------------------------------------------------------

OPT = {"steps": 4, "lr": 1e-2, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1}


def run_cli(ckpt, batch, out, extra=(), quiet=False):
    cmd = [sys.executable, os.path.join(HERE, "climax_reference.py"), "--checkpoint", ckpt, "--batch", batch,
           "--out", out, "--steps", str(OPT["steps"]), "--lr", str(OPT["lr"]), "--beta1", str(OPT["beta1"]),
           "--beta2", str(OPT["beta2"]), "--eps", str(OPT["eps"]), "--weight-decay", str(OPT["weight_decay"])]
    cmd += list(extra)
    if not quiet:
        print("  running: " + " ".join(cmd))
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_cli(tmp):
    print("4. climax_reference.py")
    rng = np.random.default_rng(1234)
    c = ct.make_config(3, 8, 16, 2, 16, 2, 4)
    S, B = 3, 2
    P32 = random_params(c, rng)
    ckpt = os.path.join(tmp, "ckpt")
    os.makedirs(ckpt, exist_ok=True)
    # a guess at weft's config.json for ClimaX (the reader is lenient, see climax_reference.py)
    cfg_json = {"model_type": "climax", "n_layer": c["n_layer"], "n_head": c["n_head"], "n_embd": c["n_embd"],
                "layer_norm_epsilon": 1e-5,
                "weft": {"family": "climax", "name": "selftest", "vars": c["vars"], "img_h": c["img_h"],
                         "img_w": c["img_w"], "patch": c["patch"], "ffn": c["ffn"], "decoder_depth": 2,
                         "ln_eps": 1e-5}}
    with open(os.path.join(ckpt, "config.json"), "w") as f:
        json.dump(cfg_json, f, indent=2)
    ct.save_safetensors(os.path.join(ckpt, "model.safetensors"), P32, metadata={"format": "pt"})
    x, y, lead, lat = random_batch(c, rng, S, B)
    batch = os.path.join(tmp, "batch.safetensors")
    ct.save_safetensors(batch, {"x": x, "y": y, "lead": lead, "lat": lat})
    out = os.path.join(tmp, "ref.safetensors")
    r = run_cli(ckpt, batch, out)
    sys.stderr.write(r.stderr)
    check(r.returncode == 0, "climax_reference.py exit code %d" % r.returncode)
    if r.returncode != 0:
        return
    R, meta = ct.load_safetensors(out, with_metadata=True)
    names = list(ct.weft_param_shapes(c))
    want = {"loss", "losses", "final_loss"} | {"grad." + n for n in names} | {"param." + n for n in names}
    check(set(R) == want, "output has loss, losses, final_loss, grad.* and param.* for %d tensors" % len(names))
    check(all(v.dtype == np.float64 for v in R.values()), "output tensors are all F64")
    check(R["loss"].shape == (1,) and R["losses"].shape == (OPT["steps"],), "loss [1], losses [steps]")
    check(all(R["grad." + n].shape == P32[n].shape and R["param." + n].shape == P32[n].shape for n in names),
          "grad/param shapes are weft's (matrices (in, out))")
    check(R["losses"][0] == R["loss"][0], "losses[0] == loss")
    decay = [n for n in names if ct.weight_decays(n)]
    check(meta.get("decay") == ",".join(decay), "metadata 'decay' lists the %d decayed tensors" % len(decay))
    expect_decay = {"token_embeds.weight", "var_embed", "var_agg.q.weight", "var_agg.kv.weight",
                    "var_agg.out_proj.weight", "pos_embed", "lead_time_embed.weight", "head.0.weight",
                    "head.2.weight", "head.4.weight"} | {"blocks.%d.%s" % (l, s) for l in range(c["n_layer"])
                                                         for s in ("attn.qkv.weight", "attn.proj.weight",
                                                                   "mlp.fc1.weight", "mlp.fc2.weight")}
    check(set(decay) == expect_decay, "decay list = matrices + var_embed + pos_embed (no biases, norms, var_query)")

    P = {k: v.astype(np.float64) for k, v in P32.items()}
    x64, y64, l64 = (a.astype(np.float64) for a in (x, y, lead))
    naive = naive_loss(P, c, x64[0], y64[0], l64[0], lat)
    err = abs(naive - R["loss"][0])
    check(err < 1e-12 * naive, "loss %.15f vs naive forward %.15f (|diff| %.1e)" % (R["loss"][0], naive, err))

    # gradients vs central finite differences of the naive forward
    hstep = 1e-5
    grng = np.random.default_rng(7)
    worst, n_checked = 0.0, 0
    for n in names:
        g = R["grad." + n]
        picks = [int(np.argmax(np.abs(g)))] + list(grng.choice(g.size, size=2, replace=False))
        bad = []
        for fi in picks:
            ix = np.unravel_index(fi, g.shape)
            orig = P[n][ix]
            P[n][ix] = orig + hstep
            lp = naive_loss(P, c, x64[0], y64[0], l64[0], lat)
            P[n][ix] = orig - hstep
            lm = naive_loss(P, c, x64[0], y64[0], l64[0], lat)
            P[n][ix] = orig
            fd = (lp - lm) / (2 * hstep)
            worst = max(worst, abs(fd - g[ix]) / max(1e-3, abs(g[ix])))
            n_checked += 1
            if abs(fd - g[ix]) > 1e-8 + 1e-5 * abs(g[ix]):
                bad.append("%s%s grad %.10e fd %.10e" % (n, list(ix), g[ix], fd))
        for b in bad:
            print("      " + b)
        if bad:
            check(False, "grad %s matches finite differences" % n)
    check(worst < 1e-5, "%d gradient elements (%d tensors, each's largest + 2 random) = finite differences of the "
          "naive forward (worst |fd-g|/max(1e-3,|g|) %.1e)" % (n_checked, len(names), worst))
    D = c["n_embd"]
    kb = max([np.max(np.abs(R["grad.blocks.%d.attn.qkv.bias" % l][D:2 * D])) for l in range(c["n_layer"])]
             + [np.max(np.abs(R["grad.var_agg.kv.bias"][:D]))])
    check(kb < 1e-14, "key biases (qkv.bias[D:2D], var_agg.kv.bias[0:D]) have gradient ~0 as they must (max %.1e)" % kb)

    # AdamW by hand (numpy) with the decay list, gradients from an in-process float64 module
    m = ct.build(c)
    Wt = {k: v.copy() for k, v in P.items()}
    mom = {k: np.zeros_like(v) for k, v in Wt.items()}
    vel = {k: np.zeros_like(v) for k, v in Wt.items()}
    b1, b2, lr, eps, wd = OPT["beta1"], OPT["beta2"], OPT["lr"], OPT["eps"], OPT["weight_decay"]
    losses = []
    for k in range(OPT["steps"]):
        ct.import_weft(m, Wt)
        m.zero_grad(set_to_none=True)
        loss = m.loss(torch.from_numpy(x64[k % S]), torch.from_numpy(y64[k % S]), torch.from_numpy(l64[k % S]), lat)
        loss.backward()
        losses.append(loss.item())
        G = ct.export_grads(m)
        t = k + 1
        for n in names:
            if ct.weight_decays(n):
                Wt[n] = Wt[n] * (1.0 - lr * wd)
            mom[n] = b1 * mom[n] + (1 - b1) * G[n]
            vel[n] = b2 * vel[n] + (1 - b2) * G[n] ** 2
            Wt[n] = Wt[n] - lr * (mom[n] / (1 - b1 ** t)) / (np.sqrt(vel[n] / (1 - b2 ** t)) + eps)
    lerr = np.max(np.abs(np.array(losses) - R["losses"]))
    check(lerr < 1e-12, "losses %s = hand AdamW run (max |diff| %.1e)" % (np.array2string(R["losses"], precision=6), lerr))
    ferr = max(np.max(np.abs(Wt[n] - R["param." + n])) for n in names)
    check(ferr < 1e-9, "final params = numpy AdamW with the decay list (max |diff| %.1e)" % ferr)
    ct.import_weft(m, Wt)
    with torch.no_grad():
        s_f = OPT["steps"] % S
        fl = m.loss(torch.from_numpy(x64[s_f]), torch.from_numpy(y64[s_f]), torch.from_numpy(l64[s_f]), lat).item()
    check(abs(fl - R["final_loss"][0]) < 1e-10, "final_loss %.12f = loss at the hand-stepped weights on batch "
          "steps %% S (|diff| %.1e)" % (R["final_loss"][0], abs(fl - R["final_loss"][0])))
    moved = min(np.max(np.abs(R["param." + n] - P[n])) for n in names)
    check(moved > 1e-3, "every tensor moved (min max|change| %.1e)" % moved)
    # a decay-list mistake would move a tensor by about steps*lr*wd*|p| (4e-3*|p|), far above 1e-9
    for n in ("var_query", "token_embeds.bias", "pos_embed", "var_embed"):
        print("      %s: a flipped decay flag would change it by ~%.1e" % (n, OPT["steps"] * lr * wd * np.max(np.abs(P[n]))))

    # config resolution
    R0 = R
    alt_dir = os.path.join(tmp, "ckpt_meta")
    os.makedirs(alt_dir, exist_ok=True)
    ct.save_safetensors(os.path.join(alt_dir, "model.safetensors"), P32,
                        metadata={"format": "pt", "family": "climax", "n_head": str(c["n_head"])})
    r = run_cli(alt_dir, batch, out + "2", quiet=True)
    same = r.returncode == 0 and np.array_equal(ct.load_safetensors(out + "2")["param.head.4.weight"],
                                                R0["param.head.4.weight"])
    check(same, "no config.json, heads from the safetensors metadata: same output")
    bare = os.path.join(tmp, "ckpt_bare")
    os.makedirs(bare, exist_ok=True)
    ct.save_safetensors(os.path.join(bare, "model.safetensors"), P32)
    r = run_cli(bare, batch, out + "3", ["--heads", "4", "--vars", "3", "--img-h", "8", "--img-w", "16",
                                         "--patch", "2"], quiet=True)
    same = r.returncode == 0 and np.array_equal(ct.load_safetensors(out + "3")["loss"], R0["loss"])
    check(same, "no config at all, --heads --vars --img-h --img-w --patch: same output")
    r = run_cli(bare, batch, out + "4", quiet=True)
    check(r.returncode != 0 and "--heads" in r.stderr, "no heads anywhere: error asks for --heads (%s)"
          % r.stderr.strip().splitlines()[-1][:80])
    r = run_cli(ckpt, batch, out + "5", ["--heads", "2"], quiet=True)
    check(r.returncode != 0 and "n_head" in r.stderr, "--heads 2 against config n_head 4: error (%s)"
          % r.stderr.strip().splitlines()[-1][:100])
    r = run_cli(bare, batch, out + "6", ["--heads", "4", "--patch", "4"], quiet=True)
    check(r.returncode != 0 and "patch" in r.stderr, "--patch 4 against p = 2 in the tensors: error (%s)"
          % r.stderr.strip().splitlines()[-1][:100])
    bad_dir = os.path.join(tmp, "ckpt_missing")
    os.makedirs(bad_dir, exist_ok=True)
    ct.save_safetensors(os.path.join(bad_dir, "model.safetensors"),
                        {k: v for k, v in P32.items() if k != "var_query"})
    r = run_cli(bad_dir, batch, out + "7", ["--heads", "4"], quiet=True)
    check(r.returncode != 0 and "var_query" in r.stderr, "a missing tensor is an error naming it (%s)"
          % r.stderr.strip().splitlines()[-1][:100])


# ---------------------------------------------------------------------------
# 5. float32 vs float64 (informative for the C++ tolerances)
# ---------------------------------------------------------------------------

def attention_spread(m, x, lead):
    """(min, max) of the variable-aggregation attention weights and, per block, the mean over
    rows of the largest attention weight (uniform: 1/L)."""
    got = {}
    blk_max = []

    def agg_hook(mod, args):
        q, k = args[0], args[1]
        _, w = nn_mha_weights(mod, q, k)
        got["agg"] = (w.min().item(), w.max().item())

    def blk_hook(mod, args):
        xin = args[0]
        B, N, C = xin.shape
        qkv = mod.qkv(xin).reshape(B, N, 3, mod.num_heads, mod.head_dim).permute(2, 0, 3, 1, 4)
        att = ((qkv[0] * mod.scale) @ qkv[1].transpose(-2, -1)).softmax(-1)
        blk_max.append(att.max(-1).values.mean().item())

    hs = [m.var_agg.register_forward_pre_hook(agg_hook)] + [b.attn.register_forward_pre_hook(blk_hook) for b in m.blocks]
    with torch.no_grad():
        m(x, lead)
    for h in hs:
        h.remove()
    return got["agg"], blk_max


def nn_mha_weights(mha, q, k):
    with torch.no_grad():
        return torch.nn.functional.multi_head_attention_forward(
            q.transpose(0, 1), k.transpose(0, 1), k.transpose(0, 1), mha.embed_dim, mha.num_heads,
            mha.in_proj_weight, mha.in_proj_bias, None, None, False, 0.0, mha.out_proj.weight, mha.out_proj.bias,
            training=False, need_weights=True, average_attn_weights=False)


def test_fp32_margin():
    print("5. the same module in float32 vs float64 (the C++ test's instance: weft-like init + its perturbation)")
    rng = np.random.default_rng(11)
    c = ct.make_config(3, 8, 16, 2, 32, 2, 4)
    P = random_params(c, rng, "cpplike")
    x, y, lead, lat = random_batch(c, rng, 1, 2)
    res = {}
    for dt in (torch.float64, torch.float32):
        m = ct.build(c, dt)
        ct.import_weft(m, {k: v.astype(np.float64) for k, v in P.items()})
        xt, yt, lt = (torch.from_numpy(a[0]).to(dt) for a in (x, y, lead))
        loss = m.loss(xt, yt, lt, lat)
        loss.backward()
        res[dt] = (loss.item(), ct.export_grads(m))
        if dt == torch.float64:
            agg, blk = attention_spread(m, xt, lt)
    l64, g64 = res[torch.float64]
    l32, g32 = res[torch.float32]
    D = c["n_embd"]
    errs = {}
    for n in g64:
        a, b = g32[n], g64[n]
        if n.endswith("attn.qkv.bias"):
            a, b = np.concatenate([a[:D], a[2 * D:]]), np.concatenate([b[:D], b[2 * D:]])
        if n == "var_agg.kv.bias":
            a, b = a[D:], b[D:]
        errs[n] = np.linalg.norm(a - b) / np.linalg.norm(b)
    worst = max(errs, key=errs.get)
    print("      variable attention weights in [%.3f, %.3f] (uniform %.3f); blocks' mean largest weight %s "
          "(uniform %.3f)" % (agg[0], agg[1], 1.0 / c["vars"], ", ".join("%.3f" % v for v in blk), 1.0 / c["L"]))
    print("      loss %.10f, float32 rel. error %.1e; worst gradient rel. L2 %.1e (%s); median %.1e"
          % (l64, abs(l32 - l64) / l64, errs[worst], worst, np.median(list(errs.values()))))
    small = sorted(g64, key=lambda n: np.linalg.norm(g64[n]))[:3]
    print("      smallest gradients: " + ", ".join("%s |g| %.1e" % (n, np.linalg.norm(g64[n])) for n in small))
    check(agg[1] - agg[0] > 0.2, "the variable aggregation is far from uniform on this instance")
    check(errs[worst] < 1e-5 and abs(l32 - l64) / l64 < 1e-6,
          "float32 torch lands within 1e-5 (gradients) / 1e-6 (loss) of float64: the C++ test's 1e-4 / 1e-5 "
          "leave a margin")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--keep", help="write the checkpoint/batch/output files here and keep them")
    args = ap.parse_args()
    torch.set_default_dtype(torch.float64)
    tmp = args.keep or tempfile.mkdtemp(prefix="weft_climax_selftest_")
    os.makedirs(tmp, exist_ok=True)
    try:
        test_blocks()
        test_module()
        test_cli(tmp)
        test_fp32_margin()
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    print("climax selftest: %s (%d failure%s)" % ("OK" if not failures else "FAILED", len(failures),
                                                   "" if len(failures) == 1 else "s"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
