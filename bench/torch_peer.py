#!/usr/bin/python3
"""PyTorch peer for weft's training-step benchmark.

  /usr/bin/python3 bench/torch_peer.py --model tiny|small|gpt2-124m --batch 8 --seq 256 \
      --threads 2 --steps 10 --warmup 2 [--format json|text]

Times full float32 training steps of the eager GPT-2 in tests/reference/gpt2_torch.py
(Hugging Face GPT2LMHeadModel semantics, tied head, vocabulary padded to 50304):
  zero_grad(set_to_none=True) + forward + mean cross-entropy + backward
  + clip_grad_norm_(1.0) + AdamW(lr 1e-4, weight decay 0.1).step()
on random tokens (fixed seed). --warmup steps are run first and not timed; then
--steps steps are timed one by one with time.perf_counter.

Prints one JSON line on stdout (nothing else goes to stdout):
  {"impl": "torch", "model", "batch", "seq", "threads", "ms_per_step" (median),
   "tokens_per_s" (B*T / median seconds), "model_flops_per_s", ...}
model FLOPs per token = 6*N_mm + 12*L*C*T with N_mm = L*(C*3C + C*C + 2*C*F) + Vp*C
(F = 4C; the parameters taking part in matrix products) and 12*L*C*T the attention
scores + weighted sum, forward and backward (PaLM appendix B convention).
"""

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "reference"))

import torch  # noqa: E402
from gpt2_torch import GPT2  # noqa: E402

# name: (layers, heads, hidden, context)
PRESETS = {
    "tiny": (4, 4, 256, 256),
    "small": (6, 6, 384, 256),
    "gpt2-124m": (12, 12, 768, 1024),
}
VOCAB = 50257
VOCAB_PADDED = 50304  # padded to a multiple of 128, as llm.c does


def model_flops_per_token(L, C, Vp, T):
    Fh = 4 * C
    n_mm = L * (C * 3 * C + C * C + 2 * C * Fh) + Vp * C
    return 6 * n_mm + 12 * L * C * T


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=sorted(PRESETS), default="tiny")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--format", choices=["json", "text"], default="json")
    args = ap.parse_args(argv)

    L, NH, C, ctx = PRESETS[args.model]
    if args.seq > ctx:
        ap.error("--seq %d exceeds the context %d of model %s" % (args.seq, ctx, args.model))
    if args.batch < 1 or args.seq < 1 or args.steps < 1 or args.warmup < 0 or args.threads < 1:
        ap.error("need --batch, --seq, --steps, --threads >= 1 and --warmup >= 0")

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    cfg = {"n_layer": L, "n_head": NH, "n_embd": C, "n_positions": ctx,
           "vocab_size": VOCAB_PADDED, "layer_norm_epsilon": 1e-5, "n_inner": None}
    model = GPT2(cfg, seed=args.seed).float()
    model.train()  # no dropout in this model; train/eval behave the same
    params = list(model.parameters())
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95), eps=1e-8)

    g = torch.Generator()
    g.manual_seed(args.seed)
    # tokens from the real vocabulary; the padded rows only take part in the softmax
    tokens = torch.randint(0, VOCAB, (args.batch, args.seq + 1), generator=g)
    x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    def step():
        opt.zero_grad(set_to_none=True)
        _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        return loss.item()

    for _ in range(args.warmup):
        step()
    times, losses = [], []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        losses.append(step())
        times.append(time.perf_counter() - t0)

    med = statistics.median(times)
    tok = args.batch * args.seq
    fpt = model_flops_per_token(L, C, VOCAB_PADDED, args.seq)
    rec = {
        "impl": "torch", "model": args.model, "batch": args.batch, "seq": args.seq,
        "threads": args.threads,
        "ms_per_step": round(med * 1e3, 3),
        "tokens_per_s": round(tok / med, 1),
        "model_flops_per_s": round(fpt * tok / med, 1),
        "model_flops_per_token": fpt,
        "ms_per_step_min": round(min(times) * 1e3, 3),
        "ms_per_step_max": round(max(times) * 1e3, 3),
        "steps": args.steps, "warmup": args.warmup,
        "params": sum(p.numel() for p in params),
        "loss_first": round(losses[0], 6), "loss_last": round(losses[-1], 6),
        "torch": torch.__version__,
    }
    if args.format == "json":
        print(json.dumps(rec), flush=True)
    else:
        print("torch %s B=%d T=%d threads=%d: %.1f ms/step, %.0f tokens/s, %.2f GFLOP/s (model)"
              % (args.model, args.batch, args.seq, args.threads, rec["ms_per_step"],
                 rec["tokens_per_s"], rec["model_flops_per_s"] / 1e9), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
