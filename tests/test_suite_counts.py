"""bench.suite.counts: site counts of suite entries with the suite's generated inputs (real PoCL).

Expected values come from the generated arrays themselves: the CSR row loop runs nnz / rows
times per row; the Lennard-Jones cutoff test is true for the share of neighbour pairs closer
than the cutoff, computed here with numpy from the positions and the neighbour list."""

from __future__ import annotations

import numpy as np
import pytest
from kernelcast.bench.suite import load_manifest
from kernelcast.bench.suite.compare import default_suite
from kernelcast.bench.suite.counts import measure_suite_counts, suite_counts


@pytest.fixture(scope="module")
def suite():
    return load_manifest(default_suite())


def test_csr_rowwise_trips_are_nnz_per_row(suite, harness):
    spec = suite.kernel("spmv-csr-scalar")
    inst = spec.instance(4096)
    rows, nnz = inst.scalars["A.rows"], inst.scalars["A.nnz"]
    sc = suite_counts(spec, 4096, harness)
    assert sc.items == 4096
    assert sc.loops["trip_l18_c5"] == (rows, nnz)
    assert sc.branches["br_l14_c5"] == (4096, 0)              # gsize == rows: nobody leaves early


def test_md_lj_neighbour_loop_and_cutoff_share(suite, harness):
    spec = suite.kernel("md-lj")
    inst = spec.instance(1024)
    atoms, k = inst.arg("atoms").value, inst.arg("nbrs_per_atom").value
    pos = inst.arrays["where"].reshape(-1, 4)[:, :3].astype(np.float64)
    nbr = inst.arrays["nbr_list"].reshape(k, atoms)
    d = pos[None, :, :] - pos[nbr]                             # (k, atoms, 3)
    inside = float(np.mean((d ** 2).sum(-1) < inst.arg("cut_sq").value))
    sc = suite_counts(spec, 1024, harness)
    assert sc.loops["trip_l16_c5"] == (atoms, atoms * k)
    assert sc.values()["br_l22_c9"] == pytest.approx(inside, abs=2 / (atoms * k))


def test_every_suite_entry_can_be_counted(suite, harness):
    rows = measure_suite_counts(suite, harness, max_sizes=1)
    assert len(rows) == len(suite.kernels)
    assert [r["id"] for r in rows if "error" in r] == []
    assert all(r["items"] > 0 and r["sites"] > 0 for r in rows)
