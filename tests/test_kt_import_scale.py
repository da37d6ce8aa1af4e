"""Kernel Tuner caches at scale (``kernelcast dataset import-kt``): gzip, truncated caches, T4 files,
benchmark specs, include directories, provenance per row and the shared static analyses, on small
caches and kernels written here."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest
from kernelcast.datagen.dataset import read_dataset
from kernelcast.datagen.ktcache import KTCacheError, load_spec, plan_import, read_kt_cache, rows_equal_cache

from kernelcast.cli import main

KERNEL = """#include "params.h"

__global__ void scale(float *out, const float *in, int n) {
    int i = blockIdx.x * block_size_x * tile + threadIdx.x;
    for (int t = 0; t < tile; t++) {
        int j = i + t * block_size_x;
        if (j < n) out[j] = 2.0f * in[j + HALO];
    }
}
"""
HEADER = "#define HALO 2\n"
STAMP = "2023-06-26 23:16:20.678315+00:00"


def _records() -> dict[str, dict]:
    recs = {}
    for b in (32, 64, 128):
        for tile in (1, 2):
            for fast in (0, 1):
                t = 0.01 * b / 32 + tile * 0.003 + fast * 0.001
                rec = {"block_size_x": b, "tile": tile, "use_fast": fast, "time": t, "times": [t, t * 1.01, t * 0.99],
                       "compile_time": 120.0, "nvml_energy": 0.5 * t, "timestamp": STAMP}
                recs[f"{b},{tile},{fast}"] = rec
    recs["128,2,1"] = {"block_size_x": 128, "tile": 2, "use_fast": 1, "time": "CompilationFailedConfig",
                       "timestamp": STAMP}
    return recs


def _header(device: str = "Test GPU 9000") -> dict:
    return {"device_name": device, "kernel_name": "scale", "problem_size": [4096],
            "tune_params_keys": ["block_size_x", "tile", "use_fast"],
            "tune_params": {"block_size_x": [32, 64, 128], "tile": [1, 2], "use_fast": [0, 1]}, "objective": "time"}


def _cache_text(device: str = "Test GPU 9000") -> str:
    """A cache as Kernel Tuner writes it: the header, then one record per line."""
    head = json.dumps(_header(device), indent=0)[:-1].rstrip() + ',\n"cache": {\n'
    lines = [f'{json.dumps(k)}: {json.dumps(v)}' for k, v in _records().items()]
    return head + ",\n".join(lines) + "}\n}"


def _t4(recs: dict[str, dict]) -> dict:
    out = []
    for rec in recs.values():
        conf = {k: rec[k] for k in ("block_size_x", "tile", "use_fast")}
        failed = isinstance(rec["time"], str)
        out.append({"timestamp": rec["timestamp"], "configuration": conf,
                    "times": {"compilation": rec.get("compile_time", 0), "runtimes": rec.get("times", [])},
                    "invalidity": "compile" if failed else "correct", "correctness": 1,
                    "measurements": [] if failed else [{"name": "time", "value": rec["time"], "unit": "ms"},
                                                       {"name": "nvml_energy", "value": rec["nvml_energy"],
                                                        "unit": ""}],
                    "objectives": ["time"]})
    return {"schema_version": "1.0.0", "results": out, "metadata": {"timeunit": "milliseconds"}}


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    """A git work tree holding a kernel, its header in another directory, and caches."""
    root = tmp_path / "hub"
    (root / "kernels" / "inc").mkdir(parents=True)
    (root / "caches").mkdir()
    (root / "kernels" / "scale.cu").write_text(KERNEL)
    (root / "kernels" / "inc" / "params.h").write_text(HEADER)
    (root / "caches" / "G9.json.gz").write_bytes(gzip.compress(_cache_text("").encode()))
    (root / "caches" / "G9_T4.json").write_text(json.dumps(_t4(_records())))
    (root / "caches" / "plain.json").write_text(_cache_text())
    for args in (["init", "-q"], ["add", "."], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"]):
        subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)
    return root


SPEC = """spec_version: 1
benchmark: scale_bench
source: {repository: example/hub}
kernel:
  file: kernels/scale.cu
  name: scale
  language: cuda
  include_dirs: [kernels/inc]
constants: {halo: 2}
launch:
  problem_size: [4096]
  grid_div_x: [block_size_x, tile]
args:
  in: {count: problem_size_x + 2 * halo}
  out: {count: problem_size_x}
  n: {value: problem_size_x}
gpus:
  G9: {device_name: Nine GPU, profile: nine-profile}
caches: [caches/G9.json.gz]
kernel_tuner_version: 1.0.0
"""


def _spec(tmp_path: Path, text: str = SPEC) -> Path:
    p = tmp_path / "spec.yaml"
    p.write_text(text)
    return p


def test_gzip_and_plain_caches_read_alike(repo: Path) -> None:
    gz = read_kt_cache(repo / "caches" / "G9.json.gz")
    plain = read_kt_cache(repo / "caches" / "plain.json")
    assert gz.records == plain.records and len(gz.records) == 12 and gz.closed
    assert gz.stated_device_name == "" and plain.stated_device_name == "Test GPU 9000"


def test_truncated_caches_keep_the_complete_records(tmp_path: Path) -> None:
    text = _cache_text()
    # Kernel Tuner's own interrupted cache: no closing brackets, a trailing comma
    open_cache = text[: text.index('"128,2,0"')]
    (tmp_path / "open.json").write_text(open_cache)
    c = read_kt_cache(tmp_path / "open.json")
    assert not c.closed and [k for k, _ in c.records][-1] == "128,1,1" and len(c.records) == 10
    # cut in the middle of a record, and as a gzip stream cut short
    cut = text[: text.index('"128,2,0"') + 40]
    (tmp_path / "cut.json").write_text(cut)
    assert len(read_kt_cache(tmp_path / "cut.json").records) == 10
    blob = gzip.compress(text.encode())
    (tmp_path / "cut.json.gz").write_bytes(blob[: len(blob) * 2 // 3])
    c = read_kt_cache(tmp_path / "cut.json.gz")
    assert not c.closed and 1 <= len(c.records) < 12
    assert c.records == read_kt_cache(tmp_path / "open.json").records[: len(c.records)]


def test_t4_rows_equal_the_cache_rows(repo: Path) -> None:
    t4 = read_kt_cache(repo / "caches" / "G9_T4.json", device_name="Nine GPU", kernel_name="scale",
                       problem_size=[4096])
    cache = read_kt_cache(repo / "caches" / "plain.json")
    assert t4.format == "t4-1.0.0" and t4.tune_params_keys == cache.tune_params_keys
    from kernelcast.datagen.ktcache import GridRules, kt_rows

    rules = GridRules(grid_div=["block_size_x*tile", None, None], problem_size=["4096"])
    rows_t4 = {r["kt_key"]: r for r in kt_rows(t4, rules=rules).rows}
    rows_c = {r["kt_key"]: r for r in kt_rows(cache, rules=rules).rows}
    assert rows_t4.keys() == rows_c.keys()
    for k, r in rows_c.items():
        s = rows_t4[k]
        for col in ("status", "time_mean_us", "times_us", "energy_j", "meter", "gsize", "lsize", "measured_at"):
            assert s[col] == r[col], (k, col)
    assert rows_c["128,2,1"]["status"] == "compile_error"
    assert rows_c["64,1,0"]["gsize"] == [4096] and rows_c["64,2,0"]["gsize"] == [2048]


def test_spec_import_rows_provenance_and_equality(repo: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ds"
    spec = _spec(tmp_path)
    assert main(["dataset", "import-kt", "--spec", str(spec), "--root", str(repo), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "use_fast" in text and "warning" in text           # varies, the source does not reference it
    ds = out / "scale_bench" / "G9"
    df = read_dataset(ds, resolve=False)
    assert len(df) == 12
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    r = df[df["kt_key"] == "64,2,0"].iloc[0]
    assert r["src_commit"] == head and r["src_repository"] == "example/hub"
    assert r["src_cache_file"] == "caches/G9.json.gz" and r["src_kernel_file"] == "kernels/scale.cu"
    assert r["gpu"] == "Nine GPU" and r["kt_device_name"] == "" and r["gpu_profile"] == "nine-profile"
    assert r["benchmark"] == "scale_bench" and r["kt_version"] == "1.0.0"
    assert r["measured_at"] == datetime.fromisoformat(STAMP).timestamp()
    assert r["energy_j"] == _records()["64,2,0"]["nvml_energy"]
    assert r["meter"] == "nvml" and r["meter_method"] == "kernel_tuner:nvml_energy"
    args = {a["name"]: a for a in (json.loads(r["args"]) if isinstance(r["args"], str) else r["args"])}
    assert args["in"]["count"] == 4100 and args["out"]["count"] == 4096 and args["n"]["value"] == 4096
    assert f"-I{(repo / 'kernels' / 'inc').resolve()}" in r["build_options"]
    assert "-Dtile=2" in r["build_options"] and "-Dblock_size_x=64" in r["build_options"]
    assert "use_fast" not in r["build_options"]
    assert "-Dblock_size_x=blockDim.x" in r["analysis_options"] and "-Dtile=2" in r["analysis_options"]
    ok, why = rows_equal_cache(read_kt_cache(repo / "caches" / "G9.json.gz"), df)
    assert ok, why
    # rows of configurations that differ in the launch and in use_fast only share an analysis
    assert df["analysis_key"].nunique() == 2


def test_shared_analyses_cached_and_equal_to_exact_ones(repo: Path, tmp_path: Path) -> None:
    from kernelcast.datagen.ktcache import import_kt
    from kernelcast.models.static.batch import analyze_dataset, load_analyses, verify_shared

    imp = plan_import([], spec=load_spec(_spec(tmp_path)), root=repo).imports[0]
    assert imp.frontend_error is None and imp.analysis_groups == 2 and imp.symbolic_launch
    ds = tmp_path / "ds"
    import_kt(imp, ds)
    first = analyze_dataset(ds, workers=1)
    assert (first.configurations, first.distinct, first.analysed, first.cached, first.failed) == (12, 2, 2, 0, 0)
    again = analyze_dataset(ds, workers=2)
    assert (again.analysed, again.cached) == (0, 2)
    feats = load_analyses(ds / "analysis", list({r["analysis_key"] for r in imp.rows}))
    assert len(feats) == 2 and not any(isinstance(f, str) for f in feats.values())
    check = verify_shared(ds, samples=3)
    # the shared analysis sees the tile in the index (grp * block_size_x * tile + lid) and takes the
    # guard's share from the distribution of group and local ids; the exact one sees constants: alike
    # within half a percent here (both shares are 1 - at most 1/256)
    assert check["checked"] == 3 and check["max_rel_diff"] < 5e-3, check


def test_include_dir_missing_keeps_rows_and_names_the_front_end(repo: Path, tmp_path: Path) -> None:
    spec = _spec(tmp_path, SPEC.replace("  include_dirs: [kernels/inc]\n", ""))
    imp = plan_import([], spec=load_spec(spec), root=repo).imports[0]
    assert imp.frontend_error is not None and "params.h" in imp.frontend_error
    assert len(imp.rows) == 12 and all(r["args"] == [] for r in imp.rows)
    # given on the command line instead, the include directory makes it parse
    imp = plan_import([], spec=load_spec(spec), root=repo, include_dirs=[str(repo / "kernels" / "inc")]).imports[0]
    assert imp.frontend_error is None


@pytest.mark.parametrize("edit, message", [
    (("benchmark: scale_bench", "benchmark: scale_bench\nbogus: 1"), "unknown key 'bogus' in the spec"),
    (("language: cuda", "language: fortran"), "'kernel.language' 'fortran' is not one of"),
    (("grid_div_x: [block_size_x, tile]", "grid_div_x: [block_size_x, 'tile +']"), "launch.grid_div_x"),
    (("n: {value: problem_size_x}", "n: {value: 1, count: 2}"), "args.n: give a buffer's 'count' or a scalar's"),
    (("  file: kernels/scale.cu\n", ""), "'kernel.file' (the kernel's source file) is required"),
    (("spec_version: 1", "spec_version: 7"), "spec_version 7"),
    (("source: {repository: example/hub}", "source: {commit: zzz}"), "is not a git commit hash"),
    (("kernel:\n  file: kernels/scale.cu\n  name: scale\n  language: cuda\n  include_dirs: [kernels/inc]\n",
      "kernel: [1]\n"), "'kernel' must be an object"),
    (("  in: {count: problem_size_x + 2 * halo}", "  nonesuch: {count: 4}"), "args.nonesuch is not an argument"),
    (("problem_size: [4096]", "problem_size: [nope]"), "uses 'nope', which is not a tune parameter"),
])
def test_bad_specs_one_line_exit_2_nothing_written(repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   edit: tuple[str, str], message: str) -> None:
    assert edit[0] in SPEC
    spec = _spec(tmp_path, SPEC.replace(*edit))
    out = tmp_path / "out"
    code = main(["dataset", "import-kt", "--spec", str(spec), "--root", str(repo), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and message in err, err
    assert not out.exists()


def test_where_selects_records_in_the_spec_and_on_the_command_line(repo: Path, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    # use_fast is not in the kernel: without a selection it is an unreferenced parameter
    imp = plan_import([], spec=load_spec(_spec(tmp_path)), root=repo).imports[0]
    assert imp.unreferenced == ["use_fast"] and imp.excluded == 0 and len(imp.rows) == 12
    # the spec keeps the use_fast=0 records (6 of 12): nothing left unreferenced
    spec = _spec(tmp_path, SPEC + "where: [use_fast == 0]\n")
    assert load_spec(spec).where == ["use_fast == 0"]
    imp = plan_import([], spec=load_spec(spec), root=repo).imports[0]
    assert (len(imp.rows), imp.excluded, imp.unreferenced) == (6, 6, [])
    assert all(r["tp_use_fast"] == 0 for r in imp.rows)
    # the command line adds to the spec's: and of both, Kernel Tuner's restriction syntax
    out = tmp_path / "sel"
    code = main(["dataset", "import-kt", "--spec", str(spec), "--root", str(repo), "--out", str(out), "--json",
                 str(repo / "caches" / "G9.json.gz"), "--where", "block_size_x * tile >= 128"])
    assert code == 0, capsys.readouterr().err
    info = json.loads(capsys.readouterr().out)
    assert info["where"] == ["use_fast == 0", "block_size_x * tile >= 128"]
    assert (info["rows"], info["records_excluded"]) == (3, 9)       # (64, 2), (128, 1), (128, 2)
    df = read_dataset(out, resolve=False)
    assert sorted(zip(df["tp_block_size_x"], df["tp_tile"])) == [(64, 2), (128, 1), (128, 2)]
    assert json.loads((out / "manifest.json").read_text())["imported"][0]["records_excluded"] == 9


@pytest.mark.parametrize("where, message", [
    ("use_fast = 0", "not an expression"),
    ("nonesuch == 1", "unknown parameter 'nonesuch'"),
    ("__import__('os')", "Call is not allowed"),
    ("tile > 5", "none of its 12 configurations satisfies 'tile > 5'"),
])
def test_bad_where_one_line_exit_2_nothing_written(repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   where: str, message: str) -> None:
    out = tmp_path / "out"
    code = main(["dataset", "import-kt", "--spec", str(_spec(tmp_path)), "--root", str(repo), "--out", str(out),
                 "--where", where])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and message in err, err
    assert not out.exists()
    # the same expression in a spec is refused when the spec is read, where it can be
    if message == "not an expression":
        code = main(["dataset", "import-kt", "--spec", str(_spec(tmp_path, SPEC + f"where: ['{where}']\n")),
                     "--root", str(repo), "--out", str(out)])
        err = capsys.readouterr().err
        assert code == 2 and "where: restriction" in err and not out.exists()


def test_bad_yaml_and_missing_root(repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("kernel: [unclosed\n")
    assert main(["dataset", "import-kt", "--spec", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert "not valid YAML" in capsys.readouterr().err
    assert main(["dataset", "import-kt", "--spec", str(_spec(tmp_path)), "--root", str(tmp_path / "nope"),
                 "--out", str(tmp_path / "o")]) == 2
    assert "no such directory" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_spec_with_cache_files_and_t4_into_one_dataset(repo: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "one"
    code = main(["dataset", "import-kt", "--spec", str(_spec(tmp_path)), "--root", str(repo), "--json",
                 str(repo / "caches" / "G9_T4.json"), "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    info = json.loads(capsys.readouterr().out)
    assert info["format"] == "t4-1.0.0" and info["rows"] == 12 and info["gpu"] == "Nine GPU"
    assert info["rows_by_status"] == {"ok": 11, "compile_error": 1}
    df = read_dataset(out, resolve=False)
    assert set(df["gpu"]) == {"Nine GPU"} and set(df["benchmark"]) == {"scale_bench"}


def test_load_spec_json_equals_yaml(tmp_path: Path) -> None:
    import yaml

    y = load_spec(_spec(tmp_path))
    j = tmp_path / "spec.json"
    j.write_text(json.dumps(yaml.safe_load(SPEC)))
    js = load_spec(j)
    assert (js.rules, js.args, js.gpus, js.constants) == (y.rules, y.args, y.gpus, y.constants)
    assert y.rules.grid_div[0] == "(block_size_x)*(tile)"
    with pytest.raises(KTCacheError, match="no such spec file"):
        load_spec(tmp_path / "absent.yaml")


def test_reimport_adds_nothing_and_batches_are_whole(repo: Path, tmp_path: Path) -> None:
    from kernelcast.datagen.dataset import DatasetWriter
    from kernelcast.datagen.ktcache import import_kt, kt_manifest

    imp = plan_import([], spec=load_spec(_spec(tmp_path)), root=repo).imports[0]
    ds = tmp_path / "ds"
    assert import_kt(imp, ds) == (12, 12)
    assert import_kt(imp, ds) == (0, 12)
    # batches smaller than the rows: every row once, in shards and the journal
    ds2 = tmp_path / "ds2"
    with DatasetWriter(ds2, kt_manifest(imp.cache, imp), shard_rows=5) as w:
        assert w.append_many(imp.rows[:7]) == 7
        assert w.append_many(imp.rows) == 5
    df = read_dataset(ds2, resolve=False)
    assert sorted(df["kt_key"]) == sorted(r["kt_key"] for r in imp.rows)


def test_analyze_command_counts_hits_and_refuses_non_datasets(repo: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    from kernelcast.datagen.ktcache import import_kt

    ds = tmp_path / "ds"
    import_kt(plan_import([], spec=load_spec(_spec(tmp_path)), root=repo).imports[0], ds)
    cache = tmp_path / "acache"
    assert main(["analyze", str(ds), "--cache", str(cache), "--workers", "1", "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert (first["distinct"], first["analysed"], first["cached"], first["failed"]) == (2, 2, 0, 0)
    assert main(["analyze", str(ds), "--cache", str(cache), "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert (again["analysed"], again["cached"]) == (0, 2)
    assert main(["analyze", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "not a dataset" in err


def test_records_equal_between_a_cache_and_its_t4_file(repo: Path) -> None:
    from kernelcast.datagen.ktcache import records_equal

    cache = read_kt_cache(repo / "caches" / "plain.json")
    t4 = read_kt_cache(repo / "caches" / "G9_T4.json", problem_size=[4096])
    assert records_equal(cache, t4) == (True, "")
    t4.records[0][1]["time"] = t4.records[0][1]["time"] * 2
    ok, why = records_equal(cache, t4)
    assert not ok and why == f"{t4.records[0][0]}: times differ"
    t4.records.pop()
    assert records_equal(cache, t4)[1].startswith("12 vs 11 configurations")


def test_the_analytical_model_predicts_alike_from_shared_and_exact_analyses(repo: Path, tmp_path: Path) -> None:
    """Rows that name a shared analysis (``analysis_key``) are predicted from it, read from the
    dataset's cache or run once; the predictions equal those from each row's own build options."""
    from kernelcast.calib.profile import load_profile
    from kernelcast.datagen.frame import load_measured_frame
    from kernelcast.datagen.ktcache import import_kt
    from kernelcast.models.analytical import AnalyticalModel
    from kernelcast.models.static.batch import analyze_dataset

    imp = plan_import([], spec=load_spec(_spec(tmp_path)), root=repo).imports[0]
    ds = tmp_path / "ds"
    import_kt(imp, ds)
    analyze_dataset(ds, workers=1)
    frame, _ = load_measured_frame(ds)
    prof = load_profile("a100")
    cached = AnalyticalModel(prof, analysis_dirs=[ds / "analysis"])
    shared = cached.predict(frame).time_us
    assert len(cached._shared) == frame["analysis_key"].nunique() and not cached._features
    run_here = AnalyticalModel(prof)                          # no cache: each shared analysis run once
    assert np.allclose(run_here.predict(frame).time_us, shared, rtol=1e-12, equal_nan=True)
    exact = AnalyticalModel(prof).predict(frame.drop(columns=["analysis_key"])).time_us
    assert np.isfinite(shared).all()
    assert np.allclose(exact, shared, rtol=5e-3)       # the tiled guard's share, as above


def test_a_cache_named_after_its_benchmark_lands_under_its_gpu_key(repo: Path, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """``scale_G9.json`` is the cache of GPU ``G9`` (the key its name ends with), and a spec's
    ``kept_aside`` reason is read; an empty one is refused before anything is written."""
    shutil.copy(repo / "caches" / "plain.json", repo / "caches" / "scale_G9.json")
    text = SPEC.replace("caches: [caches/G9.json.gz]", "caches: [caches/scale_G9.json]") + "kept_aside: check data\n"
    spec = load_spec(_spec(tmp_path, text))
    assert spec.kept_aside == "check data" and load_spec(_spec(tmp_path)).kept_aside is None
    assert spec.gpu_key("caches/scale_G9.json") == "G9" and spec.pair_name("caches/scale_G9.json") == "G9"
    assert spec.gpu_key("caches/G9x.json") is None and spec.pair_name("caches/G9x.json") == "G9x"
    assert spec.gpu_of("caches/scale_G9.json", "")[1].profile == "nine-profile"
    out = tmp_path / "coll"
    assert main(["dataset", "import-kt", "--spec", str(_spec(tmp_path, text)), "--root", str(repo),
                 "--out", str(out)]) == 0, capsys.readouterr().err
    assert (out / "scale_bench" / "G9" / "manifest.json").is_file()
    assert set(read_dataset(out / "scale_bench" / "G9", resolve=False)["gpu_profile"]) == {"nine-profile"}
    bad = _spec(tmp_path, text.replace("kept_aside: check data", "kept_aside: ''"))
    assert main(["dataset", "import-kt", "--spec", str(bad), "--root", str(repo), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "kept_aside" in err and err.count("\n") == 1 and not (tmp_path / "o").exists()
