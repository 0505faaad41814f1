"""A ClimaX checkpoint read by the `safetensors` package (CTest label `peers`): its tensors
have exactly the names, shapes and dtype that docs/formats-checkpoint.md promises (the table
between the `climax-tensors` markers is parsed here, so the document and the test cannot drift),
its metadata says "pt", its config.json the shapes, and safetensors' torch loader gives the
same values as its numpy loader.
"""
import json
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers_util as pu  # noqa: E402

DOC = os.path.join(pu.SOURCE_DIR, "docs", "formats-checkpoint.md")


def promised_tensors(cfg):
    """{name: shape} from the documented table, for the model that config.json describes."""
    text = open(DOC, encoding="utf-8").read()
    m = re.search(r"<!-- climax-tensors: begin.*?-->(.*?)<!-- climax-tensors: end -->", text, re.S)
    assert m, "%s has no climax-tensors table" % DOC
    H, W = cfg["img_size"]
    P, D = cfg["patch_size"], cfg["decoder_depth"]
    env = dict(V=cfg["num_vars"], P=P, C=cfg["embed_dim"], F=cfg["mlp_hidden"], L=(H // P) * (W // P), D=D)
    out = {}
    rows = [r for r in m.group(1).strip().splitlines()[2:] if r.strip()]
    assert len(rows) >= 20, "the table has %d rows" % len(rows)
    for row in rows:
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        names = re.findall(r"`([^`]+)`", cells[0])
        shape_expr = cells[1]
        assert re.fullmatch(r"\([A-Za-z0-9*, ]+\)", shape_expr), "bad shape %r in %s" % (shape_expr, DOC)
        shape = tuple(eval(e, {"__builtins__": {}}, env) for e in shape_expr.strip("()").split(","))
        full = []
        for n in names:
            if n.startswith("."):  # "`a.{i}.norm1.weight`, `.norm1.bias`": the suffix replaces as many segments
                k = n.count(".")
                n = full[0].rsplit(".", k)[0] + n
            full.append(n)
        for n in full:
            for name in expand(n, cfg["depth"], D):
                assert name not in out, "%s listed twice in %s" % (name, DOC)
                out[name] = shape
    return out


def expand(name, depth, D):
    if "{i}" in name:
        return [name.replace("{i}", str(i)) for i in range(depth)]
    if "{2d}" in name:
        return [name.replace("{2d}", str(2 * d)) for d in range(D)]
    if "{2D}" in name:
        return [name.replace("{2D}", str(2 * D))]
    return [name]


def test_climax_checkpoint():
    d = pu.scratch("climax-safetensors")
    data = os.path.join(d, "weather")
    pu.weft("prepare", "--synthetic-weather", data, "--days", 20, "--val-days", 4, "--test-days", 4)
    run = os.path.join(d, "run")
    pu.weft("train", os.path.join(pu.SOURCE_DIR, "configs", "climax-tiny.toml"), "--data", data,
            "--out", run, "--steps", 2, "--ckpt_every", 2, "--val_every", 0, "--warmup_steps", 1,
            "--threads", 2)
    ckpt = os.path.join(run, "step-000002")
    cfg = json.load(open(os.path.join(ckpt, "config.json")))
    assert cfg["model_type"] == "climax" and cfg["architectures"] == ["ClimaX"], cfg
    want = promised_tensors(cfg)

    from safetensors import safe_open
    from safetensors.numpy import load_file as load_np
    from safetensors.torch import load_file as load_pt
    path = os.path.join(ckpt, "model.safetensors")
    with safe_open(path, framework="np") as f:
        meta = f.metadata()
        names = set(f.keys())
    assert meta.get("format") == "pt", meta
    missing, extra = sorted(set(want) - names), sorted(names - set(want))
    assert not missing and not extra, "names differ from %s: missing %s, extra %s" % (DOC, missing, extra)
    arrays = load_np(path)
    tensors = load_pt(path)
    for n, shape in want.items():
        a = arrays[n]
        assert a.dtype == np.float32, "%s: dtype %s" % (n, a.dtype)
        assert tuple(a.shape) == shape, "%s: shape %s, the document promises %s" % (n, a.shape, shape)
        assert np.isfinite(a).all(), n
        assert np.array_equal(tensors[n].numpy(), a), n
    # The optimizer file names every parameter's moments.
    opt = load_np(os.path.join(ckpt, "optimizer.safetensors"))
    assert set(opt) == {p + n for n in want for p in ("exp_avg.", "exp_avg_sq.")}, sorted(opt)[:6]
    pu.report("climax_safetensors", tensors=len(want), parameters=int(sum(np.prod(s) for s in want.values())),
              config={k: cfg[k] for k in ("depth", "embed_dim", "num_vars", "img_size", "patch_size")})


if __name__ == "__main__":
    sys.exit(pu.main({"climax_checkpoint": test_climax_checkpoint}))
