"""PyTorch Geometric in the peers' environment (CTest label `peers`): the peer of weft's
graph-network family (issue 33, HydraGNN-style). One SchNet interaction (continuous-filter
convolution) and one PNA layer (mean/min/max/std aggregators, degree scalers, edge features) run
forward and backward in float64 on a random non-periodic cluster whose radius graph is built here
by brute force. The SchNet interaction is checked against the same formula written with dense
torch operations (pinning the peer's conventions before weft's own layers are compared with
it); both are checked for permutation equivariance and finite gradients.
"""
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers_util as pu  # noqa: E402

CUTOFF = 2.5


def radius_graph(pos, cutoff):
    """Directed edges j -> i for every pair closer than cutoff (no self loops), O(N^2)."""
    d = torch.cdist(pos, pos)
    src, dst = torch.nonzero((d < cutoff) & ~torch.eye(len(pos), dtype=torch.bool), as_tuple=True)
    return torch.stack([src, dst]), d[src, dst]


def cluster(n=24, seed=0):
    g = torch.Generator().manual_seed(seed)
    pos = torch.rand(n, 3, generator=g, dtype=torch.float64) * 4.0
    species = torch.randint(0, 4, (n,), generator=g)
    return pos, species


def test_schnet_interaction():
    from torch_geometric.nn.models.schnet import GaussianSmearing, InteractionBlock
    torch.manual_seed(0)
    pos, species = cluster()
    H, G, Fl = 16, 20, 16
    emb = torch.nn.Embedding(4, H).double()
    block = InteractionBlock(H, G, Fl, CUTOFF).double()
    smear = GaussianSmearing(0.0, CUTOFF, G).double()
    ei, dist = radius_graph(pos, CUTOFF)
    x = emb(species)
    out = block(x, ei, dist, smear(dist))
    # The same interaction, dense: h_i = lin(act(lin2(sum_j lin1(x_j) * W_ij))) with
    # W_ij = nn(rbf(d_ij)) * 0.5 (cos(pi d / rc) + 1) for d_ij < rc.
    n = len(pos)
    D = torch.cdist(pos, pos)
    mask = (D < CUTOFF) & ~torch.eye(n, dtype=torch.bool)
    rbf = smear(D.reshape(-1)).reshape(n, n, G)
    Wd = block.mlp(rbf) * (0.5 * (torch.cos(D * math.pi / CUTOFF) + 1.0) * mask).unsqueeze(-1)
    agg = torch.einsum("ijf,jf->if", Wd, block.conv.lin1(x))
    ref = block.lin(block.act(block.conv.lin2(agg)))
    err = (out - ref).abs().max().item()
    assert err < 1e-10, "SchNet interaction differs from the dense formula by %g" % err
    # Equivariance: permuting the atoms permutes the output.
    perm = torch.randperm(n)
    ei_p, dist_p = radius_graph(pos[perm], CUTOFF)
    out_p = block(x[perm], ei_p, dist_p, smear(dist_p))
    perr = (out_p - out[perm]).abs().max().item()
    assert perr < 1e-10, perr
    out.pow(2).sum().backward()
    gnorm = sum(p.grad.norm().item() ** 2 for p in block.parameters()) ** 0.5
    assert math.isfinite(gnorm) and gnorm > 0
    pu.report("pyg_schnet", atoms=n, edges=int(ei.shape[1]), max_abs_err_vs_dense=err,
              permutation_err=perr, grad_norm=gnorm)


def test_pna_layer():
    from torch_geometric.nn import PNAConv
    from torch_geometric.utils import degree
    torch.manual_seed(1)
    pos, species = cluster(n=30, seed=3)
    ei, dist = radius_graph(pos, CUTOFF)
    n = len(pos)
    deg = degree(ei[1], n, dtype=torch.long)
    hist = torch.bincount(deg)
    C = 8
    conv = PNAConv(C, C, aggregators=["mean", "min", "max", "std"], scalers=["identity", "amplification",
                   "attenuation"], deg=hist, edge_dim=1, towers=1).double()
    x = torch.randn(n, C, dtype=torch.float64)
    out = conv(x, ei, dist.unsqueeze(-1))
    assert out.shape == (n, C) and torch.isfinite(out).all()
    perm = torch.randperm(n)
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(n)
    ei_p = inv[ei]
    out_p = conv(x[perm], ei_p, dist.unsqueeze(-1))
    perr = (out_p - out[perm]).abs().max().item()
    assert perr < 1e-10, "PNA is not permutation equivariant: %g" % perr
    out.sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in conv.parameters() if p.requires_grad)
    avg_log = conv.aggr_module.init_avg_deg_log if hasattr(conv, "aggr_module") else None
    pu.report("pyg_pna", atoms=n, edges=int(ei.shape[1]), max_degree=int(deg.max()), permutation_err=perr,
              avg_deg_log=float(avg_log) if avg_log is not None else None)


if __name__ == "__main__":
    sys.exit(pu.main({"schnet": test_schnet_interaction, "pna": test_pna_layer}))
