#!/usr/bin/python3
"""PyTorch peer of weft's graph-network training step (issue 33): the same model as
tests/reference/gnn_reference.py (SchNet, EGNN or PNA, energy and equivariant force heads, the
normalised two-term loss), in float32 eager PyTorch, trained with AdamW on the same prepared
graph dataset (weft prepare --synthetic-lj DIR), batches of consecutive training structures.
Prints one JSON line: atoms/s and ms per step over the timed steps (the first two left out).

  /usr/bin/python3 bench/gnn_peer.py DATA_DIR [--layer schnet] [--hidden 64] [--layers 3]
      [--head-hidden 64] [--gaussians 32] [--batch 16] [--steps 40] [--threads 2]

Compare with `weft train configs/gnn-lj.toml --data DATA_DIR --threads 2` (its tokens/s are
atoms/s); bench/gnn_peer.sh runs both.
"""

import argparse
import json
import math
import os
import struct
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
import gnn_reference as ref  # noqa: E402


def pad8(n):
    return (n + 7) // 8 * 8


def read_shard(path):
    """docs/formats-graphs.md: the structures of one .wgs shard."""
    raw = open(path, "rb").read()
    magic, version, S, A, E, flags, _, _ = struct.unpack("<8q", raw[:64])
    off = 64

    def take(dtype, count):
        nonlocal off
        a = np.frombuffer(raw, dtype=dtype, count=count, offset=off)
        off += pad8(a.nbytes)
        return a

    aoff = take("<i8", S + 1)
    eoff = take("<i8", S + 1)
    energy = take("<f8", S)
    lattice = take("<f8", 9 * S).reshape(S, 3, 3)
    take("u1", 8 * S)
    species = take("<i4", A)
    pos = take("<f8", 3 * A).reshape(A, 3)
    forces = take("<f8", 3 * A).reshape(A, 3) if flags & 2 else np.zeros((A, 3))
    src = take("<i4", E)
    dst = take("<i4", E)
    shift = take("<i4", 3 * E).reshape(E, 3)
    out = []
    for k in range(S):
        a0, a1, e0, e1 = aoff[k], aoff[k + 1], eoff[k], eoff[k + 1]
        out.append({"species": species[a0:a1], "pos": pos[a0:a1], "forces": forces[a0:a1], "energy": energy[k],
                    "source": src[e0:e1], "receiver": dst[e0:e1],
                    "shift_vec": shift[e0:e1].astype(np.float64) @ lattice[k]})
    return out


def batch_of(structs):
    b = {k: [] for k in ("species", "node_graph", "source", "receiver", "pos", "shift_vec", "energy", "forces")}
    n = 0
    for g, s in enumerate(structs):
        b["species"].append(s["species"])
        b["node_graph"].append(np.full(len(s["species"]), g))
        b["source"].append(s["source"] + n)
        b["receiver"].append(s["receiver"] + n)
        b["pos"].append(s["pos"])
        b["shift_vec"].append(s["shift_vec"])
        b["energy"].append([s["energy"]])
        b["forces"].append(s["forces"])
        n += len(s["species"])
    out = {}
    for k, v in b.items():
        a = np.concatenate(v)
        out[k] = torch.tensor(a, dtype=torch.long) if k in ("species", "node_graph", "source", "receiver") \
            else torch.tensor(a, dtype=torch.float32)
    return out, n


def edge_geometry(b):
    """A batch's edge vectors (source image minus receiver), distances and PyG edge_index (messages
    flow source -> receiver)."""
    src, rcv = b["source"], b["receiver"]
    vec = b["pos"][src] + b["shift_vec"] - b["pos"][rcv]
    return vec, torch.sqrt((vec * vec).sum(dim=1)), torch.stack([src, rcv])


def pyg_egnn_layers(C, layers, activation):
    """EGNN's layer (Satorras et al. 2021; HydraGNN's E_GCL without the coordinate update) on PyG's
    MessagePassing: m_e = act(act([h_r, h_s, d^2] W_e) W_m), a_i = sum of m_e over i's in-edges,
    h + act([h, a] W_n) W_o (the caller applies the activation after the residual, as weft)."""
    from torch_geometric.nn import MessagePassing

    def act_module():
        return {"silu": torch.nn.SiLU, "relu": torch.nn.ReLU}.get(activation, torch.nn.Softplus)()

    class EGCL(MessagePassing):
        def __init__(self):
            super().__init__(aggr="add")
            self.edge_mlp = torch.nn.Sequential(torch.nn.Linear(2 * C + 1, C), act_module(), torch.nn.Linear(C, C),
                                                act_module())
            self.node_mlp = torch.nn.Sequential(torch.nn.Linear(2 * C, C), act_module(), torch.nn.Linear(C, C))

        def forward(self, h, edge_index, d2):
            agg = self.propagate(edge_index, h=h, d2=d2)
            return h + self.node_mlp(torch.cat([h, agg], dim=1))

        def message(self, h_i, h_j, d2):
            return self.edge_mlp(torch.cat([h_i, h_j, d2[:, None]], dim=1))

    return torch.nn.ModuleList([EGCL() for _ in range(layers)])


def pna_deltas(histogram):
    """PNA's delta and delta_lin: the means of log(d + 1) and of d over an in-degree histogram."""
    n = float(sum(histogram))
    return (sum(c * math.log(d + 1.0) for d, c in enumerate(histogram)) / n,
            sum(c * d for d, c in enumerate(histogram)) / n)


def pyg_pna_layers(C, layers, G, histogram):
    """HydraGNN's PNAStack layer: PyG's PNAConv (aggregators mean, min, max, std; scalers identity,
    amplification, attenuation, linear; the Gaussians as edge features; towers 1, one pre and one
    post layer) and PyG's BatchNorm after it (the caller applies the activation)."""
    from torch_geometric.nn import BatchNorm, PNAConv
    deg = torch.tensor(histogram, dtype=torch.long)
    convs = torch.nn.ModuleList([PNAConv(C, C, aggregators=["mean", "min", "max", "std"],
                                         scalers=["identity", "amplification", "attenuation", "linear"], deg=deg,
                                         edge_dim=G, towers=1, pre_layers=1, post_layers=1, divide_input=False)
                                 for _ in range(layers)])
    norms = torch.nn.ModuleList([BatchNorm(C) for _ in range(layers)])
    return convs, norms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("--layer", default="schnet")
    ap.add_argument("--activation", default="silu")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--head-hidden", type=int, default=64)
    ap.add_argument("--gaussians", type=int, default=32)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--pyg", action="store_true",
                    help="the layers from PyTorch Geometric (.venv-peers): SchNet's CFConv, EGNN on its MessagePassing, "
                         "PNAConv with BatchNorm")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.set_default_dtype(torch.float32)
    man = json.load(open(os.path.join(a.data, "manifest.json")))
    structs = []
    for f in man["splits"]["train"]["files"]:
        structs += read_shard(os.path.join(a.data, f["file"]))
    st = man["splits"]["train"]["stats"]
    delta, delta_lin = pna_deltas(st["in_degree_histogram"])
    s = {"layer": a.layer, "activation": a.activation, "pooling": "mean", "cutoff": man["graph"]["cutoff"],
         "num_gaussians": a.gaussians, "layers": a.layers, "energy_weight": 1.0, "forces_weight": 1.0,
         "energy_mean": st["energy_per_atom"]["mean"], "energy_std": st["energy_per_atom"]["std"],
         "force_scale": st["force_rms"], "pna_delta": delta, "pna_delta_lin": delta_lin}
    C, H, G = a.hidden, a.head_hidden, a.gaussians
    P = {"embedding.weight": torch.randn(119, C)}
    for l in range(a.layers):
        p = "convs.%d." % l
        if a.layer == "pna":
            shapes = {"edge_encoder.weight": (G, C), "edge_encoder.bias": (C,), "pre_nns.0.0.weight": (3 * C, C),
                      "pre_nns.0.0.bias": (C,), "post_nns.0.0.weight": (17 * C, C), "lin.weight": (C, C),
                      "norm.bias": (C,), "norm.running_mean": (C,)}
        elif a.layer == "schnet":
            shapes = {"filter.0.weight": (G, C), "filter.0.bias": (C,), "filter.2.weight": (C, C),
                      "filter.2.bias": (C,), "lin1.weight": (C, C), "lin2.weight": (C, C), "lin2.bias": (C,)}
        else:
            shapes = {"edge_mlp.0.weight_receiver": (C, C), "edge_mlp.0.weight_source": (C, C),
                      "edge_mlp.0.weight_radial": (1, C), "edge_mlp.0.bias": (C,), "edge_mlp.2.weight": (C, C),
                      "edge_mlp.2.bias": (C,), "node_mlp.0.weight_node": (C, C), "node_mlp.0.weight_message": (C, C),
                      "node_mlp.0.bias": (C,), "node_mlp.2.weight": (C, C), "node_mlp.2.bias": (C,)}
        for k, sh in shapes.items():
            P[p + k] = torch.randn(*sh) / math.sqrt(sh[0]) if len(sh) == 2 else torch.zeros(sh)
        if a.layer == "pna":
            P[p + "norm.weight"], P[p + "norm.running_var"] = torch.ones(C), torch.ones(C)
    for k, sh in {"heads.energy.0.weight": (C, H), "heads.energy.0.bias": (H,), "heads.energy.2.weight": (H, 1),
                  "heads.energy.2.bias": (1,), "heads.forces.0.weight_receiver": (C, H),
                  "heads.forces.0.weight_source": (C, H), "heads.forces.0.weight_distance": (1, H),
                  "heads.forces.0.bias": (H,), "heads.forces.2.weight": (H, 1), "heads.forces.2.bias": (1,)}.items():
        P[k] = torch.randn(*sh) / math.sqrt(sh[0]) if len(sh) == 2 else torch.zeros(sh)
    for k, t in P.items():
        if ".running_" not in k:
            t.requires_grad_(True)
    params = [t for t in P.values() if t.requires_grad]
    forward = ref.forward
    if a.pyg and a.layer == "pna":  # HydraGNN's PNAStack: PyG's PNAConv, then BatchNorm
        from torch_geometric.nn.models.schnet import GaussianSmearing
        convs, norms = pyg_pna_layers(C, a.layers, G, st["in_degree_histogram"])
        smearing = GaussianSmearing(0.0, s["cutoff"], G)
        params += list(convs.parameters()) + list(norms.parameters())
        act = ref.act_fn(a.activation)

        def forward(P, b, s):
            vec, d, edge_index = edge_geometry(b)
            rbf = smearing(d)
            h = P["embedding.weight"][b["species"]]
            for conv, norm in zip(convs, norms):
                h = act(norm(conv(h, edge_index, rbf)))
            return ref.heads_loss(P, b, s, h, vec, d)
    elif a.pyg and a.layer == "egnn":  # EGNN's layer written on PyG's MessagePassing (HydraGNN's E_GCL)
        convs = pyg_egnn_layers(C, a.layers, a.activation)
        params += list(convs.parameters())
        act = ref.act_fn(a.activation)

        def forward(P, b, s):
            vec, d, edge_index = edge_geometry(b)
            h = P["embedding.weight"][b["species"]]
            for conv in convs:
                h = act(conv(h, edge_index, d * d))
            return ref.heads_loss(P, b, s, h, vec, d)
    elif a.pyg:  # SchNet's layers as PyTorch Geometric's CFConv (HydraGNN's SCFStack builds them so)
        from torch_geometric.nn.models.schnet import CFConv, GaussianSmearing, ShiftedSoftplus
        convs = torch.nn.ModuleList([CFConv(C, C, C, torch.nn.Sequential(torch.nn.Linear(G, C), ShiftedSoftplus(),
                                                                         torch.nn.Linear(C, C)), s["cutoff"])
                                     for _ in range(a.layers)])
        smearing = GaussianSmearing(0.0, s["cutoff"], G)
        params += list(convs.parameters())
        act = ref.act_fn(a.activation)

        def forward(P, b, s):
            vec, d, edge_index = edge_geometry(b)
            rbf = smearing(d)
            h = P["embedding.weight"][b["species"]]
            for conv in convs:
                h = act(conv(h, edge_index, d, rbf))
            return ref.heads_loss(P, b, s, h, vec, d)
    opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.0)
    times, atoms, edges = [], [], []
    for step in range(a.steps):
        first = (step * a.batch) % max(1, len(structs) - a.batch)
        b, n = batch_of(structs[first:first + a.batch])
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = forward(P, b, s)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        atoms.append(n)
        edges.append(int(b["source"].shape[0]))
    t = sum(times[2:])
    pyg = {"schnet": " + PyG CFConv", "egnn": " + PyG MessagePassing EGNN", "pna": " + PyG PNAConv, BatchNorm"}
    print(json.dumps({"peer": "pytorch %s eager fp32%s" % (torch.__version__, pyg[a.layer] if a.pyg else ""),
                      "threads": a.threads, "layer": a.layer,
                      "steps": a.steps - 2, "atoms_per_s": sum(atoms[2:]) / t,
                      "graphs_per_s": a.batch * (a.steps - 2) / t, "edges_per_s": sum(edges[2:]) / t, "ms_per_step": 1e3 * t / (a.steps - 2),
                      "final_loss": loss.item()}))


if __name__ == "__main__":
    main()
