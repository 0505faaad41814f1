"""PyTorch Geometric in the peers' environment (CTest label `peers`): a weft graph-network
checkpoint against the same model built from PyG's layers (issue 33). weft trains gnn-lj (SchNet,
EGNN or PNA) for one step at lr 1e-30 on a prepared LJ set, so its checkpoint holds the initial
weights (and, for PNA, BatchNorm's running statistics after one step); those go into PyG's CFConv
(SchNet, HydraGNN's SCFStack layer), an EGNN layer written on PyG's MessagePassing (HydraGNN's
E_GCL) or PyG's PNAConv and BatchNorm in evaluation mode (HydraGNN's PNAStack; PNAConv's post and
lin biases, which weft leaves out, at 0), with the reference's heads
(tests/reference/gnn_reference.py), in float64. Both predict the test split's energies and
forces; `weft eval`'s energy MAE per atom and force MAE equal the peer's within 1e-5 relative.
"""
import json
import math
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))
import gnn_peer  # noqa: E402  (the shard reader and the PyG EGNN layer)
import gnn_reference as ref  # noqa: E402
import peers_util as pu  # noqa: E402


def weft_checkpoint(layer):
    d = pu.scratch("pyg-gnn-" + layer)
    data = os.path.join(d, "lj")
    pu.weft("prepare", "--synthetic-lj", data, "--structures", 60)
    cfg = os.path.join(d, "run.toml")
    with open(cfg, "w") as f:
        f.write('[model]\nmodel = "gnn-lj"\nlayer = "%s"\n[data]\ndata = "%s"\n[train]\nglobal_batch = 4\n'
                'micro_batch = 1\nsteps = 1\nlr = 1e-30\nwarmup_steps = 0\nweight_decay = 0.0\nthreads = 2\n'
                '[eval]\nval_every = 0\n[checkpoint]\nckpt_every = 1\n[run]\nout = "%s"\n'
                % (layer, data, os.path.join(d, "run")))
    pu.weft("train", cfg)
    ckpt = os.path.join(d, "run", "step-000001")
    scores = os.path.join(d, "scores.json")
    pu.weft("eval", "--checkpoint", ckpt, "--data", data, "--split", "test", "--out", scores)
    return data, ckpt, json.load(open(scores))


def pyg_predictions(data, ckpt, layer):
    from torch_geometric.nn.models.schnet import CFConv, GaussianSmearing, ShiftedSoftplus
    torch.set_default_dtype(torch.float64)
    cj = json.load(open(os.path.join(ckpt, "config.json")))
    W = {k: torch.tensor(v, dtype=torch.float64) for k, v in pu.read_safetensors(os.path.join(ckpt, "model.safetensors")).items()}
    C, L = cj["hidden_dim"], cj["num_conv_layers"]
    norm = cj["normalisation"]
    s = {"activation": cj["activation_function"], "pooling": cj["graph_pooling"], "energy_weight": 1.0,
         "forces_weight": 1.0}
    act = ref.act_fn(s["activation"])
    cutoff = cj["radius"]
    if layer == "schnet":
        G = cj["num_gaussians"]
        convs = []
        for l in range(L):
            p = "convs.%d." % l
            conv = CFConv(C, C, C, torch.nn.Sequential(torch.nn.Linear(G, C), ShiftedSoftplus(), torch.nn.Linear(C, C)),
                          cutoff).double()
            with torch.no_grad():  # weft's matrices are (in, out); torch.nn.Linear's weights (out, in)
                conv.nn[0].weight.copy_(W[p + "filter.0.weight"].T), conv.nn[0].bias.copy_(W[p + "filter.0.bias"])
                conv.nn[2].weight.copy_(W[p + "filter.2.weight"].T), conv.nn[2].bias.copy_(W[p + "filter.2.bias"])
                conv.lin1.weight.copy_(W[p + "lin1.weight"].T)
                conv.lin2.weight.copy_(W[p + "lin2.weight"].T), conv.lin2.bias.copy_(W[p + "lin2.bias"])
            convs.append(conv)
        smearing = GaussianSmearing(0.0, cutoff, G)
    elif layer == "egnn":
        convs = list(gnn_peer.pyg_egnn_layers(C, L, s["activation"]).double())
        for l, conv in enumerate(convs):
            p = "convs.%d." % l
            with torch.no_grad():
                conv.edge_mlp[0].weight.copy_(torch.cat([W[p + "edge_mlp.0.weight_receiver"], W[p + "edge_mlp.0.weight_source"],
                                                         W[p + "edge_mlp.0.weight_radial"]], dim=0).T)
                conv.edge_mlp[0].bias.copy_(W[p + "edge_mlp.0.bias"])
                conv.edge_mlp[2].weight.copy_(W[p + "edge_mlp.2.weight"].T), conv.edge_mlp[2].bias.copy_(W[p + "edge_mlp.2.bias"])
                conv.node_mlp[0].weight.copy_(torch.cat([W[p + "node_mlp.0.weight_node"], W[p + "node_mlp.0.weight_message"]], dim=0).T)
                conv.node_mlp[0].bias.copy_(W[p + "node_mlp.0.bias"])
                conv.node_mlp[2].weight.copy_(W[p + "node_mlp.2.weight"].T), conv.node_mlp[2].bias.copy_(W[p + "node_mlp.2.bias"])
    man = json.load(open(os.path.join(data, "manifest.json")))
    if layer == "pna":
        G = cj["num_gaussians"]
        convs, norms = gnn_peer.pyg_pna_layers(C, L, G, man["splits"]["train"]["stats"]["in_degree_histogram"])
        convs, norms = convs.double(), norms.double().eval()
        for l in range(L):
            p, conv, bn = "convs.%d." % l, convs[l], norms[l].module
            with torch.no_grad():
                conv.edge_encoder.weight.copy_(W[p + "edge_encoder.weight"].T)
                conv.edge_encoder.bias.copy_(W[p + "edge_encoder.bias"])
                conv.pre_nns[0][0].weight.copy_(W[p + "pre_nns.0.0.weight"].T)
                conv.pre_nns[0][0].bias.copy_(W[p + "pre_nns.0.0.bias"])
                conv.post_nns[0][0].weight.copy_(W[p + "post_nns.0.0.weight"].T), conv.post_nns[0][0].bias.zero_()
                conv.lin.weight.copy_(W[p + "lin.weight"].T), conv.lin.bias.zero_()
                bn.weight.copy_(W[p + "norm.weight"]), bn.bias.copy_(W[p + "norm.bias"])
                bn.running_mean.copy_(W[p + "norm.running_mean"]), bn.running_var.copy_(W[p + "norm.running_var"])
            assert abs(float(conv.aggr_module.avg_deg_lin) - cj["pna_delta"][1]) < 1e-6 * cj["pna_delta"][1]
            assert abs(float(conv.aggr_module.avg_deg_log) - cj["pna_delta"][0]) < 1e-6 * cj["pna_delta"][0]
        smearing = GaussianSmearing(0.0, cutoff, G)
        convs = list(zip(convs, norms))
    structs = []
    for f in man["splits"]["test"]["files"]:
        structs += gnn_peer.read_shard(os.path.join(data, f["file"]))
    e_err, f_err = [], []
    with torch.no_grad():
        for st in structs:
            b, n = gnn_peer.batch_of([st])
            b = {k: (v.double() if v.is_floating_point() else v) for k, v in b.items()}
            vec, d, edge_index = gnn_peer.edge_geometry(b)
            h = W["embedding.weight"][b["species"]]
            for conv in convs:
                if layer == "pna":
                    h = act(conv[1](conv[0](h, edge_index, smearing(d))))
                elif layer == "schnet":
                    h = act(conv(h, edge_index, d, smearing(d)))
                else:
                    h = act(conv(h, edge_index, d * d))
            e, f, atoms = ref.heads_outputs(W, b, s, h, vec, d)
            e_atom = e[0].item() * norm["energy_per_atom_std"] + norm["energy_per_atom_mean"]
            e_err.append(abs(e_atom - st["energy"] / n))
            f_err.append(np.abs(f.numpy() * norm["force_scale"] - st["forces"]).ravel())
    return float(np.mean(e_err)), float(np.mean(np.concatenate(f_err))), len(structs)


def check(layer):
    data, ckpt, scores = weft_checkpoint(layer)
    e_mae, f_mae, n = pyg_predictions(data, ckpt, layer)
    we, wf = scores["model"]["energy_mae_per_atom"], scores["model"]["force_mae"]
    pu.report("pyg_gnn_" + layer, structures=n, weft_energy_mae=we, pyg_energy_mae=e_mae, weft_force_mae=wf,
              pyg_force_mae=f_mae, energy_rel=abs(we - e_mae) / e_mae, force_rel=abs(wf - f_mae) / f_mae)
    assert abs(we - e_mae) <= 1e-5 * e_mae, (we, e_mae)
    assert abs(wf - f_mae) <= 1e-5 * f_mae, (wf, f_mae)


def schnet_checkpoint():
    check("schnet")


def egnn_checkpoint():
    check("egnn")


def pna_checkpoint():
    check("pna")


if __name__ == "__main__":
    sys.exit(pu.main({"schnet_checkpoint": schnet_checkpoint, "egnn_checkpoint": egnn_checkpoint,
                      "pna_checkpoint": pna_checkpoint}))
