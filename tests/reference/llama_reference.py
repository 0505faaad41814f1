#!/usr/bin/python3
"""Float64 PyTorch oracle for weft's decoder variants (Llama / GPT-NeoX blocks).

Written from the definitions of Hugging Face's LlamaForCausalLM (RMSNorm, rotary
positions with rotate_half and the llama3 frequency scaling, repeat_kv for
grouped-query attention, the SwiGLU MLP, an untied lm_head), GPT-2 (LayerNorm,
learned positions, the tanh GELU) and MPT (ALiBi as LLM Foundry's build_alibi_bias and
gen_slopes, a LayerNorm without bias, the exact GELU), on plain torch tensors; it does not read or mirror
weft's code. It reads a checkpoint folder in one of three formats: Hugging Face's
LlamaForCausalLM (config.json with "model_type": "llama", tensors model.layers.N.
self_attn.q_proj.weight ... in (out, in) layout), Hugging Face's GPTNeoXForCausalLM
("model_type": "gpt_neox", gpt_neox.layers.N.attention.query_key_value.weight (3C, C) with
q, k, v interleaved per head as GPTNeoXAttention views it, rotary_pct of each head turning,
use_parallel_residual), or weft's own (GPT-2 keys plus
weft.block, the variant; its fused tensors split by their published layout:
c_attn.weight (C, C + 2 KV) holds q | k | v columns (in, out: y = x @ W), c_fc.weight
(C, 2F) holds gate | up). Gradients and final weights are written under the file's names.

Usage:
  /usr/bin/python3 tests/reference/llama_reference.py --checkpoint DIR --batch FILE --out FILE \
      [--steps 5 --lr 1e-3 --beta1 0.9 --beta2 0.95 --eps 1e-8 --weight-decay 0.1]

Output (--out, safetensors, F64): loss, grad.<name>, losses, final.<name> (as
gpt2_reference.py: AdamW with decay on >= 2-dim tensors, constant lr, no clipping).
"""

import argparse
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2_torch import load_safetensors, save_safetensors  # noqa: E402


def read_config(folder):
    with open(os.path.join(folder, "config.json")) as f:
        j = json.load(f)
    if j.get("model_type") == "llama":
        C, NH = j["hidden_size"], j["num_attention_heads"]
        rs = j.get("rope_scaling") or {}
        return {
            "hf": True, "L": j["num_hidden_layers"], "NH": NH, "C": C, "hs": C // NH, "V": j["vocab_size"],
            "F": j["intermediate_size"], "eps": j["rms_norm_eps"], "position": "rope", "norm": "rmsnorm",
            "bias": j.get("attention_bias", False), "mlp": "swiglu", "KVH": j.get("num_key_value_heads") or NH,
            "tied": j.get("tie_word_embeddings", True), "rope_base": j.get("rope_theta", 10000.0),
            "rope_fraction": 1.0, "rope_scaling": rs.get("rope_type", "none"), "rope_factor": rs.get("factor", 1.0),
            "low": rs.get("low_freq_factor", 1.0), "high": rs.get("high_freq_factor", 4.0),
            "orig": rs.get("original_max_position_embeddings", 8192),
        }
    if j.get("model_type") == "gpt_neox":
        C, NH = j["hidden_size"], j["num_attention_heads"]
        rp = j.get("rope_parameters") or {}
        return {
            "hf": "neox", "L": j["num_hidden_layers"], "NH": NH, "C": C, "hs": C // NH, "V": j["vocab_size"],
            "F": j["intermediate_size"], "eps": j["layer_norm_eps"], "position": "rope", "norm": "layernorm",
            "bias": True, "mlp": "gelu_exact" if j.get("hidden_act", "gelu") == "gelu" else "gelu", "KVH": NH,
            "tied": j.get("tie_word_embeddings", False),
            "rope_base": rp.get("rope_theta", j.get("rotary_emb_base", 10000.0)),
            "rope_fraction": rp.get("partial_rotary_factor", j.get("rotary_pct", 0.25)),
            "rope_scaling": "none", "rope_factor": 1.0, "low": 1.0, "high": 4.0, "orig": 8192,
            "parallel": j.get("use_parallel_residual", True),
        }
    if j.get("model_type") == "mpt":
        C, NH = j["d_model"], j["n_heads"]
        return {
            "hf": "mpt", "L": j["n_layers"], "NH": NH, "C": C, "hs": C // NH, "V": j["vocab_size"],
            "F": int(j.get("expansion_ratio", 4) * C), "eps": j.get("layer_norm_epsilon", 1e-5),
            "position": "alibi", "norm": "layernorm", "bias": False, "mlp": "gelu_exact", "KVH": NH,
            "tied": True, "rope_base": 10000.0, "rope_fraction": 1.0, "rope_scaling": "none",
            "rope_factor": 1.0, "low": 1.0, "high": 4.0, "orig": 8192, "parallel": False,
        }
    b = j.get("weft", {}).get("block", {})
    rope = b.get("rope", {})
    C, NH = j["n_embd"], j["n_head"]
    return {
        "hf": False, "L": j["n_layer"], "NH": NH, "C": C, "hs": C // NH, "V": j["vocab_size"],
        "F": j["n_inner"] if j.get("n_inner") is not None else 4 * C,
        "eps": j["layer_norm_epsilon"],
        "position": b.get("position", "learned"), "norm": b.get("norm", "layernorm"),
        "bias": b.get("bias", True), "mlp": b.get("mlp", "gelu"),
        "KVH": b.get("n_kv_head", 0) or NH, "tied": b.get("tie_embeddings", True),
        "rope_base": rope.get("base", 10000.0), "rope_fraction": rope.get("fraction", 1.0),
        "rope_scaling": rope.get("scaling", "none"), "rope_factor": rope.get("factor", 1.0),
        "low": rope.get("low_freq_factor", 1.0), "high": rope.get("high_freq_factor", 4.0),
        "orig": rope.get("original_context", 8192), "parallel": b.get("parallel_residual", False),
    }


def inv_frequencies(cfg, rot):
    # transformers' _compute_default_rope_parameters, then _compute_llama3_parameters / linear.
    inv = 1.0 / (cfg["rope_base"] ** (torch.arange(0, rot, 2, dtype=torch.int64).float() / rot))
    if cfg["rope_scaling"] == "linear":
        inv = inv / cfg["rope_factor"]
    elif cfg["rope_scaling"] == "llama3":
        factor, low, high, old = cfg["rope_factor"], cfg["low"], cfg["high"], cfg["orig"]
        low_wavelen, high_wavelen = old / low, old / high
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > low_wavelen, inv / factor, inv)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
        inv = torch.where(medium, smoothed, scaled)
    return inv


def mpt_alibi_slopes(n_heads, alibi_bias_max=8):
    # LLM Foundry's gen_slopes: for the power of two n >= n_heads, 1 / 2^(k * max / n), k = 1..n;
    # otherwise the odd-indexed ones, then the even-indexed, cut to n_heads.
    n = 2 ** math.ceil(math.log2(n_heads))
    m = torch.arange(1, n + 1, dtype=torch.float32) * (alibi_bias_max / n)
    slopes = 1.0 / torch.pow(2, m)
    if n != n_heads:
        slopes = torch.cat([slopes[1::2], slopes[::2]])[:n_heads]
    return slopes.to(torch.float64)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def apply_rope(x, cos, sin, rot):
    # x (B, H, T, hs): the first rot dimensions turn (GPT-NeoX's partial rotary), the rest pass.
    xr, xp = x[..., :rot], x[..., rot:]
    return torch.cat((xr * cos + rotate_half(xr) * sin, xp), dim=-1)


def norm(x, w, b, cfg):
    if cfg["norm"] == "rmsnorm":
        var = x.pow(2).mean(-1, keepdim=True)
        return w * (x * torch.rsqrt(var + cfg["eps"]))
    return F.layer_norm(x, (x.shape[-1],), w, b, cfg["eps"])


def layer_weights(P, cfg, l):
    """Layer l's tensors in (in, out) layout: Hugging Face's (out, in) ones transposed, weft's
    fused ones split by columns."""
    C, F_, KV = cfg["C"], cfg["F"], cfg["KVH"] * cfg["hs"]
    if cfg["hf"] == "neox":
        g = lambda n: P["gpt_neox.layers.%d.%s" % (l, n)]  # noqa: E731
        NH, hs = cfg["NH"], cfg["hs"]
        # GPTNeoXAttention: query_key_value(x).view(..., NH, 3 hs).chunk(3): head h's rows
        # [3 h hs, 3 h hs + hs) are its q, the next hs its k, then its v.
        wqkv = g("attention.query_key_value.weight").view(NH, 3, hs, C)
        bqkv = g("attention.query_key_value.bias").view(NH, 3, hs)
        part = lambda x, i: x[:, i].reshape(NH * hs, *x.shape[3:])  # noqa: E731
        return {"ln1w": g("input_layernorm.weight"), "ln1b": g("input_layernorm.bias"),
                "ln2w": g("post_attention_layernorm.weight"), "ln2b": g("post_attention_layernorm.bias"),
                "wq": part(wqkv, 0).t(), "wk": part(wqkv, 1).t(), "wv": part(wqkv, 2).t(),
                "bq": part(bqkv, 0), "bk": part(bqkv, 1), "bv": part(bqkv, 2),
                "wo": g("attention.dense.weight").t(), "bo": g("attention.dense.bias"),
                "wg": g("mlp.dense_h_to_4h.weight").t(), "wu": None, "bg": g("mlp.dense_h_to_4h.bias"), "bu": None,
                "wd": g("mlp.dense_4h_to_h.weight").t(), "bd": g("mlp.dense_4h_to_h.bias")}
    if cfg["hf"] == "mpt":
        # MptForCausalLM: Wqkv (3C, C) rows q | k | v; no biases anywhere (LayerNorms included).
        g = lambda n: P["transformer.blocks.%d.%s" % (l, n)]  # noqa: E731
        wqkv = g("attn.Wqkv.weight")
        return {"ln1w": g("norm_1.weight"), "ln1b": None, "ln2w": g("norm_2.weight"), "ln2b": None,
                "wq": wqkv[:C].t(), "wk": wqkv[C:2 * C].t(), "wv": wqkv[2 * C:].t(),
                "bq": None, "bk": None, "bv": None, "wo": g("attn.out_proj.weight").t(), "bo": None,
                "wg": g("ffn.up_proj.weight").t(), "wu": None, "bg": None, "bu": None,
                "wd": g("ffn.down_proj.weight").t(), "bd": None}
    if cfg["hf"]:
        g = lambda n: P.get("model.layers.%d.%s" % (l, n))  # noqa: E731
        t = lambda x: None if x is None else x.t()  # noqa: E731
        return {"ln1w": g("input_layernorm.weight"), "ln1b": None, "ln2w": g("post_attention_layernorm.weight"),
                "ln2b": None, "wq": t(g("self_attn.q_proj.weight")), "wk": t(g("self_attn.k_proj.weight")),
                "wv": t(g("self_attn.v_proj.weight")), "bq": g("self_attn.q_proj.bias"),
                "bk": g("self_attn.k_proj.bias"), "bv": g("self_attn.v_proj.bias"), "wo": t(g("self_attn.o_proj.weight")),
                "bo": g("self_attn.o_proj.bias"), "wg": t(g("mlp.gate_proj.weight")), "wu": t(g("mlp.up_proj.weight")),
                "bg": g("mlp.gate_proj.bias"), "bu": g("mlp.up_proj.bias"), "wd": t(g("mlp.down_proj.weight")),
                "bd": g("mlp.down_proj.bias")}
    p = lambda n: P.get("transformer.h.%d.%s" % (l, n))  # noqa: E731
    wqkv, bqkv, wfc, bfc = p("attn.c_attn.weight"), p("attn.c_attn.bias"), p("mlp.c_fc.weight"), p("mlp.c_fc.bias")
    cols = lambda x, a, b: None if x is None else x[..., a:b]  # noqa: E731
    swiglu = cfg["mlp"] == "swiglu"
    return {"ln1w": p("ln_1.weight"), "ln1b": p("ln_1.bias"), "ln2w": p("ln_2.weight"), "ln2b": p("ln_2.bias"),
            "wq": cols(wqkv, 0, C), "wk": cols(wqkv, C, C + KV), "wv": cols(wqkv, C + KV, C + 2 * KV),
            "bq": cols(bqkv, 0, C), "bk": cols(bqkv, C, C + KV), "bv": cols(bqkv, C + KV, C + 2 * KV),
            "wo": p("attn.c_proj.weight"), "bo": p("attn.c_proj.bias"),
            "wg": cols(wfc, 0, F_) if swiglu else wfc, "wu": cols(wfc, F_, 2 * F_) if swiglu else None,
            "bg": cols(bfc, 0, F_) if swiglu else bfc, "bu": cols(bfc, F_, 2 * F_) if swiglu else None,
            "wd": p("mlp.c_proj.weight"), "bd": p("mlp.c_proj.bias")}


def linear(x, w, b):
    return x @ w if b is None else x @ w + b


def forward(P, cfg, idx, targets):
    B, T = idx.shape
    C, NH, KVH, hs, Fh = cfg["C"], cfg["NH"], cfg["KVH"], cfg["hs"], cfg["F"]
    KV = KVH * hs
    hf = cfg["hf"]
    wte = {"neox": "gpt_neox.embed_in.weight", "mpt": "transformer.wte.weight", True: "model.embed_tokens.weight",
           False: "transformer.wte.weight"}[hf]
    x = P[wte][idx]
    if cfg["position"] == "learned":
        x = x + P["transformer.wpe.weight"][torch.arange(T)]
    rot = int(hs * cfg["rope_fraction"]) if cfg["position"] == "rope" else 0
    if rot:
        freqs = torch.arange(T, dtype=torch.float32)[:, None] * inv_frequencies(cfg, rot)[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().to(torch.float64), emb.sin().to(torch.float64)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(cfg["L"]):
        w = layer_weights(P, cfg, l)
        h = norm(x, w["ln1w"], w["ln1b"], cfg)
        q = linear(h, w["wq"], w["bq"]).view(B, T, NH, hs).transpose(1, 2)
        k = linear(h, w["wk"], w["bk"]).view(B, T, KVH, hs).transpose(1, 2)
        v = linear(h, w["wv"], w["bv"]).view(B, T, KVH, hs).transpose(1, 2)
        if rot:
            q, k = apply_rope(q, cos, sin, rot), apply_rope(k, cos, sin, rot)
        # repeat_kv: kv head j serves query heads j * NH/KVH ... (j + 1) * NH/KVH - 1
        k = k.repeat_interleave(NH // KVH, dim=1)
        v = v.repeat_interleave(NH // KVH, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        if cfg["position"] == "alibi":
            # MPT's build_alibi_bias (causal): slopes[h] * (key position - (T - 1)) added to the scores.
            bias = torch.arange(1 - T, 1, dtype=torch.float64).view(1, 1, 1, T)
            att = att + mpt_alibi_slopes(NH).view(1, NH, 1, 1) * bias
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        attn_out = linear((att @ v).transpose(1, 2).reshape(B, T, C), w["wo"], w["bo"])
        # GPT-NeoX's use_parallel_residual: both branches read the block's input.
        h = norm(x, w["ln2w"], w["ln2b"], cfg)
        if not cfg.get("parallel", False):
            x = x + attn_out
            h = norm(x, w["ln2w"], w["ln2b"], cfg)
        u = linear(h, w["wg"], w["bg"])
        if cfg["mlp"] == "swiglu":
            a = F.silu(u) * linear(h, w["wu"], w["bu"])
        elif cfg["mlp"] == "gelu_exact":  # x Phi(x), MPT's nn.GELU(approximate="none"), Pythia's "gelu"
            a = 0.5 * u * (1.0 + torch.erf(u / math.sqrt(2.0)))
        else:
            a = 0.5 * u * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (u + 0.044715 * u.pow(3))))
        x = x + linear(a, w["wd"], w["bd"])
        if cfg.get("parallel", False):
            x = x + attn_out
    if hf == "neox":
        x = norm(x, P["gpt_neox.final_layer_norm.weight"], P["gpt_neox.final_layer_norm.bias"], cfg)
        head = P[wte] if cfg["tied"] else P["embed_out.weight"]
    elif hf == "mpt":
        x = norm(x, P["transformer.norm_f.weight"], None, cfg)
        head = P[wte]
    elif hf:
        x = norm(x, P["model.norm.weight"], None, cfg)
        head = P["model.embed_tokens.weight"] if cfg["tied"] else P["lm_head.weight"]
    else:
        x = norm(x, P["transformer.ln_f.weight"], P.get("transformer.ln_f.bias"), cfg)
        head = P["transformer.wte.weight"] if cfg["tied"] else P["lm_head.weight"]
    logits = x @ head.t()
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--batch", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.95)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    args = ap.parse_args(argv)
    torch.set_default_dtype(torch.float64)
    cfg = read_config(args.checkpoint)
    raw = load_safetensors(os.path.join(args.checkpoint, "model.safetensors"))
    P = {n: torch.tensor(a.astype(np.float64), requires_grad=True) for n, a in raw.items()}
    batch = load_safetensors(args.batch)
    inputs = torch.from_numpy(batch["inputs"].astype(np.int64))
    targets = torch.from_numpy(batch["targets"].astype(np.int64))
    if inputs.ndim == 2:
        inputs, targets = inputs[None], targets[None]
    S = inputs.shape[0]
    names = sorted(P)
    out = {}
    loss = forward(P, cfg, inputs[0], targets[0])
    loss.backward()
    out["loss"] = np.array([loss.item()], dtype=np.float64)
    for n in names:
        out["grad." + n] = P[n].grad.detach().numpy().copy()
    decay = [P[n] for n in names if P[n].dim() >= 2]
    no_decay = [P[n] for n in names if P[n].dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(args.beta1, args.beta2), eps=args.eps)
    losses = []
    for k in range(args.steps):
        opt.zero_grad(set_to_none=True)
        loss = forward(P, cfg, inputs[k % S], targets[k % S])
        loss.backward()
        losses.append(loss.item())
        opt.step()
    out["losses"] = np.array(losses, dtype=np.float64)
    for n in names:
        out["final." + n] = P[n].detach().numpy().copy()
    save_safetensors(args.out, out, metadata={"generator": "tests/reference/llama_reference.py"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
