#!/usr/bin/python3
"""Float64 PyTorch oracle for weft's GPT-2 model tests.

Usage:
  /usr/bin/python3 tests/reference/gpt2_reference.py --checkpoint DIR --batch FILE --out FILE \
      [--steps 10 --lr 1e-3 --beta1 0.9 --beta2 0.95 --eps 1e-8 --weight-decay 0.1]

Inputs
  DIR/config.json        Hugging Face GPT-2 keys (n_layer, n_head, n_embd, n_positions,
                         vocab_size, layer_norm_epsilon, n_inner)
  DIR/model.safetensors  HF parameter names (transformer.wte.weight, ...), any float dtype
  --batch FILE           safetensors with "inputs" and "targets", integer, shape [S, B, T]
                         (a [B, T] pair is read as S = 1)

Output (--out, safetensors, every tensor F64)
  loss          [1]       mean cross-entropy of batch 0 at the checkpoint's weights
  grad.<name>   as stored gradient of that loss for every parameter
  losses        [steps]   loss before step k, computed on batch k % S
  final.<name>  as stored parameters after --steps AdamW steps

Optimizer: torch.optim.AdamW(lr, betas=(beta1, beta2), eps, weight_decay) with two
groups: decay on parameters with >= 2 dims (matrices, wte, wpe), none on 1-dim
parameters (biases, LayerNorm). Constant learning rate, no gradient clipping.
"""

import argparse
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2_torch import load_model, load_safetensors, save_safetensors  # noqa: E402


def read_batches(path, vocab_size, n_positions):
    t = load_safetensors(path)
    for key in ("inputs", "targets"):
        if key not in t:
            raise SystemExit("batch file %s has no %r tensor (has %s)" % (path, key, sorted(t)))
    inputs, targets = t["inputs"], t["targets"]
    if inputs.shape != targets.shape:
        raise SystemExit("batch file %s: inputs shape %s != targets shape %s"
                         % (path, list(inputs.shape), list(targets.shape)))
    if inputs.ndim == 2:
        inputs, targets = inputs[None], targets[None]
    if inputs.ndim != 3 or inputs.shape[0] < 1:
        raise SystemExit("batch file %s: expected shape [S, B, T], got %s" % (path, list(inputs.shape)))
    if inputs.dtype.kind not in "iu" or targets.dtype.kind not in "iu":
        raise SystemExit("batch file %s: inputs/targets must be integer, got %s/%s"
                         % (path, inputs.dtype, targets.dtype))
    for key, a in (("inputs", inputs), ("targets", targets)):
        if a.min() < 0 or a.max() >= vocab_size:
            raise SystemExit("batch file %s: %s values in [%d, %d] outside vocabulary [0, %d)"
                             % (path, key, a.min(), a.max(), vocab_size))
    if inputs.shape[2] > n_positions:
        raise SystemExit("batch file %s: T = %d exceeds n_positions %d"
                         % (path, inputs.shape[2], n_positions))
    return torch.from_numpy(inputs.astype(np.int64)), torch.from_numpy(targets.astype(np.int64))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--batch", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=10)
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
    model = load_model(args.checkpoint, torch.float64)
    model.eval()
    cfg = model.config
    inputs, targets = read_batches(args.batch, cfg["vocab_size"], cfg["n_positions"])
    S = inputs.shape[0]
    names = [n for n, _ in model.named_parameters()]
    params = dict(model.named_parameters())

    out = {}
    # 1. loss and gradients of batch 0 at the checkpoint's weights
    model.zero_grad(set_to_none=True)
    _, loss = model(inputs[0], targets[0])
    loss.backward()
    if not math.isfinite(loss.item()):
        raise SystemExit("loss at the checkpoint's weights is not finite: %r" % loss.item())
    out["loss"] = np.array([loss.item()], dtype=np.float64)
    for n in names:
        out["grad." + n] = params[n].grad.detach().numpy().astype(np.float64).copy()

    # 2. AdamW steps, step k on batch k % S; loss recorded before each step
    decay = [params[n] for n in names if params[n].dim() >= 2]
    no_decay = [params[n] for n in names if params[n].dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": args.weight_decay},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr, betas=(args.beta1, args.beta2), eps=args.eps)
    losses = []
    for k in range(args.steps):
        opt.zero_grad(set_to_none=True)
        _, loss = model(inputs[k % S], targets[k % S])
        loss.backward()
        losses.append(loss.item())
        opt.step()
    if args.steps > 0 and losses[0] != out["loss"][0]:
        # same weights, same batch, same code: must be bit-identical
        raise SystemExit("internal check failed: losses[0] %r != loss %r" % (losses[0], out["loss"][0]))
    out["losses"] = np.array(losses, dtype=np.float64)
    for n in names:
        out["final." + n] = params[n].detach().numpy().astype(np.float64).copy()

    save_safetensors(args.out, out, metadata={
        "steps": args.steps, "lr": args.lr, "beta1": args.beta1, "beta2": args.beta2,
        "eps": args.eps, "weight_decay": args.weight_decay, "batches": S,
        "generator": "tests/reference/gpt2_reference.py"})
    print("gpt2_reference: loss %.12f, %d steps, last loss %s -> %s"
          % (out["loss"][0], args.steps, ("%.12f" % losses[-1]) if losses else "n/a", args.out),
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
