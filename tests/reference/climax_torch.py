"""ClimaX (Nguyen et al. 2023) in plain PyTorch, written from weft's model contract
(/work/spec/climax_spec.md, "weft's ClimaX model") the way microsoft/ClimaX's
src/climax/arch.py builds it: one timm PatchEmbed (Conv2d(1, D, p, stride=p)) per variable,
a variable embedding, variable aggregation by nn.MultiheadAttention with one learned query,
a position embedding, a Linear(1, D) lead-time embedding of hours/100, timm pre-LN blocks,
a final LayerNorm, a head Linear+GELU, Linear+GELU, Linear, unpatchify by reshape + einsum,
and lat_weighted_mse.

This module is an independent reference for weft: it does not read or mirror weft's code.
It uses torch's own modules (nn.Conv2d, nn.MultiheadAttention, nn.Linear, nn.LayerNorm,
nn.GELU) and autograd, so its arithmetic shares nothing with the C++ model. The only
weft-specific part is the translation between the module's parameters and weft's tensor
names and (in, out) matrix layout (import_weft / export_weft).

Documented deviations from ClimaX (all fixed by weft's contract):
  GELU is the tanh approximation (nn.GELU(approximate="tanh")) in the blocks and the head;
  no dropout, no drop path; all V variables are inputs and outputs in a fixed order.

Shapes: B batch, V variables, H x W grid (latitude rows x longitude columns), p patch,
h = H/p, w = W/p, L = h*w (patch l = hi*w + wi), D width, NH heads, hd = D/NH, F MLP hidden.
"""

import os
import sys
from collections import OrderedDict

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2_torch import load_safetensors, save_safetensors  # noqa: E402,F401  (re-exported)

DECODER_DEPTH = 2   # the contract's head: Linear+GELU, Linear+GELU, Linear
LEAD_TIME_SCALE = 100.0  # the lead-time embedding sees hours / 100 (ClimaX's datasets)


def make_config(vars, img_h, img_w, patch, n_embd, n_layer, n_head, ffn=0, ln_eps=1e-5,
                decoder_depth=DECODER_DEPTH):
    """A config dict; ffn 0 means 4 * n_embd. Raises ValueError on inconsistent shapes."""
    c = {"vars": int(vars), "img_h": int(img_h), "img_w": int(img_w), "patch": int(patch),
         "n_embd": int(n_embd), "n_layer": int(n_layer), "n_head": int(n_head),
         "ffn": int(ffn) if ffn else 4 * int(n_embd), "ln_eps": float(ln_eps),
         "decoder_depth": int(decoder_depth)}
    for k in ("vars", "img_h", "img_w", "patch", "n_embd", "n_layer", "n_head", "ffn"):
        if c[k] < 1:
            raise ValueError("%s must be >= 1, got %d" % (k, c[k]))
    if c["img_h"] % c["patch"] or c["img_w"] % c["patch"]:
        raise ValueError("grid %d x %d is not divisible by the patch %d" % (c["img_h"], c["img_w"], c["patch"]))
    if c["n_embd"] % c["n_head"]:
        raise ValueError("n_embd %d is not divisible by n_head %d" % (c["n_embd"], c["n_head"]))
    if c["decoder_depth"] != DECODER_DEPTH:
        raise ValueError("decoder_depth %d: weft's contract has %d" % (c["decoder_depth"], DECODER_DEPTH))
    if not c["ln_eps"] > 0:
        raise ValueError("ln_eps must be > 0, got %r" % c["ln_eps"])
    c["h"], c["w"] = c["img_h"] // c["patch"], c["img_w"] // c["patch"]
    c["L"] = c["h"] * c["w"]
    return c


def weft_param_shapes(c):
    """weft's parameter tensors in flat-buffer order: OrderedDict name -> shape (matrices (in, out))."""
    V, p, D, L, F = c["vars"], c["patch"], c["n_embd"], c["L"], c["ffn"]
    s = OrderedDict()
    s["token_embeds.weight"] = (V, p * p, D)
    s["token_embeds.bias"] = (V, D)
    s["var_embed"] = (V, D)
    s["var_query"] = (D,)
    s["var_agg.q.weight"] = (D, D)
    s["var_agg.q.bias"] = (D,)
    s["var_agg.kv.weight"] = (D, 2 * D)
    s["var_agg.kv.bias"] = (2 * D,)
    s["var_agg.out_proj.weight"] = (D, D)
    s["var_agg.out_proj.bias"] = (D,)
    s["pos_embed"] = (L, D)
    s["lead_time_embed.weight"] = (1, D)
    s["lead_time_embed.bias"] = (D,)
    for l in range(c["n_layer"]):
        b = "blocks.%d." % l
        s[b + "norm1.weight"] = (D,)
        s[b + "norm1.bias"] = (D,)
        s[b + "attn.qkv.weight"] = (D, 3 * D)
        s[b + "attn.qkv.bias"] = (3 * D,)
        s[b + "attn.proj.weight"] = (D, D)
        s[b + "attn.proj.bias"] = (D,)
        s[b + "norm2.weight"] = (D,)
        s[b + "norm2.bias"] = (D,)
        s[b + "mlp.fc1.weight"] = (D, F)
        s[b + "mlp.fc1.bias"] = (F,)
        s[b + "mlp.fc2.weight"] = (F, D)
        s[b + "mlp.fc2.bias"] = (D,)
    s["norm.weight"] = (D,)
    s["norm.bias"] = (D,)
    s["head.0.weight"] = (D, D)
    s["head.0.bias"] = (D,)
    s["head.2.weight"] = (D, D)
    s["head.2.bias"] = (D,)
    s["head.4.weight"] = (D, V * p * p)
    s["head.4.bias"] = (V * p * p,)
    return s


# AdamW weight decay (decoupled), by weft name. weft's rule for the GPT is "matrices and
# embedding tables decay; biases and LayerNorm parameters do not". For ClimaX that is:
#   decay:    token_embeds.weight, var_embed, var_agg.q.weight, var_agg.kv.weight,
#             var_agg.out_proj.weight, pos_embed, lead_time_embed.weight,
#             blocks.{l}.attn.qkv.weight, blocks.{l}.attn.proj.weight,
#             blocks.{l}.mlp.fc1.weight, blocks.{l}.mlp.fc2.weight,
#             head.0.weight, head.2.weight, head.4.weight
#   no decay: every *.bias (token_embeds.bias too, although it is (V, D): it is V biases),
#             norm1/norm2/norm weights, and var_query (one D vector, a learned input like a bias).
# (ClimaX's own configure_optimizers decays everything except var_embed and pos_embed; weft
# keeps its GPT convention instead.)
_DECAY_FIXED = ("token_embeds.weight", "var_embed", "var_agg.q.weight", "var_agg.kv.weight",
                "var_agg.out_proj.weight", "pos_embed", "lead_time_embed.weight",
                "head.0.weight", "head.2.weight", "head.4.weight")
_DECAY_BLOCK = ("attn.qkv.weight", "attn.proj.weight", "mlp.fc1.weight", "mlp.fc2.weight")


def weight_decays(name):
    """Whether weft's AdamW decays the tensor `name` (see the list above)."""
    if name in _DECAY_FIXED:
        return True
    if name.startswith("blocks."):
        rest = name.split(".", 2)[2]
        return rest in _DECAY_BLOCK
    return False


# ---------------------------------------------------------------------------
# the model, as ClimaX's arch.py (+ timm's PatchEmbed and Block) build it
# ---------------------------------------------------------------------------

class PatchEmbed(nn.Module):
    """timm PatchEmbed(img_size, patch_size, in_chans=1, embed_dim): Conv2d with stride p,
    then flatten(2).transpose(1, 2): (B, 1, H, W) -> (B, L, D), patches row-major."""

    def __init__(self, patch, dim):
        super().__init__()
        self.proj = nn.Conv2d(1, dim, kernel_size=patch, stride=patch, bias=True)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)


class Attention(nn.Module):
    """timm Attention (qkv_bias=True), no mask, the explicit (non-fused) path."""

    def __init__(self, dim, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=True)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)                       # (B, NH, N, hd) each
        attn = (q * self.scale) @ k.transpose(-2, -1)  # (B, NH, N, N)
        attn = attn.softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(B, N, C)
        return self.proj(x)


class Mlp(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU(approximate="tanh")
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    """timm Block: pre-LN, no layer scale, no drop path."""

    def __init__(self, dim, num_heads, hidden, eps):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=eps)
        self.attn = Attention(dim, num_heads)
        self.norm2 = nn.LayerNorm(dim, eps=eps)
        self.mlp = Mlp(dim, hidden)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        x = x + self.mlp(self.norm2(x))
        return x


def unpatchify(x, V, H, W, p):
    """ClimaX's unpatchify: (B, L, p*p*V) -> (B, V, H, W); channel (i*p + j)*V + c of patch
    (hi, wi) is variable c at pixel (hi*p + i, wi*p + j)."""
    h, w = H // p, W // p
    assert h * w == x.shape[1]
    x = x.reshape(x.shape[0], h, w, p, p, V)
    x = torch.einsum("nhwpqc->nchpwq", x)
    return x.reshape(x.shape[0], V, h * p, w * p)


def patchify(imgs, p):
    """The inverse of unpatchify (MAE's patchify with the channel last): (B, V, H, W) ->
    (B, L, p*p*V). Used by the selftest only."""
    B, V, H, W = imgs.shape
    h, w = H // p, W // p
    x = imgs.reshape(B, V, h, p, w, p)
    x = torch.einsum("nchpwq->nhwpqc", x)
    return x.reshape(B, h * w, p * p * V)


def lat_weights(lat_deg, dtype=torch.float64):
    """ClimaX's latitude weights cos(lat) / mean(cos(lat)) (computed in float64)."""
    w = np.cos(np.deg2rad(np.asarray(lat_deg, dtype=np.float64)))
    w = w / w.mean()
    return torch.from_numpy(w).to(dtype)


def lat_weighted_mse(pred, y, lat_deg):
    """ClimaX's lat_weighted_mse(...)["loss"]: mean over (B, V, H, W) of w_lat[y] (pred - y)^2."""
    error = (pred - y) ** 2                                        # (B, V, H, W)
    w_lat = lat_weights(lat_deg, error.dtype).unsqueeze(0).unsqueeze(-1)  # (1, H, 1)
    return (error * w_lat.unsqueeze(1)).mean(dim=1).mean()


class ClimaX(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        V, p, D, NH = c["vars"], c["patch"], c["n_embd"], c["n_head"]
        self.token_embeds = nn.ModuleList([PatchEmbed(p, D) for _ in range(V)])
        self.var_embed = nn.Parameter(torch.zeros(1, V, D))
        self.var_query = nn.Parameter(torch.zeros(1, 1, D))
        self.var_agg = nn.MultiheadAttention(D, NH, batch_first=True)
        self.pos_embed = nn.Parameter(torch.zeros(1, c["L"], D))
        self.lead_time_embed = nn.Linear(1, D)
        self.blocks = nn.ModuleList([Block(D, NH, c["ffn"], c["ln_eps"]) for _ in range(c["n_layer"])])
        self.norm = nn.LayerNorm(D, eps=c["ln_eps"])
        head = []
        for _ in range(c["decoder_depth"]):
            head.append(nn.Linear(D, D))
            head.append(nn.GELU(approximate="tanh"))
        head.append(nn.Linear(D, V * p * p))
        self.head = nn.Sequential(*head)

    def aggregate_variables(self, x):
        """ClimaX: (B, V, L, D) -> (B, L, D), one query attending over the V tokens of a patch."""
        b, _, l, _ = x.shape
        x = torch.einsum("bvld->blvd", x)
        x = x.flatten(0, 1)                                            # (B*L, V, D)
        var_query = self.var_query.repeat_interleave(x.shape[0], dim=0)  # (B*L, 1, D)
        x, _ = self.var_agg(var_query, x, x, need_weights=False)       # (B*L, 1, D)
        x = x.squeeze(1)
        return x.unflatten(0, (b, l))                                  # (B, L, D)

    def forward_encoder(self, x, lead_hours):
        V = self.c["vars"]
        embeds = [self.token_embeds[i](x[:, i:i + 1]) for i in range(V)]  # V x (B, L, D)
        x = torch.stack(embeds, dim=1)                                  # (B, V, L, D)
        x = x + self.var_embed.unsqueeze(2)                             # (1, V, 1, D)
        x = self.aggregate_variables(x)
        x = x + self.pos_embed
        lead_times = lead_hours / LEAD_TIME_SCALE
        x = x + self.lead_time_embed(lead_times.unsqueeze(-1)).unsqueeze(1)  # (B, 1, D)
        for blk in self.blocks:
            x = blk(x)
        return self.norm(x)

    def forward(self, x, lead_hours):
        """x (B, V, H, W), lead_hours (B) -> prediction (B, V, H, W)."""
        c = self.c
        out = self.head(self.forward_encoder(x, lead_hours))  # (B, L, V*p*p)
        return unpatchify(out, c["vars"], c["img_h"], c["img_w"], c["patch"])

    def loss(self, x, y, lead_hours, lat_deg):
        return lat_weighted_mse(self(x, lead_hours), y, lat_deg)


# ---------------------------------------------------------------------------
# weft names and (in, out) layout <-> the module's parameters
# ---------------------------------------------------------------------------

def _module_views(m):
    """weft name -> (getter, setter) over the module: getter(f) applies f (the parameter or its
    gradient) to the module tensor(s) and returns the weft-shaped view; setter(t) copies a
    weft-shaped tensor into the module (under no_grad)."""
    c = m.c
    V, p, D = c["vars"], c["patch"], c["n_embd"]
    ops = OrderedDict()

    def lin(name, mod):  # nn.Linear weight (out, in) <-> weft (in, out)
        ops[name + ".weight"] = (lambda f: f(mod.weight).t(),
                                 lambda t: mod.weight.copy_(t.t()))
        ops[name + ".bias"] = (lambda f: f(mod.bias), lambda t: mod.bias.copy_(t))

    # conv.weight[d, 0, i, j] = W[v, i*p + j, d]
    ops["token_embeds.weight"] = (
        lambda f: torch.stack([f(m.token_embeds[v].proj.weight).reshape(D, p * p).t() for v in range(V)]),
        lambda t: [m.token_embeds[v].proj.weight.copy_(t[v].t().reshape(D, 1, p, p)) for v in range(V)])
    ops["token_embeds.bias"] = (
        lambda f: torch.stack([f(m.token_embeds[v].proj.bias) for v in range(V)]),
        lambda t: [m.token_embeds[v].proj.bias.copy_(t[v]) for v in range(V)])
    ops["var_embed"] = (lambda f: f(m.var_embed)[0], lambda t: m.var_embed.copy_(t[None]))
    ops["var_query"] = (lambda f: f(m.var_query).reshape(D), lambda t: m.var_query.copy_(t.reshape(1, 1, D)))
    a = m.var_agg
    # in_proj_weight (3D, D) rows [q | k | v], y = x @ in_proj_weight.T + in_proj_bias
    ops["var_agg.q.weight"] = (lambda f: f(a.in_proj_weight)[:D].t(), lambda t: a.in_proj_weight[:D].copy_(t.t()))
    ops["var_agg.q.bias"] = (lambda f: f(a.in_proj_bias)[:D], lambda t: a.in_proj_bias[:D].copy_(t))
    ops["var_agg.kv.weight"] = (lambda f: f(a.in_proj_weight)[D:].t(), lambda t: a.in_proj_weight[D:].copy_(t.t()))
    ops["var_agg.kv.bias"] = (lambda f: f(a.in_proj_bias)[D:], lambda t: a.in_proj_bias[D:].copy_(t))
    lin("var_agg.out_proj", a.out_proj)
    ops["pos_embed"] = (lambda f: f(m.pos_embed)[0], lambda t: m.pos_embed.copy_(t[None]))
    lin("lead_time_embed", m.lead_time_embed)
    for l, blk in enumerate(m.blocks):
        b = "blocks.%d." % l
        lin(b + "norm1", blk.norm1)   # LayerNorm weight/bias are vectors: .t() is a no-op on 1-D
        lin(b + "attn.qkv", blk.attn.qkv)
        lin(b + "attn.proj", blk.attn.proj)
        lin(b + "norm2", blk.norm2)
        lin(b + "mlp.fc1", blk.mlp.fc1)
        lin(b + "mlp.fc2", blk.mlp.fc2)
    lin("norm", m.norm)
    lin("head.0", m.head[0])
    lin("head.2", m.head[2])
    lin("head.4", m.head[4])
    return ops


def import_weft(m, P):
    """Sets the module's parameters from {weft name: array in weft's shape}. Every name of
    weft_param_shapes must be present with its exact shape; nothing else may be."""
    want = weft_param_shapes(m.c)
    missing = [n for n in want if n not in P]
    extra = sorted(set(P) - set(want))
    if missing or extra:
        raise ValueError("parameters: missing %s, unexpected %s" % (missing, extra))
    for n, shape in want.items():
        if tuple(P[n].shape) != tuple(shape):
            raise ValueError("parameter %s has shape %s, expected %s" % (n, list(P[n].shape), list(shape)))
    ops = _module_views(m)
    dtype = next(m.parameters()).dtype
    with torch.no_grad():
        for n in want:
            ops[n][1](torch.as_tensor(np.ascontiguousarray(P[n])).to(dtype))


def export_weft(m, what="param"):
    """{weft name: float64 numpy array in weft's shape} of the parameters (what="param") or of
    their gradients (what="grad"; a parameter without a gradient is an error)."""
    def f(t):
        if what == "param":
            return t.detach()
        if t.grad is None:
            raise ValueError("a parameter has no gradient (not used in the forward?)")
        return t.grad.detach()
    ops = _module_views(m)
    out = OrderedDict()
    for n, shape in weft_param_shapes(m.c).items():
        v = ops[n][0](f).to(torch.float64).contiguous().numpy().copy()
        assert v.shape == tuple(shape), (n, v.shape, shape)
        out[n] = v
    return out


def export_grads(m):
    """The gradients under weft's names and (in, out) shapes, float64."""
    return export_weft(m, "grad")


def weft_param_groups(m, weight_decay):
    """torch.optim param groups with weft's decay list: [decay, no decay]. Every module
    parameter is in exactly one group; a module parameter that holds both kinds of weft
    tensor (in_proj_weight holds q and kv weights: both decay; in_proj_bias: neither) is
    checked to be consistent."""
    c = m.c
    by_param = {
        id(m.var_embed): ["var_embed"], id(m.var_query): ["var_query"], id(m.pos_embed): ["pos_embed"],
        id(m.var_agg.in_proj_weight): ["var_agg.q.weight", "var_agg.kv.weight"],
        id(m.var_agg.in_proj_bias): ["var_agg.q.bias", "var_agg.kv.bias"],
        id(m.var_agg.out_proj.weight): ["var_agg.out_proj.weight"],
        id(m.var_agg.out_proj.bias): ["var_agg.out_proj.bias"],
        id(m.lead_time_embed.weight): ["lead_time_embed.weight"],
        id(m.lead_time_embed.bias): ["lead_time_embed.bias"],
        id(m.norm.weight): ["norm.weight"], id(m.norm.bias): ["norm.bias"],
    }
    for v in range(c["vars"]):
        by_param[id(m.token_embeds[v].proj.weight)] = ["token_embeds.weight"]
        by_param[id(m.token_embeds[v].proj.bias)] = ["token_embeds.bias"]
    for l, blk in enumerate(m.blocks):
        b = "blocks.%d." % l
        for mod, nm in ((blk.norm1, "norm1"), (blk.attn.qkv, "attn.qkv"), (blk.attn.proj, "attn.proj"),
                        (blk.norm2, "norm2"), (blk.mlp.fc1, "mlp.fc1"), (blk.mlp.fc2, "mlp.fc2")):
            by_param[id(mod.weight)] = [b + nm + ".weight"]
            by_param[id(mod.bias)] = [b + nm + ".bias"]
    for i in (0, 2, 4):
        by_param[id(m.head[i].weight)] = ["head.%d.weight" % i]
        by_param[id(m.head[i].bias)] = ["head.%d.bias" % i]
    decay, no_decay = [], []
    for pn, prm in m.named_parameters():
        names = by_param[id(prm)]
        flags = {weight_decays(n) for n in names}
        if len(flags) != 1:
            raise ValueError("module parameter %s mixes decayed and undecayed weft tensors %s" % (pn, names))
        (decay if flags.pop() else no_decay).append(prm)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def build(c, dtype=torch.float64):
    m = ClimaX(c).to(dtype)
    m.eval()  # no dropout anywhere; eval also keeps nn.MultiheadAttention on its plain path
    return m
