#!/usr/bin/python3
"""Float64 PyTorch oracle for weft's ClimaX model tests (model: climax_torch.py).

Usage:
  /usr/bin/python3 tests/reference/climax_reference.py --checkpoint DIR --batch FILE --out FILE \
      [--heads NH] [--vars V --img-h H --img-w W --patch P] [--ln-eps 1e-5] \
      [--steps 5 --lr 1e-3 --beta1 0.9 --beta2 0.95 --eps 1e-8 --weight-decay 0.1]
  /usr/bin/python3 tests/reference/climax_reference.py --selftest   (runs climax_selftest.py)

Inputs
  DIR/model.safetensors  weft's ClimaX tensors under weft's names and shapes (matrices (in, out);
                         see climax_torch.weft_param_shapes), any float dtype. Exactly those
                         tensors: a missing or extra name or another shape is an error.
  DIR/config.json        (optional) the model config. Read leniently because the ClimaX keys of
                         weft's checkpoint config are not fixed yet: the keys are looked up at
                         the top level, in a "weft" object and in a "climax" object, and in the
                         __metadata__ of model.safetensors; recognised keys: family/model_type,
                         n_layer, n_head, n_embd, ffn/n_inner, vars (a count or a list of names),
                         img_h, img_w (or img_size [H, W]), patch (patch_size), decoder_depth,
                         ln_eps/layer_norm_epsilon.
  --batch FILE           safetensors with x [S, B, V, H, W], y [S, B, V, H, W] (float),
                         lead [S, B] (hours), lat [H] (degrees); x, y as [B, V, H, W] and lead
                         as [B] are read as S = 1.

How the shapes are found: V, p, D, L, depth, F come from the tensor shapes; H, W from the batch;
the number of heads (the one thing the tensors do not fix) from --heads or the config. Every
value given on the command line or found in the config must agree with the tensors and the
batch (an error names both values). So a caller that does not know weft's config format can
pass --heads (and --vars --img-h --img-w --patch as a cross-check) and the script needs no
config.json at all.

Output (--out, safetensors, every tensor F64)
  loss          [1]        lat-weighted MSE of batch 0 at the checkpoint's weights (mean over
                           B, V, H, W of w_lat (pred - y)^2, w_lat = cos(lat) / mean(cos(lat)))
  grad.<name>   weft shape gradient of that loss for every parameter
  losses        [steps]    loss before step k, computed on batch k % S (losses[0] == loss)
  param.<name>  weft shape parameters after --steps AdamW steps
  final_loss    [1]        loss at those parameters on batch steps % S (no gradients)
  metadata: decay = the comma-separated weft names that AdamW decays, steps, lr, ...

Optimizer: torch.optim.AdamW(lr, betas=(beta1, beta2), eps, weight_decay), constant learning
rate, no clipping, two groups from climax_torch.weight_decays: decay on
  token_embeds.weight, var_embed, var_agg.q.weight, var_agg.kv.weight, var_agg.out_proj.weight,
  pos_embed, lead_time_embed.weight, blocks.{l}.attn.qkv.weight, blocks.{l}.attn.proj.weight,
  blocks.{l}.mlp.fc1.weight, blocks.{l}.mlp.fc2.weight, head.0.weight, head.2.weight,
  head.4.weight;
none on every bias (token_embeds.bias included), every LayerNorm weight and var_query.
"""

import argparse
import json
import math
import os
import subprocess
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import climax_torch as ct  # noqa: E402


def _as_int(v, key, source):
    if isinstance(v, bool):
        raise SystemExit("%s: %s is %r, expected an integer" % (source, key, v))
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str):
        try:
            return int(v)
        except ValueError:
            pass
    raise SystemExit("%s: %s is %r, expected an integer" % (source, key, v))


def read_config_hints(ckpt_dir, st_meta):
    """The ClimaX config values found in DIR/config.json and the model file's metadata:
    {canonical key: (value, where)}. Unknown keys are ignored."""
    sources = []
    path = os.path.join(ckpt_dir, "config.json")
    if os.path.exists(path):
        with open(path) as f:
            j = json.load(f)
        if not isinstance(j, dict):
            raise SystemExit("%s: expected a JSON object" % path)
        sources.append((j, path))
        for sub in ("weft", "climax"):
            if isinstance(j.get(sub), dict):
                sources.append((j[sub], "%s: %s" % (path, sub)))
    if st_meta:
        meta = {}
        for k, v in st_meta.items():
            try:
                meta[k] = json.loads(v)
            except (ValueError, TypeError):
                meta[k] = v
        sources.append((meta, os.path.join(ckpt_dir, "model.safetensors") + " metadata"))
    aliases = {
        "n_layer": ("n_layer", "depth"), "n_head": ("n_head", "num_heads", "heads"),
        "n_embd": ("n_embd", "embed_dim"), "ffn": ("ffn", "n_inner"),
        "vars": ("vars", "n_vars", "num_vars", "variables"), "img_h": ("img_h",), "img_w": ("img_w",),
        "patch": ("patch", "patch_size"), "decoder_depth": ("decoder_depth",),
    }
    found = {}

    def put(key, value, where):
        if key in found and found[key][0] != value:
            raise SystemExit("config: %s is %r in %s but %r in %s" % (key, found[key][0], found[key][1], value, where))
        found.setdefault(key, (value, where))

    for obj, where in sources:
        if "family" in obj and obj["family"] != "climax":
            raise SystemExit("%s: family is %r, this reference implements \"climax\"" % (where, obj["family"]))
        for key, names in aliases.items():
            for n in names:
                if n in obj and obj[n] is not None:
                    v = obj[n]
                    if key == "vars" and isinstance(v, list):
                        v = len(v)
                    elif key == "vars" and isinstance(v, str) and not v.strip().isdigit():
                        v = len([s for s in v.split(",") if s.strip()])  # "t2m,u10,v10"
                    if key == "ffn" and v == 0:
                        break  # 0 means 4 * n_embd (weft's make_model_config convention)
                    put(key, _as_int(v, n, where), where)
                    break
        if "img_size" in obj and obj["img_size"] is not None:
            hw = obj["img_size"]
            if isinstance(hw, str):
                hw = json.loads(hw)
            if not (isinstance(hw, list) and len(hw) == 2):
                raise SystemExit("%s: img_size is %r, expected [H, W]" % (where, obj["img_size"]))
            put("img_h", _as_int(hw[0], "img_size[0]", where), where)
            put("img_w", _as_int(hw[1], "img_size[1]", where), where)
        for n in ("ln_eps", "layer_norm_epsilon", "layer_norm_eps"):
            if n in obj and obj[n] is not None:
                put("ln_eps", float(obj[n]), where)
                break
    return found


def shapes_from_tensors(t, path):
    def need(name, ndim):
        if name not in t:
            raise SystemExit("%s: no tensor %r (has %d tensors, e.g. %s)" % (path, name, len(t), sorted(t)[:6]))
        if t[name].ndim != ndim:
            raise SystemExit("%s: %s has shape %s, expected %d dims" % (path, name, list(t[name].shape), ndim))
        return t[name].shape
    V, pp, D = need("token_embeds.weight", 3)
    p = int(round(math.sqrt(pp)))
    if p * p != pp:
        raise SystemExit("%s: token_embeds.weight has %d rows per variable, not a square p*p" % (path, pp))
    L = need("pos_embed", 2)[0]
    depth = 0
    while "blocks.%d.norm1.weight" % depth in t:
        depth += 1
    if depth == 0:
        raise SystemExit("%s: no blocks.0.* tensors" % path)
    F = need("blocks.0.mlp.fc1.weight", 2)[1]
    dd = 0
    while "head.%d.weight" % (2 * dd + 2) in t:
        dd += 1
    return {"vars": int(V), "patch": p, "n_embd": int(D), "L": int(L), "n_layer": depth, "ffn": int(F),
            "decoder_depth": dd}


def read_batches(path):
    t = load(path)
    for key in ("x", "y", "lead", "lat"):
        if key not in t:
            raise SystemExit("batch file %s has no %r tensor (has %s)" % (path, key, sorted(t)))
    x, y, lead, lat = t["x"], t["y"], t["lead"], t["lat"]
    if x.ndim == 4:
        x, y, lead = x[None], y[None], np.reshape(lead, (1, -1))
    if x.ndim != 5 or x.shape[0] < 1 or x.shape[1] < 1:
        raise SystemExit("batch file %s: x must be [S, B, V, H, W], got %s" % (path, list(t["x"].shape)))
    if y.shape != x.shape:
        raise SystemExit("batch file %s: y shape %s != x shape %s" % (path, list(y.shape), list(x.shape)))
    if lead.shape != x.shape[:2]:
        raise SystemExit("batch file %s: lead shape %s, expected [S, B] = %s" % (path, list(lead.shape), list(x.shape[:2])))
    if lat.shape != (x.shape[3],):
        raise SystemExit("batch file %s: lat shape %s, expected [H] = [%d]" % (path, list(lat.shape), x.shape[3]))
    for key, a in (("x", x), ("y", y), ("lead", lead), ("lat", lat)):
        if a.dtype.kind != "f":
            raise SystemExit("batch file %s: %s must be float, got %s" % (path, key, a.dtype))
        if not np.all(np.isfinite(a)):
            raise SystemExit("batch file %s: %s has non-finite values" % (path, key))
    if np.any(np.abs(lat) > 90):
        raise SystemExit("batch file %s: lat outside [-90, 90] degrees" % path)
    f = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.float64))  # noqa: E731
    return f(x), f(y), f(lead), np.asarray(lat, dtype=np.float64)


def load(path, with_metadata=False):
    try:
        return ct.load_safetensors(path, with_metadata=with_metadata)
    except (OSError, ValueError) as e:
        raise SystemExit("cannot read %s: %s" % (path, e))


def resolve_config(args, tensors, tpath, hints, batch_shape):
    """The model config from the tensors, the batch, the config hints and the CLI; every
    source that names a value must agree."""
    t = shapes_from_tensors(tensors, tpath)
    _, _, V, H, W = batch_shape
    vals = dict(t)
    vals.update(img_h=int(H), img_w=int(W))
    where = {k: tpath for k in t}
    where.update(img_h=args.batch, img_w=args.batch)
    if V != t["vars"]:
        raise SystemExit("batch x has V = %d variables, the checkpoint %d (token_embeds.weight)" % (V, t["vars"]))
    cli = {"vars": args.vars, "img_h": args.img_h, "img_w": args.img_w, "patch": args.patch,
           "n_head": args.heads, "ln_eps": args.ln_eps}
    for key, v in list(hints.items()) + [(k, (v, "--" + k.replace("_", "-").replace("n-head", "heads")))
                                          for k, v in cli.items() if v is not None]:
        value, src = v
        if key in vals:
            if vals[key] != value:
                raise SystemExit("%s is %r in %s but %r in %s" % (key, value, src, vals[key], where[key]))
        else:
            vals[key], where[key] = value, src
    if "n_head" not in vals:
        raise SystemExit("the number of heads is not in %s: pass --heads" % os.path.dirname(tpath))
    try:
        c = ct.make_config(vals["vars"], vals["img_h"], vals["img_w"], vals["patch"], vals["n_embd"],
                           vals["n_layer"], vals["n_head"], vals["ffn"], vals.get("ln_eps", 1e-5),
                           vals["decoder_depth"])
    except ValueError as e:
        raise SystemExit("config: %s" % e)
    if c["L"] != t["L"]:
        raise SystemExit("grid %d x %d with patch %d has %d patches, pos_embed has %d rows"
                         % (c["img_h"], c["img_w"], c["patch"], c["L"], t["L"]))
    return c


def main(argv=None):
    if argv is None:
        argv = sys.argv[1:]
    if "--selftest" in argv:
        rest = [a for a in argv if a != "--selftest"]
        return subprocess.call([sys.executable, os.path.join(HERE, "climax_selftest.py")] + rest)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--batch", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--heads", type=int, help="attention heads (when the checkpoint config does not say)")
    ap.add_argument("--vars", type=int, help="cross-check: variables")
    ap.add_argument("--img-h", type=int, help="cross-check: grid rows")
    ap.add_argument("--img-w", type=int, help="cross-check: grid columns")
    ap.add_argument("--patch", type=int, help="cross-check: patch size")
    ap.add_argument("--ln-eps", type=float, help="LayerNorm eps (default: the config's, else 1e-5)")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.95)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch default)")
    args = ap.parse_args(argv)
    if args.steps < 0:
        raise SystemExit("--steps must be >= 0, got %d" % args.steps)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.set_default_dtype(torch.float64)

    tpath = os.path.join(args.checkpoint, "model.safetensors")
    tensors, st_meta = load(tpath, with_metadata=True)
    x, y, lead, lat = read_batches(args.batch)
    hints = read_config_hints(args.checkpoint, st_meta)
    c = resolve_config(args, tensors, tpath, hints, tuple(x.shape))
    model = ct.build(c, torch.float64)
    try:
        ct.import_weft(model, {k: v.astype(np.float64) for k, v in tensors.items()})
    except ValueError as e:
        raise SystemExit("%s: %s" % (tpath, e))
    names = list(ct.weft_param_shapes(c))
    S = x.shape[0]

    out = {}
    # 1. loss and gradients of batch 0 at the checkpoint's weights
    model.zero_grad(set_to_none=True)
    loss = model.loss(x[0], y[0], lead[0], lat)
    loss.backward()
    if not math.isfinite(loss.item()):
        raise SystemExit("loss at the checkpoint's weights is not finite: %r" % loss.item())
    out["loss"] = np.array([loss.item()], dtype=np.float64)
    for n, g in ct.export_grads(model).items():
        out["grad." + n] = g

    # 2. AdamW steps, step k on batch k % S; loss recorded before each step
    opt = torch.optim.AdamW(ct.weft_param_groups(model, args.weight_decay),
                            lr=args.lr, betas=(args.beta1, args.beta2), eps=args.eps)
    losses = []
    for k in range(args.steps):
        opt.zero_grad(set_to_none=True)
        loss = model.loss(x[k % S], y[k % S], lead[k % S], lat)
        loss.backward()
        losses.append(loss.item())
        opt.step()
    if args.steps > 0 and losses[0] != out["loss"][0]:
        raise SystemExit("internal check failed: losses[0] %r != loss %r" % (losses[0], out["loss"][0]))
    out["losses"] = np.array(losses, dtype=np.float64)
    with torch.no_grad():
        out["final_loss"] = np.array([model.loss(x[args.steps % S], y[args.steps % S], lead[args.steps % S],
                                                 lat).item()], dtype=np.float64)
    for n, p in ct.export_weft(model, "param").items():
        out["param." + n] = p

    decay = [n for n in names if ct.weight_decays(n)]
    ct.save_safetensors(args.out, out, metadata={
        "steps": args.steps, "lr": args.lr, "beta1": args.beta1, "beta2": args.beta2,
        "eps": args.eps, "weight_decay": args.weight_decay, "batches": S,
        "config": json.dumps({k: c[k] for k in ("vars", "img_h", "img_w", "patch", "n_embd", "n_layer",
                                                 "n_head", "ffn", "decoder_depth", "ln_eps")}, sort_keys=True),
        "decay": ",".join(decay),
        "generator": "tests/reference/climax_reference.py"})
    print("climax_reference: loss %.12f, %d steps, last loss %s -> %s"
          % (out["loss"][0], args.steps, ("%.12f" % losses[-1]) if losses else "n/a", args.out),
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
