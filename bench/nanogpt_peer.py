#!/usr/bin/python3
"""nanoGPT-style PyTorch peer for `weft bench --backend cuda` (the GPU checklist's speed peer).

  python3 bench/nanogpt_peer.py --model gpt2-124m --batch 16 --seq 1024 --steps 20 --warmup 5 \
      [--device cuda] [--dtype bf16|fp32] [--no-compile] [--format json|text]

The model is written here in the style of nanoGPT's model.py (read to learn, not copied): GPT-2
blocks with pre-LayerNorm, fused qkv projection, F.scaled_dot_product_attention(is_causal=True)
(flash attention on the GPU), tanh-GELU MLP, tied embedding/head, vocabulary padded to 50304,
N(0, 0.02) init with the residual projections scaled by 1/sqrt(2L). A training step is what
nanoGPT's train.py does on one GPU: forward and mean cross-entropy under bf16 autocast
(--dtype bf16; fp32 parameters and optimizer state), backward, clip_grad_norm_(1.0), fused
AdamW (lr 6e-4, betas 0.9/0.95, weight decay 0.1 on matrices), zero_grad(set_to_none=True);
torch.compile on the model unless --no-compile; TF32 off for fp32 matrix products (as weft's
strict fp32). Random tokens from the real vocabulary, fixed seed. --warmup steps (compilation
happens there) are not timed; then --steps steps are timed one by one, synchronising the device
after each.

Prints one JSON line on stdout, the shape of `weft bench` and bench/torch_peer.py:
  {"impl": "torch-nanogpt", "model", "batch", "seq", "device", "dtype", "compile",
   "ms_per_step" (median), "tokens_per_s", "model_flops_per_s", "model_flops_per_token", ...}
with torch_peer.py's model FLOPs per token (PaLM convention), so MFU compares like for like.
"""

import argparse
import json
import math
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch_peer import PRESETS, VOCAB, VOCAB_PADDED, model_flops_per_token  # noqa: E402

HAS_SDPA = hasattr(F, "scaled_dot_product_attention")


class SelfAttention(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.nh = NH
        self.qkv = nn.Linear(C, 3 * C)
        self.proj = nn.Linear(C, C)

    def forward(self, x):  # x (B,T,C)
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.nh, C // self.nh).transpose(1, 2) for t in (q, k, v))  # (B,NH,T,hs)
        if HAS_SDPA:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # torch < 2.0 (no SDPA): the same causal attention written out, for CPU checks only
            att = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            y = att.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(C), SelfAttention(C, NH)
        self.ln2 = nn.LayerNorm(C)
        self.fc, self.fc_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, NH, C, ctx):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB_PADDED, C), nn.Embedding(ctx, C)
        self.blocks = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        self.head = nn.Linear(C, VOCAB_PADDED, bias=False)
        self.head.weight = self.wte.weight  # tied
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * L) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):  # idx, targets (B,T)
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.view(-1))


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=sorted(PRESETS), default="gpt2-124m")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    ap.add_argument("--no-compile", action="store_true", help="eager (torch.compile off)")
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--format", choices=["json", "text"], default="json")
    args = ap.parse_args(argv)
    ctx = PRESETS[args.model][3]
    if args.seq > ctx:
        ap.error("--seq %d exceeds the context %d of model %s" % (args.seq, ctx, args.model))
    if args.batch < 1 or args.seq < 1 or args.steps < 1 or args.warmup < 0:
        ap.error("need --batch, --seq, --steps >= 1 and --warmup >= 0")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        ap.error("--device %s: torch sees no CUDA device" % args.device)
    return args


def make_step(model, opt, params, x, y, dtype, device):
    amp = torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16, enabled=dtype == "bf16")

    def step():
        with amp:
            loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    return step


def timed(step, args, sync):
    for _ in range(args.warmup):
        step()
    sync()
    times, losses = [], []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        loss = step()
        sync()
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
    return times, losses


def main(argv=None):
    args = parse(argv)
    torch.manual_seed(args.seed)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    L, NH, C, ctx = PRESETS[args.model]
    model = GPT(L, NH, C, ctx).to(args.device)
    params = list(model.parameters())
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    fused = args.device.startswith("cuda")
    extra = {"fused": True} if fused else {}  # fused AdamW is a CUDA kernel
    opt = torch.optim.AdamW(groups, lr=6e-4, betas=(0.9, 0.95), eps=1e-8, **extra)
    if not args.no_compile and not hasattr(torch, "compile"):
        sys.exit("nanogpt_peer: torch %s has no torch.compile; pass --no-compile" % torch.__version__)
    run = model if args.no_compile else torch.compile(model)
    g = torch.Generator().manual_seed(args.seed)
    tokens = torch.randint(0, VOCAB, (args.batch, args.seq + 1), generator=g).to(args.device)
    x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    times, losses = timed(make_step(run, opt, params, x, y, args.dtype, args.device), args, sync)
    med, tok = statistics.median(times), args.batch * args.seq
    fpt = model_flops_per_token(L, C, VOCAB_PADDED, args.seq)
    rec = {
        "impl": "torch-nanogpt", "model": args.model, "batch": args.batch, "seq": args.seq,
        "device": torch.cuda.get_device_name() if fused else args.device, "dtype": args.dtype,
        "compile": not args.no_compile, "attention": "sdpa" if HAS_SDPA else "explicit",
        "ms_per_step": round(med * 1e3, 3), "tokens_per_s": round(tok / med, 1),
        "model_flops_per_s": round(fpt * tok / med, 1), "model_flops_per_token": fpt,
        "ms_per_step_min": round(min(times) * 1e3, 3), "ms_per_step_max": round(max(times) * 1e3, 3),
        "steps": args.steps, "warmup": args.warmup, "params": sum(p.numel() for p in params),
        "loss_first": round(losses[0], 6), "loss_last": round(losses[-1], 6), "torch": torch.__version__,
    }
    if args.format == "json":
        print(json.dumps(rec), flush=True)
    else:
        print("torch-nanogpt %s B=%d T=%d %s: %.1f ms/step, %.0f tokens/s"
              % (args.model, args.batch, args.seq, args.dtype, rec["ms_per_step"], rec["tokens_per_s"]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
