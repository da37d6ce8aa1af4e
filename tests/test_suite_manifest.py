"""Suite manifests: expressions, validation errors, generators, paths (no device needed)."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from kernelcast.bench.suite import schema
from kernelcast.bench.suite.generators import KINDS, GeneratorError, bfs_levels, generate, lattice_offsets
from kernelcast.bench.suite.manifest import load_manifest, parse_manifest
from kernelcast.bench.suite.model import ManifestError
from kernelcast.bench.suite.schema import SCHEMA_PATH

from kernelcast.errors import InputError
from kernelcast.expr import ExprError, evaluate, evaluate_int, names_in

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "suites" / "kernelcast" / "suite.json"

KERNEL_SRC = """
__kernel void my_axpy(__global const float *x, __global float *y, __local float *tmp,
                      const float alpha, const int count) {
    int i = get_global_id(0);
    tmp[get_local_id(0)] = x[i < count ? i : 0];
    if (i < count) y[i] = alpha * tmp[get_local_id(0)] + y[i];
}
__kernel void my_gather(__global const int *starts, __global const int *idx, __global const float *vals,
                        __global float *out, const int rows) {
    int r = get_global_id(0);
    if (r < rows) { float s = 0; for (int k = starts[r]; k < starts[r + 1]; k++) s += vals[k] * (float)idx[k];
                    out[r] = s; }
}
"""


def _entry() -> dict:
    return {
        "id": "axpy",
        "file": "k.cl",
        "kernel": "my_axpy",
        "sizes": [1024, "2 * KI"],
        "gsize": "round_up(n, WG)",
        "lsize": "WG",
        "args": [
            {"name": "x", "buffer": "float", "count": "n", "init": "random"},
            {"name": "y", "buffer": "float", "count": "n", "init": "zeros"},
            {"name": "tmp", "local": "float", "count": "WG"},
            {"name": "alpha", "scalar": "float", "value": "1.5"},
            {"name": "count", "scalar": "int", "value": "n"},
        ],
    }


def _gather_entry() -> dict:
    return {
        "id": "gather",
        "file": "k.cl",
        "kernel": "my_gather",
        "sizes": [100, 300],
        "gsize": "round_up(n, 64)",
        "lsize": 64,
        "generators": {"A": {"csr": {"rows": "n", "cols": "2 * n", "nnz_per_row": 5, "distribution": "uniform"}}},
        "args": [
            {"name": "starts", "buffer": "int", "init": {"from": "A.row_offsets"}},
            {"name": "idx", "buffer": "int", "init": {"from": "A.col_indices"}},
            {"name": "vals", "buffer": "float", "init": {"from": "A.values"}},
            {"name": "out", "buffer": "float", "count": "n", "init": "zeros"},
            {"name": "rows", "scalar": "int", "value": {"from": "A.rows"}},
        ],
    }


def _doc(*entries: dict) -> dict:
    return {"name": "t", "version": 1, "constants": {"KI": 1024, "WG": 64},
            "kernels": list(entries) if entries else [_entry()]}


@pytest.fixture()
def tdir(tmp_path: Path) -> Path:
    (tmp_path / "k.cl").write_text(KERNEL_SRC)
    return tmp_path


def _load(tdir: Path, doc: dict):
    p = tdir / "m.json"
    p.write_text(json.dumps(doc))
    return load_manifest(p)


def _error(tdir: Path, doc: dict) -> ManifestError:
    with pytest.raises(ManifestError) as ei:
        _load(tdir, doc)
    return ei.value


def _has(err: ManifestError, kernel: str | None, field: str, text: str = "") -> None:
    hits = [i for i in err.issues if i.kernel == kernel and field in i.field and text in i.message]
    assert hits, f"no issue ({kernel!r}, {field!r}, {text!r}) in:\n{err}"
    msg = str(err)
    if kernel is not None:
        assert repr(kernel) in msg
    assert field in msg


# -- expressions ---------------------------------------------------------------------------------

@pytest.mark.parametrize("expr, env, want", [
    ("n", {"n": 7}, 7),
    ("2 * n + 1", {"n": 7}, 15),
    ("n // 3", {"n": 10}, 3),
    ("n % 3", {"n": 10}, 1),
    ("n / 4", {"n": 10}, 2.5),
    ("2 ** 10", {}, 1024),
    ("-(n - 3)", {"n": 1}, 2),
    ("min(n, 5, 9)", {"n": 7}, 5),
    ("max(n, WG)", {"n": 7, "WG": 64}, 64),
    ("ceil(n / 256) * 256", {"n": 1000}, 1024),
    ("round_up(n, 256)", {"n": 1025}, 1280),
    ("log2(n)", {"n": 1024}, 10),
    ("floor(sqrt(n))", {"n": 17}, 4),
    (1024, {}, 1024),
    (2.5, {}, 2.5),
])
def test_expressions_evaluate(expr, env, want):
    assert evaluate(expr, env) == want


@pytest.mark.parametrize("expr", [
    "__import__('os')",
    "__import__('os').system('true')",
    "open('/etc/passwd')",
    "n.__class__",
    "().__class__.__bases__",
    "(lambda: 1)()",
    "[1, 2]",
    "'text'",
    "n if n else 1",
    "n < 3",
    "n and 1",
    "n << 2",
    "eval('1')",
    "min(n, key=abs)",
    "globals()",
    "x[0]",
    "f'{n}'",
    "n;1",
    "",
])
def test_unsafe_or_invalid_expressions_rejected(expr):
    with pytest.raises(ExprError):
        evaluate(expr, {"n": 4, "x": 1})


@pytest.mark.parametrize("expr, text", [
    ("m + 1", "unknown name 'm'"),
    ("1 / 0", "division by zero"),
    ("n % 0", "division by zero"),
    ("2 ** 1000", "exponent"),
    ("(10 ** 60) ** 60", "beyond"),
    ("log2(0)", "log2"),
    ("ceil()", "takes 1 arguments"),
])
def test_expression_errors_say_why(expr, text):
    with pytest.raises(ExprError, match=re.escape(text)):
        evaluate(expr, {"n": 4})


def test_evaluate_int_and_names():
    assert evaluate_int("n / 2", {"n": 8}) == 4
    with pytest.raises(ExprError, match="not an integer"):
        evaluate_int("n / 3", {"n": 8})
    assert names_in("max(n, WG) * ceil(k)") == {"n", "WG", "k"}


# -- loading -------------------------------------------------------------------------------------

def test_valid_manifest_instances(tdir):
    suite = _load(tdir, _doc(_entry(), _gather_entry()))
    assert suite.ids() == ["axpy", "gather"] and len(suite) == 4
    insts = list(suite.instances())
    assert [(i.id, i.n) for i in insts] == [("axpy", 1024), ("axpy", 2048), ("gather", 100), ("gather", 300)]
    a = insts[1]
    assert a.gsize == (2048,) and a.lsize == (64,) and a.label == "axpy n=2048"
    assert [b.name for b in a.args] == ["x", "y", "tmp", "alpha", "count"]        # signature order
    assert a.arg("tmp").count == 64 and a.arg("count").value == 2048 and a.arg("alpha").value == 1.5
    assert a.arg("y").init == "zeros" and "y" not in a.arrays
    assert a.arg("x").init == "array" and a.arrays["x"].dtype == np.float32 and a.arrays["x"].size == 2048
    assert a.kernel.name == "my_axpy" and a.kernel.dims == 1 and a.config.gsize == (2048,)
    g = insts[2]
    starts, idx = g.arrays["starts"], g.arrays["idx"]
    assert g.arg("starts").count == 101 and starts.dtype == np.int32
    assert g.arg("idx").count == g.arg("vals").count == starts[-1] == g.scalars["A.nnz"]
    assert idx.min() >= 0 and idx.max() < 200
    assert g.arg("rows").value == 100


def test_instances_are_deterministic_and_seeded(tdir):
    s1, s2 = _load(tdir, _doc()), _load(tdir, _doc())
    a1, a2 = s1.kernel("axpy").instance(1024), s2.kernel("axpy").instance(1024)
    np.testing.assert_array_equal(a1.arrays["x"], a2.arrays["x"])
    b = s1.kernel("axpy").instance(2048)
    assert not np.array_equal(a1.arrays["x"], b.arrays["x"][:1024])
    doc = _doc()
    doc["seed"] = 5
    c = _load(tdir, doc).kernel("axpy").instance(1024)
    assert not np.array_equal(a1.arrays["x"], c.arrays["x"])


def test_initializers(tdir):
    e = _entry()
    e["args"][0]["init"] = "range"
    e["args"][1]["init"] = {"constant": "n / 2"}
    a = _load(tdir, _doc(e)).kernel("axpy").instance(1024)
    np.testing.assert_array_equal(a.arrays["x"], np.arange(1024, dtype=np.float32))
    assert np.all(a.arrays["y"] == 512)
    e["args"][0]["init"] = {"random": {"low": -2, "high": "n", "seed": 3}}
    x = _load(tdir, _doc(e)).kernel("axpy").instance(1024).arrays["x"]
    assert x.min() >= -2 and x.max() < 1024 and x.std() > 100


def test_integer_random_indices_in_range(tdir):
    e = _gather_entry()
    e["args"][1] = {"name": "idx", "buffer": "int", "count": "5 * n", "init": {"random": {"low": 0, "high": "n"}}}
    e["args"][0] = {"name": "starts", "buffer": "int", "count": "n + 1", "init": "range"}
    g = _load(tdir, _doc(e)).kernel("gather").instance(300)
    assert g.arrays["idx"].min() >= 0 and g.arrays["idx"].max() < 300 and g.arrays["idx"].dtype == np.int32


def test_relative_absolute_and_env_paths(tdir, tmp_path_factory, monkeypatch):
    other = tmp_path_factory.mktemp("elsewhere")
    (other / "sub").mkdir()
    (other / "sub" / "kern.cl").write_text(KERNEL_SRC)
    e = _entry()
    e["file"] = str(other / "sub" / "kern.cl")                 # absolute
    assert _load(tdir, _doc(e)).kernel("axpy").file == other / "sub" / "kern.cl"
    (tdir / "nested").mkdir()
    p = tdir / "nested" / "m.json"
    e["file"] = "../k.cl"                                      # relative to the manifest, not the cwd
    p.write_text(json.dumps(_doc(e)))
    assert load_manifest(p).kernel("axpy").file == (tdir / "k.cl").resolve()
    monkeypatch.setenv("KC_TEST_CHECKOUT", str(other))
    e["file"] = "$KC_TEST_CHECKOUT/sub/kern.cl"                # environment variables, like $SHOC
    assert _load(tdir, _doc(e)).kernel("axpy").file == other / "sub" / "kern.cl"
    e["file"] = "${KC_TEST_UNSET_VAR}/kern.cl"
    _has(_error(tdir, _doc(e)), "axpy", "file", "KC_TEST_UNSET_VAR")


def test_defines_includes_prelude(tdir):
    (tdir / "inc").mkdir()
    (tdir / "inc" / "scale.h").write_text("#define SCALE_IT(v) ((v) * FACTOR)\n")
    (tdir / "d.cl").write_text('#include "scale.h"\n__kernel void dk(__global FPTYPE *a) '
                               '{ a[get_global_id(0)] = SCALE_IT(a[get_global_id(0)]) + (FPTYPE)TILE; }\n')
    e = {"id": "d", "file": "d.cl", "kernel": "dk", "defines": {"TILE": "WG * 2", "FACTOR": 3},
         "includes": ["inc"], "prelude": "#define FPTYPE float", "build_options": "-cl-fast-relaxed-math",
         "sizes": [256], "gsize": "n", "lsize": "TILE",
         "args": [{"name": "a", "buffer": "float", "count": "n"}]}
    k = _load(tdir, _doc(e)).kernel("d")
    assert "-DTILE=128" in k.build_options and "-DFACTOR=3" in k.build_options
    assert "-cl-fast-relaxed-math" in k.build_options and f"-I {tdir / 'inc'}" in k.build_options
    assert k.source.startswith("#define FPTYPE float\n")
    assert k.instance(256).lsize == (128,)


def test_struct_parameters_bind_as_vectors(tdir):
    (tdir / "s.cl").write_text(
        "typedef struct { int first; int count; } vtx_t;\n"
        "__kernel void walk(__global const vtx_t *nodes, __global const int *edges, __global int *out, int nv) {\n"
        "  int v = get_global_id(0); if (v < nv) { int s = 0;\n"
        "  for (int e = nodes[v].first; e < nodes[v].first + nodes[v].count; e++) s += edges[e]; out[v] = s; } }\n")
    e = {"id": "walk", "file": "s.cl", "kernel": "walk", "sizes": [500], "gsize": "round_up(n, 64)", "lsize": 64,
         "generators": {"G": {"graph": {"vertices": "n", "avg_degree": 3}}},
         "args": [{"name": "nodes", "buffer": "int2", "init": {"from": "G.node_pairs"}},
                  {"name": "edges", "buffer": "int", "init": {"from": "G.adjacency"}},
                  {"name": "out", "buffer": "int", "count": "n", "init": "zeros"},
                  {"name": "nv", "scalar": "int", "value": {"from": "G.vertices"}}]}
    inst = _load(tdir, _doc(e)).kernel("walk").instance(500)
    assert inst.arg("nodes").count == 500 and inst.arrays["nodes"].size == 1000
    assert inst.arg("nv").value == 500


def test_without_signature_check(tdir):
    p = tdir / "m.json"
    p.write_text(json.dumps(_doc()))
    assert load_manifest(p, check_signatures=False).ids() == ["axpy"]
    e = _entry()
    e["kernel"] = "nothere"
    p.write_text(json.dumps(_doc(e)))
    with pytest.raises(ManifestError, match="no kernel 'nothere'"):
        load_manifest(p, check_signatures=False)


def test_yaml_manifest(tdir):
    import yaml

    p = tdir / "m.yaml"
    p.write_text(yaml.safe_dump(_doc()))
    assert load_manifest(p).ids() == ["axpy"]


# -- validation errors: each names the kernel id and the field ----------------------------------

def _mutate(fn) -> dict:
    e = _entry()
    fn(e)
    return _doc(e)


@pytest.mark.parametrize("mutate, field, text", [
    (lambda e: e.update(colour="red"), "colour", "unknown field"),
    (lambda e: e["args"][0].update(size=3), "args[0].size", "unknown field"),
    (lambda e: e.pop("gsize"), "gsize", "missing field"),
    (lambda e: e.pop("kernel"), "kernel", "missing field"),
    (lambda e: e["args"][3].pop("value"), "value", "missing field"),
    (lambda e: e["args"][2].pop("count"), "count", "missing field"),
    (lambda e: e["args"][0].update(buffer="floot"), "buffer", "not an OpenCL C element type"),
    (lambda e: e["args"][0].update(buffer="double"), "buffer", "does not match"),
    (lambda e: e["args"][3].update(scalar="int"), "scalar", "does not match"),
    (lambda e: e.update(gsize="round_up(n, "), "gsize", "cannot parse"),
    (lambda e: e.update(gsize="n * m"), "gsize", "unknown name 'm'"),
    (lambda e: e.update(gsize="n / 3"), "gsize", "not an integer"),
    (lambda e: e.update(gsize="__import__('os')"), "gsize", "not allowed"),
    (lambda e: e.update(lsize="100"), "lsize", "does not divide"),
    (lambda e: e["args"][0].update(count="n - 5000"), "count", "negative"),
    (lambda e: e["args"][4].update(value="2 ** 40"), "value", "out of range"),
    (lambda e: e["args"][3].update(value="alpha"), "value", "unknown name"),
    (lambda e: e.update(file="missing.cl"), "file", "not found"),
    (lambda e: e.update(kernel="my_axpx"), "kernel", "no kernel 'my_axpx'"),
    (lambda e: e["args"].pop(1), "args", "parameter 'y'"),
    (lambda e: e["args"].append({"name": "beta", "scalar": "float", "value": 1}), "beta", "not a parameter"),
    (lambda e: e["args"].__setitem__(2, {"name": "tmp", "buffer": "float", "count": 4}), "tmp",
     "bound as a buffer"),
    (lambda e: e["args"][0].update(scalar="float"), "args[0]", "exactly one of"),
    (lambda e: e["args"][0].update(init="randm"), "init", "is not one of \"random\""),
    (lambda e: e["args"][0].update(init={"random": {"low": 5, "high": 1}}), "init.random", "below"),
    (lambda e: e["args"][0].update(init={"from": "B.values"}), "init.from", "unknown generator 'B'"),
    (lambda e: e.update(sizes=[]), "sizes", "non-empty"),
    (lambda e: e.update(sizes=[64, 64]), "sizes[1]", "duplicate"),
    (lambda e: e.update(sizes=[0]), "sizes[0]", "not a positive"),
    (lambda e: e.update(constants={"half": "n / 2", "bad": "nope + 1"}), "constants.bad", "unknown name"),
    (lambda e: e.update(defines={"X": "n"}), "defines.X", "not n"),
])
def test_each_mistake_names_kernel_and_field(tdir, mutate, field, text):
    err = _error(tdir, _mutate(mutate))
    _has(err, "axpy", field, text)


@pytest.mark.parametrize("mutate, field, text", [
    (lambda e: e["args"][1].update(init={"from": "A.colum_indices"}), "init.from", "unknown array part"),
    (lambda e: e["args"][1].update(init={"from": "A.nnz"}), "init.from", "scalar part"),
    (lambda e: e["args"][4].update(value={"from": "A.values"}), "value.from", "array part"),
    (lambda e: e["args"][1].update(init={"from": "A"}), "init.from", "generator.part"),
    (lambda e: e["generators"]["A"]["csr"].pop("rows"), "generators.A.csr.rows", "missing field"),
    (lambda e: e["generators"]["A"]["csr"].update(density=0.1), "generators.A.csr.density", "unknown field"),
    (lambda e: e["generators"]["A"]["csr"].update(distribution="zipf"), "distribution", "not one of"),
    (lambda e: e["generators"].update(B={"coo": {}}), "generators.B", "needs exactly one of 'csr', 'ell'"),
    (lambda e: e["generators"]["A"]["csr"].update(rows="n - 1000"), "generators.A.rows", "below the minimum"),
])
def test_generator_mistakes(tdir, mutate, field, text):
    e = _gather_entry()
    mutate(e)
    _has(_error(tdir, _doc(e)), "gather", field, text)


def test_suite_level_and_multiple_errors(tdir):
    doc = _doc(_entry(), _gather_entry())
    doc["flavour"] = 1
    doc["version"] = 2
    doc["kernels"][0]["gsize"] = "n +"
    doc["kernels"][1]["id"] = "axpy"
    err = _error(tdir, doc)
    _has(err, None, "flavour", "unknown field")
    _has(err, None, "version", "unsupported")
    _has(err, "axpy", "gsize", "cannot parse")
    _has(err, "axpy", "id", "duplicate")
    assert str(err).count("\n  - ") == len(err.issues) >= 4
    missing = _error(tdir, {"version": 1, "kernels": []})
    _has(missing, None, "name", "missing")
    _has(missing, None, "kernels", "non-empty")
    e = _entry()
    e.pop("id")
    _has(_error(tdir, _doc(e)), "#0", "id", "missing")


def test_unreadable_documents(tdir):
    (tdir / "bad.json").write_text("{not json")
    with pytest.raises(ManifestError, match="not valid JSON"):
        load_manifest(tdir / "bad.json")
    with pytest.raises(ManifestError, match="cannot read"):
        load_manifest(tdir / "absent.json")


def test_generated_count_mismatch_and_integer_ranges(tdir):
    e = _gather_entry()
    e["args"][1]["count"] = "5"
    suite = _load(tdir, _doc(e))
    with pytest.raises(ManifestError) as ei:
        suite.kernel("gather").instance(100)
    _has(ei.value, "gather", "args[1] (idx).count", "part A.col_indices")
    assert "n=100" in str(ei.value) and str(ei.value).startswith(str(tdir / "m.json"))
    e = _gather_entry()
    e["args"][3]["init"] = {"constant": 1e40}
    e["args"][4] = {"name": "rows", "scalar": "int", "value": "3e9"}
    err = _error(tdir, _doc(e))
    _has(err, "gather", "args[3] (out).init.constant", "overflows float")
    _has(err, "gather", "args[4] (rows).value", "out of range")
    a = _entry()
    a["kernel"], a["file"] = "my_gather", "k.cl"
    a["args"] = [{"name": "starts", "buffer": "int", "count": "n + 1", "init": {"constant": "3 * 10**9"}},
                 {"name": "idx", "buffer": "int", "count": "n", "init": {"random": {"low": -1, "high": "2**40"}}},
                 {"name": "vals", "buffer": "float", "count": "n"}, {"name": "out", "buffer": "float", "count": "n"},
                 {"name": "rows", "scalar": "int", "value": "n"}]
    err = _error(tdir, _doc(a))
    _has(err, "axpy", "args[0] (starts).init.constant", "outside int")
    _has(err, "axpy", "args[1] (idx).init.random", "outside int")


# -- generators ----------------------------------------------------------------------------------

@pytest.mark.parametrize("dist", ["fixed", "uniform", "skewed"])
@pytest.mark.parametrize("band", [None, 24])
def test_csr_generator_is_valid(dist, band):
    g = generate("csr", {"rows": 500, "cols": 300, "nnz_per_row": 12, "distribution": dist, "band": band}, 7)
    off, cols, vals, lens = (g.arrays[k] for k in ("row_offsets", "col_indices", "values", "row_lengths"))
    assert off.shape == (501,) and off[0] == 0 and off[-1] == len(cols) == len(vals) == g.scalars["nnz"]
    assert np.all(np.diff(off) >= 0) and np.array_equal(np.diff(off), lens)
    assert cols.min() >= 0 and cols.max() < 300
    for r in range(500):
        row = cols[off[r]:off[r + 1]]
        assert np.all(np.diff(row) > 0), f"row {r} columns not distinct and sorted"
        if band is not None and len(row):
            assert row.max() - row.min() < band
    if dist == "fixed":
        assert np.all(lens == 12)
    assert abs(lens.mean() - 12) < 3 and vals.dtype == np.float32 and np.all(np.abs(vals) <= 1)


def test_ell_generator_matches_its_csr():
    p = {"rows": 257, "cols": 100, "nnz_per_row": 9, "distribution": "skewed"}
    csr, ell = generate("csr", p, 3), generate("ell", p, 3)
    rows, width = 257, ell.scalars["width"]
    cols, vals, lens = ell.arrays["col_indices"], ell.arrays["values"], ell.arrays["row_lengths"]
    assert cols.shape == vals.shape == (width * rows,) and width == lens.max()
    assert cols.min() >= 0 and cols.max() < 100
    x = np.random.default_rng(0).random(100)
    c2, v2 = cols.reshape(width, rows), vals.reshape(width, rows)            # column-major: slot k of row r
    assert np.all(v2[np.arange(width)[:, None] >= lens[None, :]] == 0)      # padding is zero
    y_ell = (v2 * x[c2]).sum(axis=0)
    off = csr.arrays["row_offsets"]
    y_csr = np.array([(csr.arrays["values"][off[r]:off[r + 1]] * x[csr.arrays["col_indices"][off[r]:off[r + 1]]]).sum()
                      for r in range(rows)])
    np.testing.assert_allclose(y_ell, y_csr, rtol=1e-5, atol=1e-6)
    rm = generate("ell", {**p, "layout": "row_major"}, 3)
    np.testing.assert_array_equal(rm.arrays["col_indices"].reshape(rows, width), c2.T)


def test_graph_generator_bfs_state():
    g = generate("graph", {"vertices": 3000, "avg_degree": 4, "distribution": "skewed"}, 11)
    off, adj = g.arrays["row_offsets"], g.arrays["adjacency"]
    assert off.shape == (3001,) and off[-1] == len(adj) == g.scalars["edges"]
    assert adj.min() >= 0 and adj.max() < 3000 and np.all(np.diff(off) >= 1)
    depth_all = bfs_levels(off, adj, 0)
    lvl = g.scalars["level"]
    fr, vis, depth = g.arrays["frontier"], g.arrays["visited"], g.arrays["depth"]
    assert fr.shape == vis.shape == depth.shape == (3000,)
    np.testing.assert_array_equal(fr.astype(bool), depth_all == lvl)
    np.testing.assert_array_equal(vis.astype(bool), (depth_all >= 0) & (depth_all <= lvl))
    assert np.all(depth[~vis.astype(bool)] == -1) and np.all(g.arrays["next_frontier"] == 0)
    assert fr.sum() == g.scalars["frontier_size"] == np.bincount(depth_all[depth_all >= 0]).max()
    np.testing.assert_array_equal(g.arrays["node_pairs"], np.stack([off[:-1], np.diff(off)], axis=1))
    src = generate("graph", {"vertices": 3000, "avg_degree": 4, "frontier": "source", "source": 17}, 11)
    assert src.arrays["frontier"].sum() == 1 and src.arrays["frontier"][17] == 1 and src.scalars["level"] == 0
    two = generate("graph", {"vertices": 3000, "avg_degree": 4, "frontier": 2}, 11)
    assert two.scalars["level"] == 2
    with pytest.raises(GeneratorError, match="level 99"):
        generate("graph", {"vertices": 3000, "avg_degree": 4, "frontier": 99}, 11)
    with pytest.raises(GeneratorError, match="source"):
        generate("graph", {"vertices": 10, "avg_degree": 2, "source": 10}, 1)


def test_bfs_levels_small():
    # 0 -> 1, 2; 1 -> 3; 2 -> 3; 3 -> 0; 4 isolated
    off = np.array([0, 2, 3, 4, 5, 5])
    adj = np.array([1, 2, 3, 3, 0])
    np.testing.assert_array_equal(bfs_levels(off, adj, 0), [0, 1, 1, 2, -1])


@pytest.mark.parametrize("layout", ["neighbor_major", "atom_major"])
def test_neighbor_generator(layout):
    g = generate("neighbors", {"atoms": 1000, "neighbors": 26, "layout": layout}, 5)
    pos, nl = g.arrays["positions"], g.arrays["neighbor_list"]
    assert pos.shape == (1000, 4) and pos.dtype == np.float32 and np.all(pos[:, 3] == 0)
    table = nl.reshape(26, 1000).T if layout == "neighbor_major" else nl.reshape(1000, 26)
    assert nl.min() >= 0 and nl.max() < 1000
    assert not np.any(table == np.arange(1000)[:, None])
    assert all(len(set(row)) == 26 for row in table)
    d2 = ((pos[:, None, :3] - pos[table][:, :, :3]) ** 2).sum(axis=2)
    assert (d2 < g.scalars["cutoff_sq"]).mean() > 0.7        # mostly real lattice neighbours
    assert len(lattice_offsets(26)) == 26 and (lattice_offsets(6) ** 2).sum(axis=1).max() == 1
    with pytest.raises(GeneratorError, match="too few"):
        generate("neighbors", {"atoms": 5, "neighbors": 26}, 5)


# -- the schema document and the project's suite --------------------------------------------------

def test_schema_document_matches_the_generators():
    s = json.loads(SCHEMA_PATH.read_text())
    gens = {next(iter(o["properties"])): o for o in s["$defs"]["generator"]["oneOf"]}
    assert set(gens) == set(KINDS)
    for name, kind in KINDS.items():
        props = gens[name]["properties"][name]
        assert set(props["properties"]) == {p.name for p in kind.params}, name
        assert set(props["required"]) == {p.name for p in kind.params if p.required}, name
        assert all(part in props["description"] for part in kind.parts), name
        for p in kind.params:
            sch = props["properties"][p.name]
            if p.kind in ("choice", "dtype"):
                assert sch["enum"] == list(p.choices), (name, p.name)
            elif p.kind == "int_or_choice":
                assert sch["anyOf"][0]["enum"] == list(p.choices), (name, p.name)


def test_schema_is_applied(tdir, monkeypatch):
    """Rules only the schema states are enforced, reported at their JSON path, one line each."""
    assert isinstance(schema.validator(), jsonschema.Draft202012Validator)
    e = _entry()
    e["notes"] = 3                                                   # no hand-written check knows 'notes'
    e["args"][3]["value"] = list(range(17))                          # maxItems 16
    err = _error(tdir, _doc(e))
    assert isinstance(err, InputError) and isinstance(err, ValueError)
    _has(err, "axpy", "notes", "must be a string, got 3")
    _has(err, "axpy", "args[3].value", "at most 16 items")
    assert all(line.startswith("  - kernel 'axpy': ") for line in str(err).splitlines()[1:])
    # the rules come from the schema file: tighten it and the same manifest fails
    tight = json.loads(SCHEMA_PATH.read_text())
    tight["$defs"]["kernel"]["properties"]["sizes"]["maxItems"] = 1
    (tdir / "tight.json").write_text(json.dumps(tight))
    monkeypatch.setattr(schema, "SCHEMA_PATH", tdir / "tight.json")
    schema.validator.cache_clear()
    try:
        _has(_error(tdir, _doc()), "axpy", "sizes", "at most 1 items, got 2")
    finally:
        monkeypatch.undo()
        schema.validator.cache_clear()
    assert _load(tdir, _doc()).ids() == ["axpy"]


def test_project_suite_loads():
    suite = load_manifest(SUITE)
    assert len(suite.kernels) >= 10
    for k in suite.kernels:
        assert 6 <= len(k.sizes) <= 10, k.id
        assert k.file.parent == SUITE.parent and k.file.exists()
    # the LLMPerf IV-C hard case: global size fixed while the input grows, in at least two kernels
    fixed = []
    for k in suite.kernels:
        a, b = k.instance(k.sizes[0]), k.instance(k.sizes[1])
        if a.gsize == b.gsize:
            fixed.append(k.id)
    assert len(fixed) >= 2, fixed


def test_project_suite_kernels_not_in_training_corpus():
    bundled = "\n".join(p.read_text() for p in (ROOT / "datagen" / "bundled").glob("*.cl"))
    suite = load_manifest(SUITE)
    for k in suite.kernels:
        assert not re.search(rf"\b{k.kernel}\b", bundled), f"{k.kernel} appears in datagen/bundled"


def test_manifest_document_roundtrip_via_parse(tdir):
    doc = _doc()
    suite = parse_manifest(copy.deepcopy(doc), tdir / "virtual.json")
    assert suite.name == "t" and suite.constants == {"KI": 1024, "WG": 64}


def test_a_local_size_sweep_gives_one_instance_per_size_and_local_size(tdir):
    e = _entry()
    del e["lsize"]
    e["lsizes"] = ["WG", 128, "256"]
    e["gsize"] = "round_up(n, 256)"
    suite = _load(tdir, _doc(e))
    insts = list(suite.instances())
    assert [(i.n, i.lsize) for i in insts] == [(1024, (64,)), (1024, (128,)), (1024, (256,)),
                                               (2048, (64,)), (2048, (128,)), (2048, (256,))]
    assert insts[1].label == "axpy n=1024 lsize=128" and insts[0].gsize == insts[2].gsize == (1024,)


def test_sweep_mistakes_name_the_field(tdir):
    e = _entry()
    e["lsizes"] = [32, 64]                         # and lsize too
    _has(_error(tdir, _doc(e)), "axpy", "lsizes", "not both")
    e = _entry()
    del e["lsize"]
    e["lsizes"] = [64, 48]                         # 48 does not divide round_up(n, 64) = 1024
    _has(_error(tdir, _doc(e)), "axpy", "lsizes[1]", "does not divide")
