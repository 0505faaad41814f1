"""GPT-2 in plain PyTorch, written from the definition of Hugging Face's
GPT2LMHeadModel (eval mode, no dropout), plus a plain-Python safetensors
reader/writer.

This module is an independent reference for weft: it does not read or mirror
weft's code. Shapes in comments use B batch, T sequence, C channels, NH heads,
hs head size, V vocabulary, L layers.

Parameter names are exactly Hugging Face's (``transformer.wte.weight`` ...), the
output head is tied to ``transformer.wte.weight`` (no ``lm_head`` parameter), and
linear layers use the Conv1D layout: weight (in, out), y = x @ W + b.
"""

import json
import math
import os
import struct

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# ---------------------------------------------------------------------------
# safetensors (plain Python: json + numpy + struct)
# ---------------------------------------------------------------------------

_ST_TO_NP = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U64": np.dtype("<u8"),
    "U32": np.dtype("<u4"),
    "U16": np.dtype("<u2"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}


def _st_dtype_name(dt):
    dt = np.dtype(dt)
    for name, ref in _ST_TO_NP.items():
        if dt.kind == ref.kind and dt.itemsize == ref.itemsize:
            return name
    raise ValueError("safetensors: unsupported numpy dtype %s" % dt)


def load_safetensors(path, with_metadata=False):
    """Reads a safetensors file. Returns {name: np.ndarray} (native byte order,
    C-contiguous, writable copies), and the metadata dict if with_metadata."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError("safetensors: %s is %d bytes, shorter than the 8-byte header size"
                         % (path, len(raw)))
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise ValueError("safetensors: %s header size %d exceeds file size %d"
                         % (path, n, len(raw)))
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    buf = memoryview(raw)[8 + n:]
    meta = header.pop("__metadata__", {}) or {}
    out = {}
    for name, info in header.items():
        st = info["dtype"]
        if st == "BF16":
            # no numpy bfloat16: widen to float32 (exact) by shifting the bits up
            shape = tuple(int(s) for s in info["shape"])
            b, e = (int(x) for x in info["data_offsets"])
            count = int(np.prod(shape, dtype=np.int64)) if shape else 1
            if not (0 <= b <= e <= len(buf)) or e - b != 2 * count:
                raise ValueError("safetensors: %s tensor %r offsets [%d, %d) do not fit shape %s BF16"
                                 % (path, name, b, e, list(shape)))
            bits = np.frombuffer(buf[b:e], dtype="<u2", count=count).astype(np.uint32) << 16
            out[name] = bits.view(np.float32).reshape(shape).copy()
            continue
        if st not in _ST_TO_NP:
            raise ValueError("safetensors: %s tensor %r has unsupported dtype %s"
                             % (path, name, st))
        dt = _ST_TO_NP[st]
        shape = tuple(int(s) for s in info["shape"])
        b, e = (int(x) for x in info["data_offsets"])
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if not (0 <= b <= e <= len(buf)) or e - b != count * dt.itemsize:
            raise ValueError("safetensors: %s tensor %r offsets [%d, %d) do not fit shape %s "
                             "dtype %s (buffer %d bytes)"
                             % (path, name, b, e, list(shape), st, len(buf)))
        arr = np.frombuffer(buf[b:e], dtype=dt, count=count).reshape(shape)
        out[name] = arr.astype(dt.newbyteorder("="), copy=True)
    if with_metadata:
        return out, meta
    return out


def save_safetensors(path, tensors, metadata=None):
    """Writes {name: np.ndarray} as safetensors. Tensors are laid out in sorted
    name order; the JSON header is padded with spaces to a multiple of 8 bytes."""
    header = {}
    chunks = []
    offset = 0
    for name in sorted(tensors):
        arr = np.asarray(tensors[name])
        st = _st_dtype_name(arr.dtype)
        le = _ST_TO_NP[st]
        data = np.ascontiguousarray(arr, dtype=le).tobytes()
        header[name] = {"dtype": st, "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hjson += b" " * ((-len(hjson)) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for c in chunks:
            f.write(c)
    os.replace(tmp, path)


# ---------------------------------------------------------------------------
# GPT-2
# ---------------------------------------------------------------------------

def gelu_new(x):
    """HF "gelu_new": 0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715*x^3)))."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def normalize_config(config):
    """Fills defaults of HF GPT2Config for the keys this model uses."""
    c = dict(config)
    c.setdefault("n_layer", 12)
    c.setdefault("n_head", 12)
    c.setdefault("n_embd", 768)
    c.setdefault("n_positions", c.get("n_ctx", 1024))
    c.setdefault("vocab_size", 50257)
    c.setdefault("layer_norm_epsilon", 1e-5)
    if c.get("n_inner") is None:
        c["n_inner"] = 4 * c["n_embd"]
    # HF options this reference does not implement: refuse rather than silently differ
    if c.get("activation_function", "gelu_new") != "gelu_new":
        raise ValueError("activation_function %r not supported (only gelu_new)" % c["activation_function"])
    if not c.get("scale_attn_weights", True) or c.get("scale_attn_by_inverse_layer_idx", False):
        raise ValueError("only scale_attn_weights=true, scale_attn_by_inverse_layer_idx=false supported")
    if c.get("tie_word_embeddings", True) is False:
        raise ValueError("tie_word_embeddings=false not supported (head is tied to wte)")
    if c["n_embd"] % c["n_head"] != 0:
        raise ValueError("n_embd %d is not divisible by n_head %d" % (c["n_embd"], c["n_head"]))
    return c


class Conv1D(nn.Module):
    """HF Conv1D: weight (in, out), y = x @ W + b."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_in, n_out))
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight).view(
            *x.shape[:-1], self.weight.shape[1])


class LayerNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.bias = nn.Parameter(torch.zeros(n))
        self.eps = eps

    def forward(self, x):
        return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, self.eps)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C = cfg["n_embd"]
        self.n_head = cfg["n_head"]
        self.c_attn = Conv1D(C, 3 * C)
        self.c_proj = Conv1D(C, C)

    def forward(self, x):
        # x is (B,T,C)
        B, T, C = x.shape
        NH = self.n_head
        hs = C // NH
        qkv = self.c_attn(x)                                   # (B,T,3C)
        q, k, v = qkv.split(C, dim=2)                          # each (B,T,C)
        q = q.view(B, T, NH, hs).permute(0, 2, 1, 3)           # (B,NH,T,hs)
        k = k.view(B, T, NH, hs).permute(0, 2, 1, 3)
        v = v.view(B, T, NH, hs).permute(0, 2, 1, 3)
        att = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(hs)   # (B,NH,T,T)
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~causal, float("-inf"))
        att = torch.softmax(att, dim=-1)
        y = torch.matmul(att, v)                               # (B,NH,T,hs)
        y = y.permute(0, 2, 1, 3).contiguous().view(B, T, C)   # merge heads
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C, Fh = cfg["n_embd"], cfg["n_inner"]
        self.c_fc = Conv1D(C, Fh)
        self.c_proj = Conv1D(Fh, C)

    def forward(self, x):
        return self.c_proj(gelu_new(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        eps = cfg["layer_norm_epsilon"]
        self.ln_1 = LayerNorm(cfg["n_embd"], eps)
        self.attn = Attention(cfg)
        self.ln_2 = LayerNorm(cfg["n_embd"], eps)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class Transformer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C = cfg["n_embd"]
        self.wte = nn.Embedding(cfg["vocab_size"], C)
        self.wpe = nn.Embedding(cfg["n_positions"], C)
        self.h = nn.ModuleList([Block(cfg) for _ in range(cfg["n_layer"])])
        self.ln_f = LayerNorm(C, cfg["layer_norm_epsilon"])


class GPT2(nn.Module):
    """GPT2LMHeadModel semantics (eval, no dropout), tied output head."""

    def __init__(self, config, seed=0):
        super().__init__()
        self.config = normalize_config(config)
        self.transformer = Transformer(self.config)
        self.init_weights(seed=seed)

    @torch.no_grad()
    def init_weights(self, seed=None, std=0.02):
        """GPT-2 style random init: normal(0, std) for matrices and embeddings,
        residual projections scaled by 1/sqrt(2L), zeros for biases, ones for
        LayerNorm weights. Only used when no checkpoint is loaded."""
        g = torch.Generator()
        g.manual_seed(0 if seed is None else seed)
        L = self.config["n_layer"]
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                s = std / math.sqrt(2 * L) if name.endswith("c_proj.weight") else std
                p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype) * s)
            elif ".ln" in name or name.startswith("transformer.ln_f"):
                p.fill_(1.0 if name.endswith("weight") else 0.0)
            else:
                p.zero_()

    def forward(self, idx, targets=None):
        # idx is (B,T) integer tokens; returns logits (B,T,V) and mean loss or None
        B, T = idx.shape
        if T > self.config["n_positions"]:
            raise ValueError("sequence length %d exceeds n_positions %d"
                             % (T, self.config["n_positions"]))
        tr = self.transformer
        pos = torch.arange(T, device=idx.device)
        x = tr.wte(idx) + tr.wpe(pos)[None, :, :]              # (B,T,C)
        for block in tr.h:
            x = block(x)
        x = tr.ln_f(x)
        logits = torch.matmul(x, tr.wte.weight.t())            # (B,T,V), tied head
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(B * T).long())
        return logits, loss


def expected_parameter_names(config):
    cfg = normalize_config(config)
    names = ["transformer.wte.weight", "transformer.wpe.weight"]
    for i in range(cfg["n_layer"]):
        p = "transformer.h.%d." % i
        names += [p + s for s in (
            "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
            "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
            "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias")]
    names += ["transformer.ln_f.weight", "transformer.ln_f.bias"]
    return names


def load_config(checkpoint_dir):
    with open(os.path.join(checkpoint_dir, "config.json")) as f:
        return normalize_config(json.load(f))


def load_model(checkpoint_dir, dtype=torch.float32):
    """Builds GPT2 from checkpoint_dir/config.json and loads
    checkpoint_dir/model.safetensors, or the shards listed in
    model.safetensors.index.json (HF names; lm_head.weight, the tied wte, is ignored;
    a missing "transformer." prefix is added; BF16/F16/F32/F64 are read exactly)."""
    cfg = load_config(checkpoint_dir)
    single = os.path.join(checkpoint_dir, "model.safetensors")
    index = os.path.join(checkpoint_dir, "model.safetensors.index.json")
    if os.path.exists(single) or not os.path.exists(index):
        tensors = load_safetensors(single)
    else:  # HF sharded layout: weight_map {name: shard file}
        with open(index) as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        tensors = {}
        for shard in shards:
            tensors.update(load_safetensors(os.path.join(checkpoint_dir, shard)))
    model = GPT2(cfg)
    state = {}
    for k, v in tensors.items():
        if k == "lm_head.weight":
            continue
        if k.endswith(".attn.bias") or k.endswith(".attn.masked_bias"):
            continue  # HF causal-mask buffers, not parameters
        key = k if k.startswith("transformer.") else "transformer." + k
        state[key] = torch.from_numpy(np.ascontiguousarray(v))
    want = dict(model.named_parameters())
    missing = sorted(set(want) - set(state))
    extra = sorted(set(state) - set(want))
    if missing or extra:
        raise ValueError("checkpoint %s: missing %s, unexpected %s" % (checkpoint_dir, missing, extra))
    with torch.no_grad():
        for k, p in want.items():
            t = state[k]
            if tuple(t.shape) != tuple(p.shape):
                raise ValueError("checkpoint %s: %s has shape %s, expected %s"
                                 % (checkpoint_dir, k, list(t.shape), list(p.shape)))
            p.copy_(t.to(torch.float64))
    return model.to(dtype)


def save_model(checkpoint_dir, model, dtype=np.float32):
    """Writes config.json (HF keys) and model.safetensors with HF names."""
    os.makedirs(checkpoint_dir, exist_ok=True)
    cfg = dict(model.config)
    cfg.setdefault("model_type", "gpt2")
    with open(os.path.join(checkpoint_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
    tensors = {k: p.detach().cpu().double().numpy().astype(dtype)
               for k, p in model.named_parameters()}
    save_safetensors(os.path.join(checkpoint_dir, "model.safetensors"), tensors,
                     metadata={"format": "pt"})
