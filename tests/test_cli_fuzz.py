"""CLI fuzz: a table of bad command lines per subcommand, each run in-process through
:func:`kernelcast.cli.main`. Every one must end with exit status 2, exactly one line on stderr, no
traceback, nothing written under the temporary directory, in bounded time.

``python tests/test_cli_fuzz.py`` runs the table and prints the counts per subcommand (cases, clean,
tracebacks, hangs, other failures)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CASE_LIMIT_S = 20.0

VADD = """__kernel void vadd(__global const float *a, __global const float *b, __global float *c, const int n) {
  int i = get_global_id(0);
  if (i < n) c[i] = a[i] + b[i];
}"""

TWO = VADD + "\n__kernel void other(__global float *x) { x[get_global_id(0)] = 1.0f; }\n"

K = "{fx}/vadd.cl"
A100 = ["--profile", "a100"]

# (subcommand, argv); {fx} is the fixture directory, {out} a path that must stay unwritten
CASES: list[tuple[str, list[str]]] = []


def _add(cmd: str, *lines: str) -> None:
    for line in lines:
        CASES.append((cmd, line.split()))


_add("devices",
     "devices --bogus", "devices extra", "devices --json --json=1", "devices --no-probe=yes")
_add("measure",
     "measure", "measure --kernel {fx}/missing.cl --gsize 64", "measure --kernel {fx} --gsize 64",
     "measure --kernel {fx}/binary.bin --gsize 64", "measure --kernel {fx}/empty.cl --gsize 64",
     f"measure --kernel {K}", f"measure --kernel {K} --gsize 0", f"measure --kernel {K} --gsize -5",
     f"measure --kernel {K} --gsize abc", f"measure --kernel {K} --gsize 1x2x3x4",
     f"measure --kernel {K} --gsize 64 --lsize 0", f"measure --kernel {K} --gsize 64 --lsize 3",
     f"measure --kernel {K} --gsize 1048576 --lsize 1048576",
     f"measure --kernel {K} --gsize 64 --timeout 0", f"measure --kernel {K} --gsize 64 --timeout=-1",
     f"measure --kernel {K} --gsize 64 --timeout nan", f"measure --kernel {K} --gsize 64 --timeout inf",
     f"measure --kernel {K} --gsize 64 --repeats 0", f"measure --kernel {K} --gsize 64 --repeats=-1",
     f"measure --kernel {K} --gsize 64 --min-time=-1", f"measure --kernel {K} --gsize 64 --min-time nan",
     f"measure --kernel {K} --gsize 64 --warmup=-3", f"measure --kernel {K} --gsize 64 --meter bogus",
     f"measure --kernel {K} --gsize 64 --arg bad", f"measure --kernel {K} --gsize 64 --arg x=1",
     f"measure --kernel {K} --gsize 64 --arg a=buffer:float:-1",
     f"measure --kernel {K} --gsize 64 --arg a=buffer:float:1000000000000",
     f"measure --kernel {K} --gsize 64 --arg a=buffer:float:4000000000 --arg b=buffer:float:4000000000 "
     "--arg c=buffer:float:4000000000",
     f"measure --kernel {K} --gsize 1000000000000", f"measure --kernel {K} --gsize 64 --arg n=99999999999",
     f"measure --kernel {K} --gsize 64 --name nosuch", "measure --kernel {fx}/two.cl --gsize 64",
     f"measure --kernel {K} --gsize 64 --device 99:99", f"measure --kernel {K} --gsize 64 --seed=-1",
     f"measure --kernel {K} --gsize 64 --repeats x")
_add("corpus",
     "corpus", "corpus bogus", "corpus ingest --out {out}", "corpus ingest {fx}/missing --out {out}",
     "corpus ingest {fx}/vadd.cl --out {fx}/file.txt", "corpus ingest {fx}/vadd.cl --out {out} --near-dup 2",
     "corpus ingest {fx}/vadd.cl --out {out} --near-dup 0", "corpus ingest {fx}/vadd.cl --out {out} --near-dup=-0.5",
     "corpus ingest {fx}/vadd.cl --out {out} --near-dup nan", "corpus ingest {fx}/vadd.cl --out {out} -D =x",
     "corpus ingest {fx}/vadd.cl --out {out} --near-dup x", "corpus ingest {fx}/vadd.cl",
     "corpus synth --count 0 --out {out}", "corpus synth --count=-1 --out {out}",
     "corpus synth --count x --out {out}", "corpus synth --count 3 --out {fx}/file.txt",
     "corpus synth --count 3 --seed=-1 --out {out}", "corpus synth --out {out}",
     "corpus synth --count 100000000 --out {out}")
D = "datagen --corpus {fx}/corpus --out {out}"
_add("datagen",
     "datagen --out {out}", "datagen --corpus {fx}/missing --out {out}", "datagen --corpus {fx}/file.txt --out {out}",
     "datagen --corpus {fx}/corpus_bad --out {out}", "datagen --corpus {fx}/emptydir --out {out}",
     "datagen --corpus {fx}/corpus --out {fx}/file.txt",
     f"{D} --configs-per-kernel 0", f"{D} --configs-per-kernel=-1", f"{D} --lsizes-per-kernel 0",
     f"{D} --k 0", f"{D} --k=-1", f"{D} --k nan", f"{D} --ratio bad", f"{D} --ratio 0:0:0", f"{D} --ratio 1:2",
     f"{D} --max-items 0", f"{D} --max-items=-1", f"{D} --min-time=-1", f"{D} --repeats 0", f"{D} --timeout 0",
     f"{D} --timeout=-1", f"{D} --limit=-1", f"{D} --limit 0", f"{D} --args bogus", f"{D} --meter bogus",
     f"{D} --rebalance bogus", f"{D} --seed=-1",
     "datagen --corpus {fx}/corpus --out {fx}/ds_badmanifest", "datagen --corpus {fx}/corpus --out {fx}/ds_badshard",
     "datagen --corpus {fx}/corpus --out {fx}/ds_notdataset")
_add("dataset",
     "dataset", "dataset {fx}/missing", "dataset {fx}/file.txt", "dataset {fx}/emptydir",
     "dataset {fx}/ds_badmanifest", "dataset {fx}/ds_badshard", "dataset {fx}/ds_notdataset",
     "dataset {fx}/ds_badshard --json", "dataset check {fx}/missing", "dataset check {fx}/file.txt",
     "dataset repair {fx}/missing", "dataset repair {fx}/emptydir", "dataset check")
_add("dataset",
     "dataset counts", "dataset counts {fx}/missing", "dataset counts {fx}/file.txt", "dataset counts {fx}/emptydir",
     "dataset counts {fx}/ds_badmanifest", "dataset counts {fx}/ds_badshard", "dataset counts {fx}/ds_notdataset",
     "dataset counts {fx}/ds_good", "dataset counts {fx}/ds_good --jobs 0", "dataset counts {fx}/ds_good --limit 0",
     "dataset counts {fx}/ds_good --timeout 0", "dataset counts {fx}/ds_good --max-tracked 0",
     "dataset counts {fx}/ds_good --jobs 1000")
_add("dataset",
     "dataset remeasure", "dataset remeasure {fx}/missing", "dataset remeasure {fx}/file.txt",
     "dataset remeasure {fx}/emptydir", "dataset remeasure {fx}/ds_badmanifest", "dataset remeasure {fx}/ds_badshard",
     "dataset remeasure {fx}/ds_notdataset", "dataset remeasure {fx}/ds_good",
     "dataset remeasure {fx}/ds_good --dry-run",
     "dataset remeasure {fx}/ds_good --max-rounds 0", "dataset remeasure {fx}/ds_good --max-rounds 99",
     "dataset remeasure {fx}/ds_good --limit 0", "dataset remeasure {fx}/ds_good --timeout 0",
     "dataset remeasure {fx}/ds_good --load-above 0", "dataset remeasure {fx}/ds_good --load-above nan")
_add("measure",
     f"measure --kernel {K} --gsize 64 --arg a=@", f"measure --kernel {K} --gsize 64 --arg a=@{{fx}}/missing.npy",
     f"measure --kernel {K} --gsize 64 --arg a=@{{fx}}/file.txt",
     f"measure --kernel {K} --gsize 64 --arg a=@{{fx}}/binary.bin", f"measure --kernel {K} --gsize 64 --counts=1")
KT = "dataset import-kt {fx}/kt_cache.json"
_add("dataset",
     "dataset import-kt", "dataset import-kt {fx}/missing.json --out {out}",
     "dataset import-kt {fx}/bad.json --out {out}",
     "dataset import-kt {fx}/binary.bin --out {out}", "dataset import-kt {fx}/notobj.json --out {out}",
     "dataset import-kt {fx}/file.txt --out {out}", "dataset import-kt {fx}/kt_noblock.json --out {out}",
     f"{KT}", f"{KT} --out {{fx}}/file.txt", f"{KT} --out {{fx}}/ds_badshard", f"{KT} --out {{fx}}/ds_notdataset",
     f"{KT} --out {{out}} --grid bogus", f"{KT} --out {{out}} --grid grid_div_x=block_size_x*nope",
     f"{KT} --out {{out}} --grid grid_div_x=__import__", f"{KT} --out {{out}} --grid block_size_names=nope",
     f"{KT} --out {{out}} --kernel {{fx}}/missing.cl", f"{KT} --out {{out}} --kernel {{fx}}/binary.bin",
     f"{KT} --out {{out}} --arg n=4", f"{KT} --out {{out}} --kernel {{fx}}/empty.cl",
     f"{KT} --out {{out}} --kernel {K} --name nope", f"{KT} --out {{out}} --kernel {K} --arg bogus=1",
     f"{KT} --out {{out}} -I {{fx}}/missing_dir", f"{KT} --out {{out}} -D 1bad=2",
     "dataset import-kt --spec {fx}/missing.yaml --out {out}", "dataset import-kt --spec {fx}/file.txt --out {out}",
     "dataset import-kt --spec {fx}/binary.bin --out {out}", "dataset import-kt --spec {fx}/kt_cache.json --out {out}",
     "dataset import-kt --out {out}")
_add("analyze",
     "analyze", "analyze {fx}/missing", "analyze {fx}/file.txt", "analyze {fx}/ds_notdataset",
     "analyze {fx}/ds_good --workers 0", "analyze {fx}/ds_good --verify x")
_add("calib",
     "calib", "calib --out {fx}/emptydir", "calib --out {fx}/nodir/p.json", "calib --out {out} --only bogus",
     "calib --out {out} --max-bytes 1", "calib --out {out} --max-bytes abc", "calib --out {out} --timeout 0",
     "calib --out {out} --timeout=-1", "calib --out {out} --meter bogus", "calib --out {out} --max-bytes=-5MiB",
     "calib --out {out} --max-bytes nan", "calib --out {out} --only ,")
T = "train --data {fx}/ds_good --out {out}"
_add("train",
     "train --data {fx}/missing --out {out}", "train --data {fx}/file.txt --out {out}",
     "train --data {fx}/ds_good --out {fx}/file.txt", f"{T} --epochs 0", f"{T} --epochs=-1", f"{T} --batch-size 0",
     f"{T} --lr 0", f"{T} --lr=-1", f"{T} --lr nan", f"{T} --weight-decay=-1", f"{T} --warmup-ratio 2",
     f"{T} --warmup-ratio=-0.1", f"{T} --grad-accum 0", f"{T} --patience 0", f"{T} --max-steps 0",
     f"{T} --threads 0", f"{T} --kind bogus", f"{T} --mode bogus", f"{T} --target bogus",
     "train --kind tabular --data {fx}/emptydir --out {out} --profile a100",
     "train --data {fx}/ds_badshard --out {out}", "train --kind tabular --data {fx}/ds_badshard --out {out} "
     "--profile a100", f"{T} --base {{fx}}/no/such/base", f"{T} --seed=-1",
     "train --kind tabular --data {fx}/ds_good --out {out} --profile {fx}/bad.json")
_add("blend",
     "blend --data {fx}/ds_good --model {fx}/missing", "blend --data {fx}/ds_good --model {fx}/model_garbage",
     "blend --data {fx}/ds_good --model {fx}/file.txt", "blend --data {fx}/missing --model {fx}/model_garbage",
     "blend --data {fx}/ds_good --model {fx}/model_metrics_only --profile a100", "blend --model {fx}/missing")
E = "evaluate --data {fx}/ds_good --out {out} --profile a100"
_add("evaluate",
     "evaluate --data {fx}/ds_good --out {fx}/file.txt --profile a100", f"{E} --folds 0", f"{E} --folds 1",
     f"{E} --folds=-1", f"{E} --models bogus", f"{E} --models ,", f"{E} --shots bad", f"{E} --shots=-1",
     f"{E} --inner-folds 0", f"{E} --codegen-epochs 0", "evaluate --data {fx}/missing --out {out} --profile a100",
     "evaluate --data {fx}/file.txt --out {out} --profile a100", f"{E} --interval-by bogus", f"{E} --seed=-1",
     "evaluate --data {fx}/ds_badshard --out {out} --profile a100",
     "evaluate --data {fx}/ds_good --out {out} --profile {fx}/profile_cu0.json",
     f"{E} --energy-pcts 0", f"{E} --energy-pcts 100", f"{E} --energy-pcts x", f"{E} --energy-top-k 0",
     f"{E} --repeats 0", f"{E} --repeats 21", f"{E} --repeats x")
P = f"predict --kernel {K} --profile a100"
_add("predict",
     "predict --kernel {fx}/missing.cl --gsize 64 --profile a100", f"{P}", f"{P} --configs {{fx}}/binary.bin",
     f"{P} --configs {{fx}}/empty.csv", f"{P} --configs {{fx}}/nogsize.csv", f"{P} --configs {{fx}}",
     f"{P} --configs {{fx}}/badsize.csv", f"{P} --gsize 0", f"{P} --gsize 4096 --lsize 2048",
     f"{P} --gsize 64 --power-cap=-5", f"{P} --gsize 64 --power-cap 0", f"{P} --gsize 64 --power-cap nan",
     f"predict --kernel {K} --gsize 64 --profile {{fx}}/profile_cu0.json",
     f"predict --kernel {K} --gsize 64 --profile {{fx}}/profile_bw0.json",
     f"predict --kernel {K} --gsize 64 --profile {{fx}}/bad.json",
     f"predict --kernel {K} --gsize 64 --profile {{fx}}/binary.bin",
     f"predict --kernel {K} --gsize 64 --profile nosuch",
     f"{P} --gsize 64 --model {{fx}}/missing", f"{P} --gsize 64 --model {{fx}}/model_garbage",
     f"{P} --gsize 64 --model {{fx}}/file.txt", f"{P} --gsize 64 --measured {{fx}}/binary.bin",
     f"{P} --gsize 64 --measured {{fx}}/bad.json", f"{P} --gsize 1000000000000", f"{P} --gsize 64 --lsize 3",
     f"{P} --gsize 64 --arg n=99999999999",
     f"{P} --gsize 64 --name nosuch", f"{P} --gsize 64 --power-cap x",
     f"{P} --gsize 64 --counts {{fx}}/missing.json", f"{P} --gsize 64 --counts {{fx}}/binary.bin",
     f"{P} --gsize 64 --counts {{fx}}/bad.json", f"{P} --gsize 64 --counts {{fx}}/notobj.json",
     f"{P} --gsize 64 --counts {{fx}}/counts_neg.json", f"{P} --gsize 64 --counts {{fx}}/counts_notsite.json",
     f"{P} --gsize 64 --counts {{fx}}/counts_neg.json --measure-counts",
     f"{P} --gsize 64 --measure-counts --arg a=@{{fx}}/missing.npy")
TU = f"tune --kernel {K} --gsize 1024 --profile a100"
_add("tune",
     f"{TU} --power-caps 100:250:0.000001", f"{TU} --power-caps 100:250:0.01", f"{TU} --power-caps 250:100:10",
     f"{TU} --power-caps 100:250:0", f"{TU} --power-caps a:b:c", f"{TU} --power-caps=-5:10:1",
     f"{TU} --power-caps 100:250", f"{TU} --power-caps 100:nan:1", f"{TU} --top 0", f"{TU} --top=-1",
     f"{TU} --measure-top=-1", f"{TU} --measure-top 0", f"{TU} --rounds 2",
     f"{TU} --measure-top 2 --rounds 0", f"{TU} --max-wg 0", f"{TU} --max-wg=-1",
     f"{TU} --objective bogus", f"tune --kernel {K} --gsize 0 --profile a100",
     f"tune --kernel {K} --gsize 1024 --profile {{fx}}/profile_cu0.json", f"{TU} --model {{fx}}/model_garbage",
     f"{TU} --model {{fx}}/missing", f"{TU} --measured {{fx}}/bad.json", f"{TU} --measured {{fx}}/binary.bin",
     f"tune --kernel {K} --gsize 1000000000000 --profile a100", "tune --kernel {fx}/missing.cl --gsize 64",
     f"{TU} --top x", f"tune --kernel {K} --gsize 1024 --profile v100 --shapes --power-caps 1:1000000:1",
     f"{TU} --format bogus", f"{TU} --out {{out}}", f"{TU} --format kernel-tuner --json",
     f"{TU} --format kernel-tuner --measure-top 2", f"{TU} --format kernel-tuner --out {{fx}}/emptydir",
     f"{TU} --format kernel-tuner --out {{fx}}/nodir/sl.json", f"{TU} --counts {{fx}}/bad.json",
     f"{TU} --counts {{fx}}/counts_neg.json", f"{TU} --counts {{fx}}/file.txt --measure-counts",
     f"{TU} --prior {{fx}}/kt_cache.json", "tune --simulate {fx}/kt_cache.json --prior {fx}/missing.json",
     "tune --simulate {fx}/kt_cache.json --prior {fx}/kt_noblock.json",
     "tune --simulate {fx}/kt_cache.json --prior {fx}/file.txt",
     "tune --simulate {fx}/kt_cache.json --prior {fx}/ds_notdataset",
     "tune --simulate {fx}/kt_cache.json --prior {fx}/kt_cache.json --trace {out}/t.json")
_add("demo",
     "demo --out {fx}/file.txt", "demo --out {fx}/corpus", "demo --synthetic 0", "demo --epochs=-1",
     "demo --bundled-every x", "demo --meter bogus", "demo --max-sizes 0", "demo --configs-per-kernel=-2")
B = "bench --out {out} --profile a100"
_add("bench",
     "bench --out {fx}/file.txt --profile a100", f"{B} --max-sizes 0", f"{B} --max-sizes=-1", f"{B} --max-sizes x",
     f"{B} --suite {{fx}}/missing.json", f"{B} --suite {{fx}}/bad.json", f"{B} --suite {{fx}}/binary.bin",
     f"{B} --suite {{fx}}/notobj.json", f"{B} --kernels nosuch", f"{B} --meter bogus",
     f"{B} --model {{fx}}/model_garbage", f"{B} --model {{fx}}/missing", "bench --out {out} --profile {fx}/bad.json",
     "bench --out {out} --profile {fx}/profile_cu0.json", "bench")


# ---------------------------------------------------------------------------------------------
# fixtures


def make_fixtures(fx: Path) -> None:
    """Every file the bad command lines point at (good ones where the bad part is elsewhere)."""
    fx.mkdir(parents=True, exist_ok=True)
    (fx / "vadd.cl").write_text(VADD)
    (fx / "two.cl").write_text(TWO)
    (fx / "empty.cl").write_text("")
    (fx / "binary.bin").write_bytes(bytes(range(256)) * 8 + b"\xff\xfe\x00\x80")
    (fx / "bad.json").write_text("{not json")
    (fx / "notobj.json").write_text("[1, 2, 3]")
    (fx / "counts_neg.json").write_text('{"trip_l1_c1": -3}')
    (fx / "counts_notsite.json").write_text('{"site_counts": {"values": {"n": 3}}}')
    (fx / "empty.csv").write_text("")
    (fx / "nogsize.csv").write_text("a,b\n1,2\n")
    (fx / "badsize.csv").write_text("gsize,lsize\n64,abc\n")
    (fx / "file.txt").write_text("an existing file\n")
    kt = {"device_name": "GPU", "kernel_name": "vadd", "problem_size": 1024, "tune_params_keys": ["block_size_x"],
          "tune_params": {"block_size_x": [64]}, "objective": "time",
          "cache": {"64": {"block_size_x": 64, "time": 1.0}}}
    (fx / "kt_cache.json").write_text(json.dumps(kt))
    (fx / "kt_noblock.json").write_text(json.dumps({**kt, "tune_params_keys": ["tile"],
                                                    "cache": {"2": {"tile": 2, "time": 1.0}}}))
    (fx / "emptydir").mkdir(exist_ok=True)
    (fx / "corpus_bad").mkdir(exist_ok=True)
    (fx / "corpus_bad" / "kernels.jsonl").write_bytes(b"{\"id\": 1,\n\x00\xff garbage\n")
    # a good corpus of one kernel
    from kernelcast.datagen.synth import write_synth_corpus

    write_synth_corpus(fx / "corpus", 2, 0)
    # datasets: a good one, one with a manifest that is not JSON, one with a garbage shard
    good = fx / "ds_good"
    _tiny_dataset(good)
    bm = fx / "ds_badmanifest"
    _tiny_dataset(bm)
    (bm / "manifest.json").write_text("{ this is not json")
    bs = fx / "ds_badshard"
    _tiny_dataset(bs)
    (bs / "shards" / "part-00001.parquet").write_bytes(b"PAR1" + os.urandom(200))
    nd = fx / "ds_notdataset"
    nd.mkdir(exist_ok=True)
    (nd / "something.txt").write_text("not a dataset\n")
    # models
    mg = fx / "model_garbage"
    mg.mkdir(exist_ok=True)
    for name in ("config.json", "metrics.json", "tabular.json", "model.safetensors"):
        (mg / name).write_bytes(b"\x00garbage\xff")
    mo = fx / "model_metrics_only"
    mo.mkdir(exist_ok=True)
    (mo / "metrics.json").write_text("{}")
    # profiles with impossible values
    prof = json.loads((ROOT / "calib" / "profiles" / "a100.json").read_text())
    for name, key in (("profile_cu0.json", "compute_units"), ("profile_bw0.json", "dram_bw_gbs")):
        p = json.loads(json.dumps(prof))
        if key in p["values"]:
            p["values"][key]["value"] = 0
        if key in p["device"]:
            p["device"][key] = 0
        (fx / name).write_text(json.dumps(p))


def _tiny_dataset(root: Path) -> None:
    from kernelcast.datagen.dataset import DatasetWriter, row_key

    rows = []
    for k in range(3):
        for g in (64, 128):
            rows.append({"row_key": row_key(f"k{k}", (g,), (16,), []), "kernel_id": f"k{k}", "kernel_name": f"k{k}",
                         "gsize": [g], "lsize": [16], "status": "ok", "median_us": 10.0 * g * (k + 1)})
    with DatasetWriter(root, {"kind": "kernelcast-dataset", "seed": 0}, shard_rows=4) as w:
        for r in rows:
            w.append(r)


# ---------------------------------------------------------------------------------------------
# running one case


@dataclass
class Outcome:
    cmd: str
    argv: list[str]
    code: int | None
    stderr: str
    seconds: float
    written: list[str]
    hung: bool

    @property
    def traceback(self) -> bool:
        return "Traceback" in self.stderr

    @property
    def clean(self) -> bool:
        lines = [ln for ln in self.stderr.splitlines() if ln.strip()]
        return (self.code == 2 and len(lines) == 1 and not self.traceback and not self.written and not self.hung)


class _Hang(BaseException):
    pass


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = Path(dirpath) / n
            try:
                st = p.lstat()
            except OSError:
                continue
            out[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns) if not p.is_dir() else (0, 0)
    return out


@contextlib.contextmanager
def _alarm(seconds: float) -> Iterator[None]:
    def handler(signum: int, frame: object) -> None:
        raise _Hang()

    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def run_case(cmd: str, argv_t: list[str], tmp: Path) -> Outcome:
    from kernelcast.cli import main

    fx = tmp / "fx"
    out = tmp / "out-never"
    argv = [a.replace("{fx}", str(fx)).replace("{out}", str(out)) for a in argv_t]
    before = _snapshot(tmp)
    err, so = io.StringIO(), io.StringIO()
    code: int | None = None
    hung = False
    t0 = time.perf_counter()
    cwd = os.getcwd()
    os.chdir(tmp)
    try:
        with _alarm(CASE_LIMIT_S), contextlib.redirect_stderr(err), contextlib.redirect_stdout(so):
            try:
                code = main(argv)
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 1
            except _Hang:
                hung = True
            except Exception:  # noqa: BLE001 - what the user would see as a traceback
                import traceback

                traceback.print_exc()
                code = 1
    finally:
        os.chdir(cwd)
    dt = time.perf_counter() - t0
    after = _snapshot(tmp)
    written = sorted(k for k, v in after.items() if before.get(k) != v)
    if out.exists():        # a case that wrongly wrote must not change the next one
        import shutil

        shutil.rmtree(out, ignore_errors=True) if out.is_dir() else out.unlink()
    return Outcome(cmd, argv, code, err.getvalue(), dt, written, hung)


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("fuzz")
    make_fixtures(tmp / "fx")
    return tmp


@pytest.fixture(autouse=True)
def _own_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    # a calibration or build cache written by a case would land outside the watched directory
    monkeypatch.setenv("KERNELCAST_CACHE", str(tmp_path_factory.getbasetemp() / "fuzz-cache"))


def test_table_is_large_and_covers_every_subcommand() -> None:
    cmds = {c for c, _ in CASES}
    assert len(CASES) >= 150
    assert cmds >= {"devices", "measure", "corpus", "datagen", "dataset", "calib", "train", "blend", "evaluate",
                    "predict", "tune", "bench", "demo"}


@pytest.mark.parametrize(("cmd", "argv"), CASES, ids=[" ".join(a)[:80] for _, a in CASES])
def test_bad_command_line(cmd: str, argv: list[str], fuzz_dir: Path) -> None:
    o = run_case(cmd, argv, fuzz_dir)
    assert not o.hung, f"no answer within {CASE_LIMIT_S:.0f} s"
    assert not o.traceback, o.stderr[-2000:]
    assert o.code == 2, f"exit {o.code}; stderr: {o.stderr[-500:]}"
    lines = [ln for ln in o.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, o.stderr[-1000:]
    assert lines[0].startswith("kernelcast: error: ")
    assert not o.written, f"wrote {o.written[:5]}"


def main() -> int:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="kernelcast-fuzz-") as d:     # removed afterwards
        os.environ.setdefault("KERNELCAST_CACHE", str(Path(d) / "cache"))
        (Path(d) / "run").mkdir()
        return _run_table(Path(d) / "run")


def _run_table(tmp: Path) -> int:
    make_fixtures(tmp / "fx")
    counts: dict[str, list[int]] = {}
    bad: list[Outcome] = []
    t0 = time.perf_counter()
    for cmd, argv in CASES:
        o = run_case(cmd, argv, tmp)
        c = counts.setdefault(cmd, [0, 0, 0, 0, 0])
        c[0] += 1
        c[1] += o.clean
        c[2] += o.traceback
        c[3] += o.hung
        c[4] += not o.clean and not o.traceback and not o.hung
        if not o.clean:
            bad.append(o)
        if "-v" in sys.argv:
            print(f"{o.code} {o.seconds:5.2f}s {' '.join(argv)[:90]}\n    {o.stderr.strip()[:300]}")
    print(f"{'subcommand':12} {'cases':>5} {'clean':>5} {'traceback':>9} {'hang':>4} {'other':>5}")
    for cmd, c in counts.items():
        print(f"{cmd:12} {c[0]:5d} {c[1]:5d} {c[2]:9d} {c[3]:4d} {c[4]:5d}")
    tot = [sum(c[i] for c in counts.values()) for i in range(5)]
    print(f"{'total':12} {tot[0]:5d} {tot[1]:5d} {tot[2]:9d} {tot[3]:4d} {tot[4]:5d}   "
          f"({time.perf_counter() - t0:.1f} s)")
    for o in bad:
        tail = o.stderr.strip().splitlines()[-1:] or [""]
        print(f"NOT CLEAN exit={o.code} hung={o.hung} written={o.written[:3]} lines={len(o.stderr.splitlines())}: "
              f"{' '.join(o.argv)[:150]}\n    {tail[0][:200]}")
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
