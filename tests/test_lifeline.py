"""Harness workers never outlive their parent or their own deadline (run for real on the device)."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kernelcast.instrument.backends import DeviceInfo

HANG = "__kernel void spin(__global volatile int* a, int n) { while (a[0] >= 0) { a[1] += n; } }"
ROOT = Path(__file__).resolve().parent.parent


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(x) for x in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _start_hanging_measure(tmp_path: Path, device: DeviceInfo) -> tuple[subprocess.Popen[bytes], int]:
    """`kernelcast measure` of a kernel that never ends, and its worker's pid once it spins in it."""
    (tmp_path / "hang.cl").write_text(HANG)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    parent = subprocess.Popen(
        [sys.executable, "-m", "kernelcast", "measure", "--kernel", str(tmp_path / "hang.cl"), "--gsize", "1",
         "--lsize", "1", "--arg", "a=buffer:int:4:zeros", "--arg", "n=1", "--meter", "none",
         "--device", device.spec, "--timeout", "30"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        worker = None
        t0 = time.monotonic()
        # wait until the worker exists and is burning CPU in the kernel (build done, kernel running)
        while time.monotonic() - t0 < 60:
            kids = [k for k in _children(parent.pid) if _alive(k)]
            # the spawn context also starts a resource tracker; the worker is the one burning CPU
            busy = [k for k in kids if _cpu_seconds(k) > 1.0]
            if busy:
                worker = busy[0]
                break
            time.sleep(0.2)
        assert worker is not None, "the worker never started running the kernel"
        time.sleep(1.0)
        assert _alive(worker)
    except BaseException:
        parent.kill()
        parent.wait()
        raise
    return parent, worker


def test_worker_dies_with_a_killed_parent(tmp_path: Path, device: DeviceInfo) -> None:
    """kill -9 of `kernelcast measure` while its worker spins in a hanging kernel: the worker goes too."""
    parent, worker = _start_hanging_measure(tmp_path, device)
    try:
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(10)
        t_kill = time.monotonic()
        while _alive(worker) and time.monotonic() - t_kill < 5:
            time.sleep(0.05)
        gone_after = time.monotonic() - t_kill
        assert not _alive(worker), f"worker {worker} still running {gone_after:.1f} s after its parent was killed"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def test_worker_enforces_its_own_deadline(device: DeviceInfo) -> None:
    """A worker whose parent never kills it ends itself once a job passes the worker's own deadline."""
    from kernelcast.instrument.harness import _worker_main
    from kernelcast.instrument.runner import TimingPolicy

    from kernelcast.schema import ArgBinding, Kernel, LaunchConfig

    ctx = mp.get_context("spawn")
    parent_conn, child_conn = ctx.Pipe()
    proc = ctx.Process(target=_worker_main,
                       args=(child_conn, device.to_dict(), "none", {}, (os.getpid(), 6.0)), daemon=True)
    proc.start()
    child_conn.close()
    try:
        assert parent_conn.poll(60)
        assert parent_conn.recv()[0] == "ready"
        kernel = Kernel(HANG, "spin")
        config = LaunchConfig((1,), (1,), [ArgBinding("a", "buffer", "int", 4, init="zeros"),
                                          ArgBinding("n", "scalar", "int", value=1)])
        t0 = time.monotonic()
        parent_conn.send((kernel, config, TimingPolicy(), False, [], {}))
        proc.join(30)
        took = time.monotonic() - t0
        assert proc.exitcode == -signal.SIGALRM, f"exit code {proc.exitcode} after {took:.1f} s"
        assert 5.5 < took < 20
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join()


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_or_term_stops_the_command_and_its_worker_at_once(tmp_path: Path, device: DeviceInfo, sig: int,
                                                                 code: int) -> None:
    """SIGINT to the command (what Ctrl-C sends it) or SIGTERM (``kill PID``): exit 130 / 143
    within seconds, through the command's own way out, worker gone."""
    parent, worker = _start_hanging_measure(tmp_path, device)
    try:
        t0 = time.monotonic()
        os.kill(parent.pid, sig)
        rc = parent.wait(15)
        assert rc == code
        while _alive(worker) and time.monotonic() - t0 < 5:
            time.sleep(0.05)
        assert not _alive(worker)
        assert time.monotonic() - t0 < 5
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
