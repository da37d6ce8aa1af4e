"""``--arg NAME=@FILE.npy``: real inputs as buffers, and ``measure --counts`` on them (real PoCL).

The CSR matrix is written here with known row lengths, so the row loop's mean trip count is
nnz / rows, computed from the lengths."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from kernelcast.argspec import SpecError, arg_arrays, check_against_signature, parse_arg
from kernelcast.clang import kernel_signatures
from tests.kernels import CSR


@pytest.fixture()
def csr(tmp_path):
    lengths = np.tile(np.array([0, 3, 10, 51], dtype=np.int64), 125)          # 500 rows, 64 nnz per 4 rows
    rowptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    nnz = int(rowptr[-1])
    for name, a in (("rowptr", rowptr), ("col", (np.arange(nnz) % 500).astype(np.int32)),
                    ("val", np.ones(nnz, np.float32))):
        np.save(tmp_path / f"{name}.npy", a)
    (tmp_path / "csr.cl").write_text(CSR)
    return tmp_path, nnz


def test_file_binding_types_counts_and_vector_regrouping(tmp_path):
    np.save(tmp_path / "p.npy", np.zeros((10, 4), np.float32))
    b = parse_arg(f"p=@{tmp_path / 'p.npy'}")
    assert (b.kind, b.dtype, b.count, b.init) == ("buffer", "float", 40, "array")
    params = kernel_signatures("__kernel void k(__global float4* p) { p[0] = 0; }")["k"]
    check_against_signature([b], params, "k")
    assert (b.dtype, b.count) == ("float4", 10)
    assert arg_arrays([b])["p"].shape == (40,)
    np.save(tmp_path / "odd.npy", np.zeros(6, np.float32))
    odd = parse_arg(f"p=@{tmp_path / 'odd.npy'}")
    with pytest.raises(SpecError, match="whole number"):
        check_against_signature([odd], params, "k")
    np.save(tmp_path / "obj.npy", np.array(["a"], dtype=object), allow_pickle=True)
    for bad in ("p=@", f"p=@{tmp_path / 'none.npy'}", f"p=@{tmp_path / 'obj.npy'}"):
        with pytest.raises(SpecError):
            parse_arg(bad)


def test_measure_counts_on_file_inputs(csr, device):
    d, nnz = csr
    cmd = [sys.executable, "-m", "kernelcast.cli", "measure", "--kernel", str(d / "csr.cl"), "--gsize", "512",
           "--lsize", "64", "--meter", "none", "--repeats", "1", "--min-time", "0", "--counts", "--json",
           "--arg", f"rowptr=@{d / 'rowptr.npy'}", "--arg", f"col=@{d / 'col.npy'}", "--arg", f"val=@{d / 'val.npy'}",
           "--arg", "x=buffer:float:500:ones", "--arg", "y=buffer:float:500", "--arg", "rows=500"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    c = out["site_counts"]
    assert c["items"] == 512
    assert c["loops"]["trip_l6_c3"] == [500, nnz] and nnz == 125 * 64
    assert c["values"]["trip_l6_c3"] == pytest.approx(16.0)
    assert c["branches"]["br_l4_c3"] == [512, 12]
    r = subprocess.run(cmd[:-2] + ["--arg", "rows=500", "--arg", f"rows=@{d / 'val.npy'}"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
