#!/usr/bin/env python3
"""Independent reader of safetensors files and weft checkpoints, used by tests/ckpt.

  read_safetensors.py FILE.safetensors   parse FILE, load every tensor into torch
  read_safetensors.py --checkpoint DIR   also check DIR against what Hugging Face's
                                         GPT2LMHeadModel.from_pretrained(DIR) loads

The format is parsed with plain json + numpy (Debian has no safetensors package), following
the Hugging Face specification: u64 little-endian header length N, N bytes of JSON, then a
byte buffer tiled exactly by the tensors' data_offsets. Prints one JSON object:
  {"metadata": {...}, "tensors": {name: {"dtype", "shape", "sum", "first"}}}
("sum" in float64, "first" the first elements). In checkpoint mode it holds model.safetensors
and, when present, optimizer.safetensors, keyed "model" and "optimizer".
Exit codes: 0 ok, 1 a violation (message on stderr), 2 usage, 3 numpy or torch missing.
"""
import json
import math
import os
import struct
import sys


def fail(msg):
    print(f"read_safetensors.py: {msg}", file=sys.stderr)
    sys.exit(1)


try:
    import numpy as np
    import torch
except ImportError as e:  # the C++ test reports this as a failure, never a skip
    print(f"read_safetensors.py: {e}; install python3-numpy and python3-torch (scripts/setup.sh)",
          file=sys.stderr)
    sys.exit(3)

# dtype -> (numpy dtype of the raw elements, torch dtype to view them as or None)
DTYPES = {
    "F64": (np.float64, None), "F32": (np.float32, None), "F16": (np.float16, None),
    "BF16": (np.int16, torch.bfloat16),
    "I64": (np.int64, None), "I32": (np.int32, None), "I16": (np.int16, None), "I8": (np.int8, None),
    "U8": (np.uint8, None), "BOOL": (np.bool_, None),
}


def read_safetensors(path):
    """Returns (metadata dict, {name: (dtype string, torch tensor)})."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        fail(f"{path}: {len(data)} bytes, shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        fail(f"{path}: header length {n} beyond the file ({len(data)} bytes)")
    if (8 + n) % 8 != 0:
        fail(f"{path}: the data buffer starts at byte {8 + n}, not a multiple of 8")
    try:
        header = json.loads(data[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        fail(f"{path}: header is not JSON: {e}")
    if not isinstance(header, dict):
        fail(f"{path}: header is not an object")
    metadata = header.pop("__metadata__", None) or {}
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        fail(f"{path}: __metadata__ must map strings to strings: {metadata}")
    buf = memoryview(data)[8 + n:]
    entries = sorted(header.items(), key=lambda kv: tuple(kv[1]["data_offsets"]))
    pos = 0
    tensors = {}
    for name, e in entries:
        if set(e) != {"dtype", "shape", "data_offsets"}:
            fail(f"{path}: {name}: keys {sorted(e)}")
        begin, end = e["data_offsets"]
        if begin != pos:
            fail(f"{path}: {name} starts at {begin}, the previous tensor ends at {pos}")
        dtype, shape = e["dtype"], e["shape"]
        if dtype not in DTYPES:
            fail(f"{path}: {name}: dtype {dtype} not handled by this reader")
        np_dtype, view = DTYPES[dtype]
        count = math.prod(shape)
        itemsize = np.dtype(np_dtype).itemsize
        if end - begin != count * itemsize:
            fail(f"{path}: {name}: {dtype} {shape} needs {count * itemsize} bytes, offsets span {end - begin}")
        arr = np.frombuffer(buf[begin:end], dtype=np.dtype(np_dtype).newbyteorder("<"), count=count)
        t = torch.from_numpy(arr.astype(np.dtype(np_dtype), copy=True)).reshape(shape)
        if view is not None:
            t = t.view(view)
        tensors[name] = (dtype, t)
        pos = end
    if pos != len(buf):
        fail(f"{path}: tensors cover {pos} bytes of a {len(buf)}-byte buffer")
    return metadata, tensors


def summary(metadata, tensors):
    out = {}
    for name, (dtype, t) in tensors.items():
        flat = t.reshape(-1)
        out[name] = {
            "dtype": dtype,
            "shape": list(t.shape),
            "sum": float(flat.to(torch.float64).sum()) if flat.numel() else 0.0,
            "first": [float(x) for x in flat[:4].to(torch.float64)],
        }
    return {"metadata": metadata, "tensors": out}


def gpt2_lm_head_state_dict_shapes(cfg):
    """The parameters of transformers' GPT2LMHeadModel (modeling_gpt2.py: Conv1D weights are
    (in, out)); lm_head.weight is tied to transformer.wte.weight and not saved."""
    C, L, V, P = cfg["n_embd"], cfg["n_layer"], cfg["vocab_size"], cfg["n_positions"]
    F = cfg.get("n_inner") or 4 * C
    shapes = {"transformer.wte.weight": [V, C], "transformer.wpe.weight": [P, C]}
    for i in range(L):
        p = f"transformer.h.{i}."
        shapes.update({
            p + "ln_1.weight": [C], p + "ln_1.bias": [C],
            p + "attn.c_attn.weight": [C, 3 * C], p + "attn.c_attn.bias": [3 * C],
            p + "attn.c_proj.weight": [C, C], p + "attn.c_proj.bias": [C],
            p + "ln_2.weight": [C], p + "ln_2.bias": [C],
            p + "mlp.c_fc.weight": [C, F], p + "mlp.c_fc.bias": [F],
            p + "mlp.c_proj.weight": [F, C], p + "mlp.c_proj.bias": [C],
        })
    shapes["transformer.ln_f.weight"] = [C]
    shapes["transformer.ln_f.bias"] = [C]
    return shapes


def check_checkpoint(d):
    cfg_path = os.path.join(d, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    want = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "activation_function": "gelu_new",
            "tie_word_embeddings": True, "torch_dtype": "float32"}
    for k, v in want.items():
        if cfg.get(k) != v:
            fail(f"{cfg_path}: {k} is {cfg.get(k)!r}, expected {v!r}")
    for k in ("n_layer", "n_head", "n_embd", "n_positions", "n_ctx", "vocab_size", "layer_norm_epsilon",
              "initializer_range", "resid_pdrop", "embd_pdrop", "attn_pdrop", "bos_token_id", "eos_token_id"):
        if k not in cfg:
            fail(f"{cfg_path}: key {k} missing")
    if cfg["n_embd"] % cfg["n_head"] != 0:
        fail(f"{cfg_path}: n_embd {cfg['n_embd']} not divisible by n_head {cfg['n_head']}")

    shapes = gpt2_lm_head_state_dict_shapes(cfg)
    model_path = os.path.join(d, "model.safetensors")
    metadata, tensors = read_safetensors(model_path)
    if metadata.get("format") != "pt":
        fail(f"{model_path}: metadata {metadata}, transformers expects format 'pt'")
    names = set(tensors) - {"lm_head.weight"}
    if names != set(shapes):
        fail(f"{model_path}: missing {sorted(set(shapes) - names)[:5]}, unexpected {sorted(names - set(shapes))[:5]}")
    state_dict = {}
    for name, shape in shapes.items():
        dtype, t = tensors[name]
        if list(t.shape) != shape or dtype != "F32":
            fail(f"{model_path}: {name} is {dtype} {list(t.shape)}, GPT2LMHeadModel expects F32 {shape}")
        state_dict[name] = t
    if not all(torch.isfinite(t).all() for t in state_dict.values()):
        fail(f"{model_path}: non-finite values")
    result = {"model": summary(metadata, tensors)}

    opt_path = os.path.join(d, "optimizer.safetensors")
    if os.path.exists(opt_path):
        ometa, otensors = read_safetensors(opt_path)
        want_names = {f"{p}.{n}" for p in ("exp_avg", "exp_avg_sq") for n in shapes}
        if set(otensors) != want_names:
            fail(f"{opt_path}: names differ: missing {sorted(want_names - set(otensors))[:5]}, "
                 f"unexpected {sorted(set(otensors) - want_names)[:5]}")
        for name, (dtype, t) in otensors.items():
            base = name.split(".", 1)[1]
            if list(t.shape) != shapes[base] or dtype != "F32":
                fail(f"{opt_path}: {name} is {dtype} {list(t.shape)}, expected F32 {shapes[base]}")
        result["optimizer"] = summary(ometa, otensors)
    with open(os.path.join(d, "trainer.json")) as f:
        result["trainer"] = json.load(f)
    return result


def main(argv):
    if len(argv) == 2:
        print(json.dumps(summary(*read_safetensors(argv[1]))))
    elif len(argv) == 3 and argv[1] == "--checkpoint":
        print(json.dumps(check_checkpoint(argv[2])))
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main(sys.argv)
