#!/usr/bin/python3
"""nanoGPT-style PyTorch peer: the GPU checklist's speed peer, and weft's CPU peer (PyTorch 2.x).

  python3 bench/nanogpt_peer.py --model gpt2-124m --batch 16 --seq 1024 --steps 20 --warmup 5 \
      [--device cuda] [--dtype bf16|fp32] [--no-compile] [--format json|text]
  .venv-peers/bin/python bench/nanogpt_peer.py --device cpu --model tiny --batch 8 --seq 256 \
      --threads 2 --steps 10 --warmup 2 --lr 1e-4 --modes eager,compile,bf16 [--kernels]

The model is written here in the style of nanoGPT's model.py (read to learn, not copied): GPT-2
blocks with pre-LayerNorm, fused qkv projection, F.scaled_dot_product_attention(is_causal=True)
(flash attention on the GPU), tanh-GELU MLP, tied embedding/head, vocabulary padded to 50304,
N(0, 0.02) init with the residual projections scaled by 1/sqrt(2L). A training step is what
nanoGPT's train.py does on one device: forward and mean cross-entropy (under bf16 autocast for
bf16; fp32 parameters and optimizer state), backward, clip_grad_norm_(1.0), AdamW (lr --lr,
betas 0.9/0.95, eps 1e-8, weight decay 0.1 on tensors of >= 2 dims; fused when this torch has
the fused kernel for the device: CUDA, and the CPU from torch 2.4), zero_grad(set_to_none=True);
TF32 off for fp32 matrix products (as weft's strict fp32). Random tokens from the real
vocabulary, fixed seed. --warmup steps (compilation happens in the first) are not timed; then
--steps steps are timed one by one, synchronising the device after each.

Modes. Without --modes, one run: --dtype, compiled unless --no-compile. --modes runs each named
mode in turn in this process (a fresh model from the same seed each), one JSON line per mode:
  eager          fp32, eager
  compile        fp32, torch.compile(model)
  bf16           torch.autocast(device, dtype=torch.bfloat16), eager
  bf16-compile   bf16 autocast, torch.compile(model)
--threads N sets torch.set_num_threads(N) (0: torch's default). --max-seconds S caps a slow mode
(bf16 autocast on a CPU without native bf16 products takes minutes a step): its warm-up stops
after its first real step (a compiled mode's second) when that step times --warmup + --steps
exceeds S, and its timed steps once they took S in all (at least 1 is timed); "steps" and
"warmup" in the JSON line say how many ran, "capped" whether fewer than --steps were timed.

Prints one JSON line per run on stdout (nothing else goes to stdout), the shape of `weft bench`
and bench/torch_peer.py:
  {"impl": "torch-nanogpt", "mode", "model", "batch", "seq", "threads", "device", "dtype",
   "compile", "ms_per_step" (median), "tokens_per_s", "model_flops_per_s",
   "model_flops_per_token", "steps", "warmup", "capped", "warmup_s" (each warm-up step),
   "compile_s" (compiled modes: the first step's time less the median step), "kernels", ...}
with torch_peer.py's model FLOPs per token (PaLM convention), so MFU compares like for like.
"kernels" names what ran: torch's version, CPU capability (ATen's vector ISA), whether MKL and
oneDNN (mkldnn) are built in and whether oneDNN takes bf16 on this CPU, the BLAS/LAPACK/MKL/
oneDNN lines of torch.__config__.show(), the optimizer; with --kernels (CPU) also one extra,
untimed step (eager modes: on the batch's first sequence; compiled modes: the whole batch,
another shape would compile again) with MKL's and oneDNN's verbose modes on: the calls of each
MKL function and oneDNN primitive (kind, implementation, source dtype) in that step (SDPA's
blocked attention calls SGEMM per block, so the counts depend on the batch), and MKL's version
line ("mkl_header": it names the code path MKL chose for this CPU).
"""

import argparse
import collections
import contextlib
import ctypes
import gc
import json
import math
import os
import re
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch_peer import PRESETS, VOCAB, VOCAB_PADDED, model_flops_per_token  # noqa: E402

HAS_SDPA = hasattr(F, "scaled_dot_product_attention")
# mode name: (dtype, compile)
MODES = {"eager": ("fp32", False), "compile": ("fp32", True), "bf16": ("bf16", False), "bf16-compile": ("bf16", True)}


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
    ap.add_argument("--modes", default="", help="comma-separated modes to run in turn: " + ", ".join(MODES))
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)")
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--max-seconds", type=float, default=0.0,
                    help="soft cap on a mode's warm-up and timed steps (0: none; at least 2 timed steps)")
    ap.add_argument("--kernels", action="store_true",
                    help="CPU: one extra untimed step with MKL/oneDNN verbose on, to name the kernels that ran")
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--format", choices=["json", "text"], default="json")
    args = ap.parse_args(argv)
    ctx = PRESETS[args.model][3]
    if args.seq > ctx:
        ap.error("--seq %d exceeds the context %d of model %s" % (args.seq, ctx, args.model))
    if args.batch < 1 or args.seq < 1 or args.steps < 1 or args.warmup < 0 or args.threads < 0:
        ap.error("need --batch, --seq, --steps >= 1 and --warmup, --threads >= 0")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        ap.error("--device %s: torch sees no CUDA device" % args.device)
    if args.modes:
        args.mode_list = [m.strip() for m in args.modes.split(",") if m.strip()]
        bad = [m for m in args.mode_list if m not in MODES]
        if bad or not args.mode_list:
            ap.error("--modes %r: unknown mode %s (known: %s)"
                     % (args.modes, ", ".join(bad) or "(none)", ", ".join(MODES)))
    else:
        args.mode_list = [None]
    return args


def fused_adamw_ok(device):
    """Whether torch.optim.AdamW(fused=True) runs on `device` (CUDA; the CPU from torch 2.4)."""
    if device.startswith("cuda"):
        return True
    try:
        p = torch.nn.Parameter(torch.zeros(2, device=device))
        p.grad = torch.zeros(2, device=device)
        torch.optim.AdamW([p], fused=True).step()
        return True
    except (RuntimeError, TypeError, ValueError):
        return False


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


def timed(step, args, sync, compiled):
    """(warm-up step seconds, timed step seconds, losses of the timed steps). With --max-seconds S
    a slow mode stops early: the warm-up after its first real step (a compiled mode's second)
    when that step times warmup + steps exceeds S, the timed steps once they took S in all."""
    warm = []
    for i in range(args.warmup):
        t0 = time.perf_counter()
        step()
        sync()
        warm.append(time.perf_counter() - t0)
        real = i >= (1 if compiled else 0)
        if args.max_seconds > 0 and real and warm[-1] * (args.warmup + args.steps) > args.max_seconds:
            break
    times, losses = [], []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        loss = step()
        sync()
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
        if args.max_seconds > 0 and sum(times) > args.max_seconds:
            break
    return warm, times, losses


def config_lines():
    """The BLAS/LAPACK/MKL/oneDNN/OpenMP lines of torch.__config__.show(), shortened."""
    out = []
    for line in torch.__config__.show().splitlines():
        s = line.strip().lstrip("-").strip()
        if re.search(r"Math Kernel Library|MKL-DNN|oneDNN|OpenMP|CPU capability usage", s) and len(s) < 160:
            out.append(s)
        for key in ("BLAS_INFO", "LAPACK_INFO", "USE_MKL", "USE_MKLDNN", "USE_OPENMP"):
            m = re.search(r"\b%s=([^,\s]+)" % key, s)
            if m:
                out.append("%s=%s" % (key, m.group(1)))
    return out


def kernels_info(device):
    k = {"torch": torch.__version__}
    if device.startswith("cuda"):
        return k
    cpu = getattr(torch.backends, "cpu", None)  # torch >= 2.0
    k["cpu_capability"] = cpu.get_cpu_capability() if cpu is not None else None
    k["mkl_available"] = torch.backends.mkl.is_available()
    k["mkldnn_available"] = torch.backends.mkldnn.is_available()
    k["mkldnn_enabled"] = bool(torch.backends.mkldnn.enabled)
    bf16_ok = getattr(getattr(torch.ops, "mkldnn", None), "_is_mkldnn_bf16_supported", None)
    try:
        k["mkldnn_bf16_supported"] = bool(bf16_ok()) if bf16_ok is not None else None
    except RuntimeError:
        k["mkldnn_bf16_supported"] = None
    k["config"] = config_lines()
    return k


MKL_HEADER = [None]  # MKL prints its version/ISA line once per process: kept for every mode


def verbose_probe(step):
    """Runs step() once with MKL's and oneDNN's verbose output on (they print to fd 1, which is
    redirected to a file meanwhile): counts of MKL functions and oneDNN primitives, MKL's ISA."""
    if not hasattr(torch.backends.mkl, "verbose"):  # torch < 1.13
        return {}
    libc = ctypes.CDLL(None)
    sys.stdout.flush()
    saved = os.dup(1)
    with tempfile.TemporaryFile(mode="w+b") as f:
        os.dup2(f.fileno(), 1)
        try:
            with contextlib.ExitStack() as verbose:
                if torch.backends.mkl.is_available():
                    verbose.enter_context(torch.backends.mkl.verbose(torch.backends.mkl.VERBOSE_ON))
                if torch.backends.mkldnn.is_available():
                    verbose.enter_context(torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON))
                step()
        finally:
            libc.fflush(None)
            os.dup2(saved, 1)
            os.close(saved)
        f.seek(0)
        text = f.read().decode(errors="replace")
    mkl, dnn = collections.Counter(), collections.Counter()
    for line in text.splitlines():
        if line.startswith("MKL_VERBOSE"):
            m = re.match(r"MKL_VERBOSE\s+([A-Za-z0-9_]+)\(", line)
            if m:
                mkl[m.group(1)] += 1
            elif "Product build" in line or "processors" in line:
                MKL_HEADER[0] = line[len("MKL_VERBOSE"):].strip()[:200]
        elif line.startswith(("onednn_verbose", "dnnl_verbose")):
            f = line.split(",")
            if "exec" not in f:
                continue
            i = f.index("exec")
            kind, impl = (f[i + 2], f[i + 3]) if len(f) > i + 3 else ("?", "?")
            m = re.search(r"\bsrc[_:]([a-z]+[0-9]+)", line)
            dnn["%s %s %s" % (kind, impl, m.group(1) if m else "?")] += 1
    return {"mkl_calls": dict(mkl.most_common()), "mkl_header": MKL_HEADER[0], "onednn_calls": dict(dnn.most_common())}


def run_mode(args, mode, kernels):
    dtype, compiled = MODES[mode] if mode else (args.dtype, not args.no_compile)
    torch.manual_seed(args.seed)
    L, NH, C, ctx = PRESETS[args.model]
    model = GPT(L, NH, C, ctx).to(args.device)
    params = list(model.parameters())
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    fused = fused_adamw_ok(args.device)
    extra = {"fused": True} if fused else {}
    opt = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95), eps=1e-8, **extra)
    if compiled and not hasattr(torch, "compile"):
        sys.exit("nanogpt_peer: torch %s has no torch.compile; pass --no-compile" % torch.__version__)
    if compiled:
        torch._dynamo.reset()
    run = torch.compile(model) if compiled else model
    g = torch.Generator().manual_seed(args.seed)
    tokens = torch.randint(0, VOCAB, (args.batch, args.seq + 1), generator=g).to(args.device)
    x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    cuda = args.device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    step = make_step(run, opt, params, x, y, dtype, args.device)
    warm, times, losses = timed(step, args, sync, compiled)
    med, tok = statistics.median(times), args.batch * args.seq
    fpt = model_flops_per_token(L, C, VOCAB_PADDED, args.seq)
    k = dict(kernels, optimizer="AdamW(fused)" if fused else "AdamW(for-loop)")
    if args.kernels and not cuda:
        # eager: on one sequence (the same kernels, a fraction of a slow mode's time); compiled:
        # the whole batch (another shape would compile again)
        probe = step if compiled else make_step(run, opt, params, x[:1], y[:1], dtype, args.device)
        k.update(verbose_probe(probe))
    rec = {
        "impl": "torch-nanogpt", "mode": mode or ("%s%s" % (dtype, "-compile" if compiled else "")),
        "model": args.model, "batch": args.batch, "seq": args.seq, "threads": torch.get_num_threads(),
        "device": torch.cuda.get_device_name() if cuda else args.device, "dtype": dtype,
        "compile": compiled, "attention": "sdpa" if HAS_SDPA else "explicit",
        "ms_per_step": round(med * 1e3, 3), "tokens_per_s": round(tok / med, 1),
        "model_flops_per_s": round(fpt * tok / med, 1), "model_flops_per_token": fpt,
        "ms_per_step_min": round(min(times) * 1e3, 3), "ms_per_step_max": round(max(times) * 1e3, 3),
        "steps": len(times), "warmup": len(warm), "capped": len(times) < args.steps,
        "warmup_s": [round(w, 3) for w in warm],
        "compile_s": round(max(0.0, warm[0] - med), 3) if compiled and warm else None,
        "params": sum(p.numel() for p in params), "lr": args.lr,
        "loss_first": round(losses[0], 6), "loss_last": round(losses[-1], 6), "torch": torch.__version__,
        "kernels": k,
    }
    del run, model, opt, params, groups, step
    gc.collect()
    return rec


def main(argv=None):
    args = parse(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    kernels = kernels_info(args.device)
    for mode in args.mode_list:
        rec = run_mode(args, mode, kernels)
        if args.format == "json":
            print(json.dumps(rec), flush=True)
        else:
            print("torch-nanogpt %s %s B=%d T=%d threads=%d: %.1f ms/step, %.0f tokens/s%s"
                  % (args.model, rec["mode"], args.batch, args.seq, rec["threads"], rec["ms_per_step"],
                     rec["tokens_per_s"],
                     ", compile %.1f s" % rec["compile_s"] if rec["compile_s"] is not None else ""), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
