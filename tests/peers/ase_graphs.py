"""ASE in the peers' environment (CTest label `peers`): weft's graph data (issue 33) against the
atomistic tool its users run. Structures computed with ASE's EMT calculator (Cu-Au alloys,
strained and rattled FCC cells, a triclinic cell shorter than twice the cutoff, a molecule
without a cell) are written by ASE as extended XYZ; `weft prepare --xyz` turns them into graph
shards, which this script reads by the documented layout (docs/formats-graphs.md). Checked:
species, positions, cells, pbc, energies and forces equal what ASE reads back from the same file,
and every structure's edges equal ASE's neighbour list (ase.neighborlist.neighbor_list 'ijSd':
the same (receiver, source, shift) set, distances within 1e-12 A).
"""
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers_util as pu  # noqa: E402

CUTOFF = 4.0


def structures():
    from ase import Atoms
    from ase.build import bulk
    from ase.calculators.emt import EMT
    from ase.calculators.singlepoint import SinglePointCalculator
    rng = np.random.default_rng(7)
    out = []
    for k in range(6):
        a = bulk("Cu", "fcc", a=3.7, cubic=True).repeat((2, 2, 1 + k % 2))
        au = rng.random(len(a)) < 0.3
        a.symbols[au] = "Au"
        a.set_cell(a.cell * (1 + 0.02 * (rng.random() - 0.5)), scale_atoms=True)
        a.rattle(0.05, seed=k)
        out.append(a)
    tri = Atoms("Cu3Au", scaled_positions=rng.random((4, 3)),
                cell=[[3.1, 0, 0], [1.2, 2.9, 0], [0.4, -0.7, 3.3]], pbc=True)  # shorter than 2 x cutoff
    out.append(tri)
    slab = bulk("Cu", "fcc", a=3.6, cubic=True).repeat((2, 2, 1))
    slab.pbc = [True, True, False]
    out.append(slab)
    mol = Atoms("Cu4", positions=rng.random((4, 3)) * 3.0)  # no cell
    out.append(mol)
    for a in out:
        a.calc = EMT()
        e, f = a.get_potential_energy(), a.get_forces()
        a.calc = SinglePointCalculator(a, energy=e, forces=f)
    return out


def read_shard(path):
    """A graph shard by the layout of docs/formats-graphs.md."""
    b = open(path, "rb").read()
    h = struct.unpack("<8q", b[:64])
    assert h[0] == 0x4850524754464557 and h[1] == 1, h
    S, A, E, flags = h[2], h[3], h[4], h[5]
    at = 64

    def take(dtype, n):
        nonlocal at
        a = np.frombuffer(b, dtype=dtype, count=n, offset=at)
        at += (a.nbytes + 7) // 8 * 8
        return a
    aoff, eoff = take("<i8", S + 1), take("<i8", S + 1)
    energy, lattice, pbc = take("<f8", S), take("<f8", 9 * S).reshape(S, 3, 3), take("u1", 8 * S).reshape(S, 8)[:, :3]
    species, pos = take("<i4", A), take("<f8", 3 * A).reshape(A, 3)
    forces = take("<f8", 3 * A).reshape(A, 3) if flags & 2 else None
    src, dst, shift = take("<i4", E), take("<i4", E), take("<i4", 3 * E).reshape(E, 3)
    assert at == len(b), (at, len(b))
    out = []
    for s in range(S):
        a0, a1, e0, e1 = aoff[s], aoff[s + 1], eoff[s], eoff[s + 1]
        out.append(dict(energy=energy[s], lattice=lattice[s], pbc=pbc[s].astype(bool), species=species[a0:a1],
                        pos=pos[a0:a1], forces=None if forces is None else forces[a0:a1],
                        src=src[e0:e1], dst=dst[e0:e1], shift=shift[e0:e1]))
    return out


def test_prepare_xyz_matches_ase():
    import ase.io
    from ase.neighborlist import neighbor_list
    d = pu.scratch("ase_graphs")
    path = os.path.join(d, "emt.xyz")
    ase.io.write(path, structures(), format="extxyz")
    frames = ase.io.read(path, index=":")  # what the file holds, as ASE reads it
    out = os.path.join(d, "graphs")
    pu.weft("prepare", "--xyz", path, "--out", out, "--cutoff", CUTOFF, "--val-fraction", 0, "--test-fraction", 0)
    m = json.load(open(os.path.join(out, "manifest.json")))
    got = []
    for f in m["splits"]["train"]["files"]:
        got += read_shard(os.path.join(out, f["file"]))
    assert len(got) == len(frames), (len(got), len(frames))
    edges = 0
    for k, (g, a) in enumerate(zip(got, frames)):
        assert list(g["species"]) == list(a.numbers), k
        assert np.array_equal(g["pos"], a.positions), k
        assert np.array_equal(g["lattice"], np.array(a.cell)), k
        assert list(g["pbc"]) == list(a.pbc), k
        assert g["energy"] == a.get_potential_energy(), k
        assert np.array_equal(g["forces"], a.get_forces()), k
        i, j, S, dist = neighbor_list("ijSd", a, CUTOFF)
        want = sorted(zip(i.tolist(), j.tolist(), map(tuple, S.tolist())))
        have = sorted(zip(g["dst"].tolist(), g["src"].tolist(), map(tuple, g["shift"].tolist())))
        assert want == have, "structure %d: weft %d edges, ASE %d; first difference %s" % (
            k, len(have), len(want), next((x for x in zip(have, want) if x[0] != x[1]), None))
        vec = g["pos"][g["src"]] + g["shift"] @ np.array(a.cell) - g["pos"][g["dst"]]
        order = np.lexsort((S[:, 2], S[:, 1], S[:, 0], j, i))
        worder = np.lexsort((g["shift"][:, 2], g["shift"][:, 1], g["shift"][:, 0], g["src"], g["dst"]))
        assert np.max(np.abs(np.linalg.norm(vec, axis=1)[worder] - dist[order]), initial=0.0) < 1e-12, k
        edges += len(have)
    assert edges > 500
    pu.report("ase_graphs", structures=len(got), edges=edges, cutoff=CUTOFF)


if __name__ == "__main__":
    sys.exit(pu.main({"extxyz_graphs": test_prepare_xyz_matches_ase}))
