"""Smaller hardening cases, each run for real: memory checked with the host copies,
int scalars that would overflow, SIGINT reaching only the worker, the bundled corpus's temporary
directory, kernels that failed the corpus compile check, a hub model offline, and an old model file
in ``train --out``."""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
from pathlib import Path

import pytest
from kernelcast.instrument.backends import DeviceInfo

from kernelcast import cli
from kernelcast.schema import ArgBinding, Kernel, LaunchConfig

GiB = 1 << 30
HANG = "__kernel void spin(__global volatile int* a, int n) { while (a[0] >= 0) { a[1] += n; } }"


def _one_error(capsys: pytest.CaptureFixture) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("kernelcast: error: "), err
    return err[0]


def test_buffers_are_checked_against_host_memory_with_its_copies(device: DeviceInfo) -> None:
    from kernelcast.instrument.backends.base import ConfigError
    from kernelcast.instrument.memcheck import check_buffer_memory

    # the case: three 4 GB buffers on a 24 GB machine whose CPU device claims 64 GB
    cpu = dataclasses.replace(device, type="CPU", max_alloc_bytes=16 * GiB, global_mem_bytes=64 * GiB)
    three = [ArgBinding(n, "buffer", "float", GiB) for n in "abc"]          # 4 GiB each
    with pytest.raises(ConfigError, match="3 host copies"):
        check_buffer_memory(cpu, three, host_available=24 * GiB)
    # 12 GiB x 3 copies = 36 GiB: fits in 48 GiB x 0.8 = 38.4 GiB
    assert check_buffer_memory(cpu, three, host_available=48 * GiB) == 3 * (4 * GiB + 8192)
    # a GPU holds 2 host copies: 24 GiB < 0.8 x 32 GiB; the device's own memory is checked too
    gpu = dataclasses.replace(cpu, type="GPU", global_mem_bytes=8 * GiB)
    with pytest.raises(ConfigError, match="global memory"):
        check_buffer_memory(gpu, three, host_available=32 * GiB)
    gpu = dataclasses.replace(gpu, global_mem_bytes=40 * GiB)
    check_buffer_memory(gpu, three, host_available=32 * GiB)
    with pytest.raises(ConfigError, match="maximum allocation"):
        check_buffer_memory(cpu, [ArgBinding("a", "buffer", "float4", GiB + 1)], host_available=1 << 50)


def test_oversized_explicit_buffer_is_bad_input(tmp_path: Path, device: DeviceInfo,
                                                capsys: pytest.CaptureFixture) -> None:
    k = tmp_path / "k.cl"
    k.write_text("__kernel void f(__global float* a, int n) { a[get_global_id(0)] = n; }")
    # more than this machine's available memory, whatever the driver's limits say
    from kernelcast.instrument.memcheck import host_available_bytes

    avail = host_available_bytes()
    assert avail is not None
    count = int(avail * 0.5 / 4)         # half the available memory in one buffer: 3 copies do not fit
    rc = cli.main(["measure", "--kernel", str(k), "--gsize", "64", "--arg", f"a=buffer:float:{count}",
                   "--device", device.spec])
    assert rc == 2
    assert "argument 'a'" in _one_error(capsys)


def test_int_scalar_overflow_is_an_error_not_a_clamp(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from kernelcast.datagen.args import UnsupportedArgument, simple_args

    from kernelcast.clang import kernel_signatures

    src = "__kernel void f(__global float* a, int n, uint m, long big) { a[0] = n + m + big; }"
    params = kernel_signatures(src)["f"]
    with pytest.raises(UnsupportedArgument, match="2147483647"):
        simple_args(params, (1 << 31,), None)
    ok = {b.name: b.value for b in simple_args(params, ((1 << 31) - 1,), None)}
    assert ok["n"] == (1 << 31) - 1
    k = tmp_path / "k.cl"
    k.write_text(src)
    assert cli.main(["predict", "--kernel", str(k), "--gsize", "1000000000000", "--profile", "a100"]) == 2
    assert "give it with --arg" in _one_error(capsys)


def test_sigint_to_the_worker_alone_is_not_a_crash(device: DeviceInfo) -> None:
    from kernelcast.instrument.harness import Harness

    kernel = Kernel(HANG, "spin")
    config = LaunchConfig((1,), (1,), [ArgBinding("a", "buffer", "int", 4, init="zeros"),
                                      ArgBinding("n", "scalar", "int", value=1)])
    with Harness(device, meter="none", timeout_s=4) as h:
        h.run(Kernel("__kernel void z(__global int* a) { a[0] = 1; }", "z"),
              LaunchConfig((1,), (1,), [ArgBinding("a", "buffer", "int", 1)]))        # worker up
        assert h._proc is not None
        pid = h._proc.pid

        done = threading.Event()

        def interrupt() -> None:         # SIGINTs through the whole run, whatever phase it is in (build, launch)
            while not done.wait(0.25):
                try:
                    os.kill(pid, signal.SIGINT)
                except ProcessLookupError:      # the timed-out worker was stopped
                    return

        t = threading.Thread(target=interrupt)
        t.start()
        try:
            m = h.run(kernel, config)
        finally:
            done.set()
            t.join()
    assert m.status == "timeout", (m.status, m.reason)


def test_bundled_corpus_leaves_no_temporary_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    from kernelcast.datagen.corpus.load import load_corpus_kernels

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    kernels, desc = load_corpus_kernels("bundled")
    assert desc == "bundled" and len(kernels) > 100
    assert list(tmp_path.iterdir()) == []


def test_kernels_that_failed_the_compile_check_are_counted(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from kernelcast.datagen.corpus_store import write_corpus

    rec = {"name": "bad", "source": "__kernel void bad(__global int* a) { a[0] = ; }", "compile_status":
           "compile_error", "compile_log": "error: expected expression"}
    write_corpus(tmp_path / "c", [rec], {"origin": "test"})
    assert cli.main(["datagen", "--corpus", str(tmp_path / "c"), "--out", str(tmp_path / "ds")]) == 2
    assert "1 failed the corpus's compile check" in _one_error(capsys)
    assert not (tmp_path / "ds").exists()


def test_hub_base_offline_fails_fast_with_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture) -> None:
    from kernelcast.train.synthetic import write_synthetic_dataset

    ds = write_synthetic_dataset(tmp_path / "ds", n_kernels=2, configs_per_kernel=3)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))         # an empty cache
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")      # nothing listens on the discard port
    import urllib.request

    from kernelcast.models import hub

    probes: list[float | None] = []
    real_urlopen = urllib.request.urlopen

    def counted(req, timeout=None, **kw):   # type: ignore[no-untyped-def]
        probes.append(timeout)
        return real_urlopen(req, timeout=timeout, **kw)

    monkeypatch.setattr(urllib.request, "urlopen", counted)
    rc = cli.main(["train", "--data", str(ds), "--out", str(tmp_path / "m"), "--base", "Salesforce/codegen-350M-multi"])
    assert rc == 2
    assert "cannot be reached" in _one_error(capsys)
    # fails fast: one bounded probe of the endpoint, not the hub client's retry loop
    assert probes == [hub.PROBE_TIMEOUT_S]
    assert not (tmp_path / "m").exists()


def test_old_model_file_in_out_is_not_taken_as_this_runs_best(tmp_path: Path) -> None:
    from kernelcast.train.synthetic import write_synthetic_dataset

    ds = write_synthetic_dataset(tmp_path / "ds", n_kernels=3, configs_per_kernel=4)
    out = tmp_path / "m"
    out.mkdir()
    (out / "model.safetensors").write_bytes(b"an old, unrelated file")
    rc = cli.main(["train", "--data", str(ds), "--out", str(out), "--mode", "efficient", "--max-steps", "1",
                   "--quiet", "--no-resume"])
    assert rc == 0
    assert (out / "model.safetensors").read_bytes() != b"an old, unrelated file"
