#!/usr/bin/python3
"""Float64 PyTorch oracle for weft's graph networks (issue 33; docs/model-gnn.md).

Usage:
  /usr/bin/python3 tests/reference/gnn_reference.py --params FILE --batch FILE --settings FILE --out FILE \
      [--steps 5 --lr 1e-3 --beta1 0.9 --beta2 0.95 --eps 1e-8 --weight-decay 0.1]

Written on plain torch tensors (index_add_, scatter of index lists), independently of weft's
layout of the computation: the geometry is recomputed here from the positions and image shifts,
EGNN's concatenated inputs use one concatenated weight (weft keeps its row blocks), the
segment sums are index_add_ over the edge lists.

Inputs
  --params    safetensors: weft's tensors under weft's names, matrices (in, out).
  --batch     safetensors: S batches b = 0..S-1, each with
                b.species [N] int32, b.pos [N, 3], b.node_graph [N] int32, b.source [E] int32,
                b.receiver [E] int32, b.shift_vec [E, 3] (Cartesian image offset), b.energy [G]
                (f64), b.forces [N, 3].
  --settings  JSON: layer ("schnet" | "egnn" | "pna"), activation ("relu" | "silu" | "ssp"), cutoff,
              num_gaussians, pooling ("mean" | "add"), energy_weight, forces_weight, energy_mean,
              energy_std, force_scale, layers, pna_delta, pna_delta_lin.

Model (per structure graph; edges j -> i, j the source, i the receiver):
  h0 = embedding[species]
  SchNet:  W_e = (ssp(rbf(d) W0 + b0) W2 + b2) * 0.5 (cos(pi d / r_c) + 1)  (0 from r_c on),
           rbf_k(d) = exp(-0.5 (d - mu_k)^2 / delta^2), mu_k = k r_c / (G - 1), delta = r_c / (G - 1)
           h' = act(sum_e (h W_lin1)[j] * W_e  W_lin2 + b_lin2)
  EGNN:    m_e = act(act([h_i, h_j, d^2] W_e0 + b_e0) W_e2 + b_e2);  a_i = sum_e m_e
           h' = act(h + act([h, a] W_n0 + b_n0) W_n2 + b_n2)
  PNA:     e_e = rbf(d) W_enc + b_enc;  m_e = [h_i, h_j, e_e] W_pre + b_pre
           A_i = [mean, min, max, std] of m over i's in-edges (torch.scatter_reduce; std =
           sqrt(var) where var > 1e-5, else 0), d_i the in-degree,
           a_i = [A, A log(d+1)/delta, A delta/log(max(d,1)+1), A d/delta_lin]
           y = [h, a] W_post W_lin (no biases ahead of the norm);  h' = act(BatchNorm(y))
           BatchNorm: training with the batch's mean and biased variance; evaluation with the
           running statistics, which each step blends with momentum 0.1 toward the batch's mean and
           unbiased variance (torch.nn.BatchNorm1d); their grad.<name> is that batch statistic.
  energy head: pool (mean | add) over a graph's nodes -> Linear, act, Linear(1)
  force head:  per edge s_e = act([h_i, h_j, d_e] W_f0 + b_f0) W_f2 + b_f2,
               t_e = s_e (x_j + shift - x_i) / d_e, f_i = sum_{e into i} t_e - sum_{e out of i} t_e
  loss = w_F mean_atoms(mean_c (f - F / s_F)^2) + w_E mean_graphs((e - (E / n - mu) / sigma)^2),
         (w_E, w_F) normalised to sum to 1.

Output (--out, safetensors, F64): loss [1] (batch 0, initial weights), eval_loss [1] (the same in
evaluation mode), grad.<name>, losses [steps]
(loss before step k on batch k % S), param.<name> after the steps, final_loss [1] (batch steps % S).
AdamW: torch.optim.AdamW, decay on every matrix and the embedding, none on biases and norms; the
running statistics are not optimised.
"""

import argparse
import json
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2_torch import load_safetensors, save_safetensors  # noqa: E402

torch.set_default_dtype(torch.float64)


def act_fn(name):
    if name == "relu":
        return torch.relu
    if name == "silu":
        return lambda x: x * torch.sigmoid(x)
    if name == "ssp":
        return lambda x: torch.nn.functional.softplus(x) - math.log(2.0)
    raise ValueError("unknown activation " + name)


def ssp(x):
    return torch.nn.functional.softplus(x) - math.log(2.0)


def segment_sum(values, index, n):
    out = torch.zeros((n,) + tuple(values.shape[1:]), dtype=values.dtype)
    return out.index_add_(0, index, values)


def gaussians(d, s):
    G_ = s["num_gaussians"]
    rc = s["cutoff"]
    mu = torch.arange(G_, dtype=d.dtype) * (rc / (G_ - 1))
    delta = rc / (G_ - 1)
    return torch.exp(-0.5 * (d[:, None] - mu[None, :]) ** 2 / delta ** 2)


def segment_extreme(values, index, n, reduce):
    out = torch.zeros((n,) + tuple(values.shape[1:]), dtype=values.dtype)
    idx = index[:, None].expand_as(values)
    return out.scatter_reduce(0, idx, values, reduce=reduce, include_self=False)


def pna_layer(P, p, h, rcv, src, rbf, s, training, stats):
    """One PNA layer with BatchNorm and the activation; appends (mean, unbiased var) of the
    normalised input to stats in training."""
    N = h.shape[0]
    enc = rbf @ P[p + "edge_encoder.weight"] + P[p + "edge_encoder.bias"]
    m = torch.cat([h[rcv], h[src], enc], dim=1) @ P[p + "pre_nns.0.0.weight"] + P[p + "pre_nns.0.0.bias"]
    deg = segment_sum(torch.ones(rcv.shape[0]), rcv, N)
    mean = segment_sum(m, rcv, N) / deg.clamp(min=1)[:, None]
    mn = segment_extreme(m, rcv, N, "amin")
    mx = segment_extreme(m, rcv, N, "amax")
    var = segment_sum((m - mean[rcv]) ** 2, rcv, N) / deg.clamp(min=1)[:, None]
    std = torch.where(var > 1e-5, torch.sqrt(var.clamp(min=1e-5)), torch.zeros_like(var))
    A = torch.cat([mean, mn, mx, std], dim=1)
    dg = deg[:, None]
    a = torch.cat([A, A * (torch.log(dg + 1) / s["pna_delta"]), A * (s["pna_delta"] / torch.log(dg.clamp(min=1) + 1)),
                   A * (dg / s["pna_delta_lin"])], dim=1)
    y = (torch.cat([h, a], dim=1) @ P[p + "post_nns.0.0.weight"]) @ P[p + "lin.weight"]
    if training:
        mu = y.mean(dim=0)
        vb = ((y - mu) ** 2).mean(dim=0)
        z = (y - mu) / torch.sqrt(vb + 1e-5)
        n = y.shape[0]
        stats.append((p, mu.detach(), (vb * (n / (n - 1) if n > 1 else 1.0)).detach()))
    else:
        z = (y - P[p + "norm.running_mean"]) / torch.sqrt(P[p + "norm.running_var"] + 1e-5)
    return act_fn(s["activation"])(z * P[p + "norm.weight"] + P[p + "norm.bias"])


def forward(P, b, s, training=True, stats=None):
    act = act_fn(s["activation"])
    species = b["species"].long()
    src = b["source"].long()
    rcv = b["receiver"].long()
    N = species.shape[0]
    vec = b["pos"][src] + b["shift_vec"] - b["pos"][rcv]
    d = torch.sqrt((vec * vec).sum(dim=1))
    h = P["embedding.weight"][species]
    for l in range(s["layers"]):
        p = "convs.%d." % l
        if s["layer"] == "pna":
            h = pna_layer(P, p, h, rcv, src, gaussians(d, s), s, training, stats if stats is not None else [])
        elif s["layer"] == "schnet":
            rc = s["cutoff"]
            rbf = gaussians(d, s)
            cut = torch.where(d < rc, 0.5 * (torch.cos(math.pi * d / rc) + 1.0), torch.zeros_like(d))
            W = ssp(rbf @ P[p + "filter.0.weight"] + P[p + "filter.0.bias"]) @ P[p + "filter.2.weight"] \
                + P[p + "filter.2.bias"]
            W = W * cut[:, None]
            x = h @ P[p + "lin1.weight"]
            agg = segment_sum(x[src] * W, rcv, N)
            h = act(agg @ P[p + "lin2.weight"] + P[p + "lin2.bias"])
        else:
            We0 = torch.cat([P[p + "edge_mlp.0.weight_receiver"], P[p + "edge_mlp.0.weight_source"],
                             P[p + "edge_mlp.0.weight_radial"]], dim=0)  # (2C + 1, C)
            inp = torch.cat([h[rcv], h[src], (d * d)[:, None]], dim=1)
            m = act(act(inp @ We0 + P[p + "edge_mlp.0.bias"]) @ P[p + "edge_mlp.2.weight"] + P[p + "edge_mlp.2.bias"])
            a = segment_sum(m, rcv, N)
            Wn0 = torch.cat([P[p + "node_mlp.0.weight_node"], P[p + "node_mlp.0.weight_message"]], dim=0)
            upd = act(torch.cat([h, a], dim=1) @ Wn0 + P[p + "node_mlp.0.bias"]) @ P[p + "node_mlp.2.weight"] \
                + P[p + "node_mlp.2.bias"]
            h = act(h + upd)
    return heads_loss(P, b, s, h, vec, d)


def heads_loss(P, b, s, h, vec, d):
    """The energy and force heads and the normalised two-term loss on the last node states h."""
    e, f, atoms = heads_outputs(P, b, s, h, vec, d)
    wsum = s["energy_weight"] + s["forces_weight"]
    wE, wF = s["energy_weight"] / wsum, s["forces_weight"] / wsum
    y_e = (b["energy"] / atoms - s["energy_mean"]) / s["energy_std"]
    y_f = b["forces"] / s["force_scale"]
    return wF * ((f - y_f) ** 2).mean(dim=1).mean() + wE * ((e - y_e) ** 2).mean()


def heads_outputs(P, b, s, h, vec, d):
    """The heads on the last node states h: the normalised energy per atom of each graph (G), the
    normalised forces (N, 3) and the graphs' atom counts (G)."""
    act = act_fn(s["activation"])
    src = b["source"].long()
    rcv = b["receiver"].long()
    ng = b["node_graph"].long()
    N = h.shape[0]
    G = b["energy"].shape[0]
    pooled = segment_sum(h, ng, G)
    atoms = segment_sum(torch.ones(N), ng, G)
    if s["pooling"] == "mean":
        pooled = pooled / atoms[:, None]
    e = (act(pooled @ P["heads.energy.0.weight"] + P["heads.energy.0.bias"]) @ P["heads.energy.2.weight"]
         + P["heads.energy.2.bias"])[:, 0]
    Wf0 = torch.cat([P["heads.forces.0.weight_receiver"], P["heads.forces.0.weight_source"],
                     P["heads.forces.0.weight_distance"]], dim=0)  # (2C + 1, H)
    s_e = act(torch.cat([h[rcv], h[src], d[:, None]], dim=1) @ Wf0 + P["heads.forces.0.bias"]) \
        @ P["heads.forces.2.weight"] + P["heads.forces.2.bias"]  # (E, 1)
    t = s_e * (vec / d[:, None])  # each edge's pair force: on its receiver, and minus it on its source
    f = segment_sum(t, rcv, N) - segment_sum(t, src, N)
    return e, f, atoms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--params", required=True)
    ap.add_argument("--batch", required=True)
    ap.add_argument("--settings", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.95)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    a = ap.parse_args()
    with open(a.settings) as fh:
        s = json.load(fh)
    raw = load_safetensors(a.params)
    names = list(raw.keys())
    P = {n: torch.tensor(np.asarray(raw[n], dtype=np.float64), requires_grad=True) for n in names}
    braw = load_safetensors(a.batch)
    batches = []
    k = 0
    while ("%d.species" % k) in braw:
        b = {}
        for key in ("species", "node_graph", "source", "receiver"):
            b[key] = torch.tensor(np.asarray(braw["%d.%s" % (k, key)], dtype=np.int64))
        for key in ("pos", "shift_vec", "energy", "forces"):
            b[key] = torch.tensor(np.asarray(braw["%d.%s" % (k, key)], dtype=np.float64))
        batches.append(b)
        k += 1
    if not batches:
        raise SystemExit("gnn_reference: no batch 0 in " + a.batch)
    out = {}
    running = [n for n in names if ".running_" in n]
    trained = [n for n in names if n not in running]
    stats = []
    loss = forward(P, batches[0], s, True, stats)
    grads = torch.autograd.grad(loss, [P[n] for n in trained], allow_unused=True)
    out["loss"] = np.array([loss.item()])
    for n, g in zip(trained, grads):
        out["grad." + n] = (g if g is not None else torch.zeros_like(P[n])).detach().numpy()
    for p, mu, var in stats:  # a running statistic's slot holds the batch's
        out["grad." + p + "norm.running_mean"] = mu.numpy()
        out["grad." + p + "norm.running_var"] = var.numpy()
    with torch.no_grad():
        out["eval_loss"] = np.array([forward(P, batches[0], s, False).item()])

    def decays(n):
        return (n.endswith("weight") or "weight_" in n) and ".norm." not in n
    decay = [P[n] for n in trained if decays(n)]
    no_decay = [P[n] for n in trained if not decays(n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps)
    losses = []
    for step in range(a.steps):
        opt.zero_grad()
        stats = []
        l = forward(P, batches[step % len(batches)], s, True, stats)
        losses.append(l.item())
        l.backward()
        opt.step()
        with torch.no_grad():
            for p, mu, var in stats:
                P[p + "norm.running_mean"].mul_(0.9).add_(0.1 * mu)
                P[p + "norm.running_var"].mul_(0.9).add_(0.1 * var)
    out["losses"] = np.array(losses)
    with torch.no_grad():
        out["final_loss"] = np.array([forward(P, batches[a.steps % len(batches)], s, False).item()])
    for n in names:
        out["param." + n] = P[n].detach().numpy()
    save_safetensors(a.out, out, {"decay": ",".join(n for n in trained if decays(n))})


if __name__ == "__main__":
    main()
