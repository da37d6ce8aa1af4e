"""``kill PID`` (SIGTERM) stops a running datagen the way Ctrl-C does: the rows stored so far are
kept, the command says how many and exits 143, no process it started is left, and the same
command resumes (real PoCL)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from kernelcast.datagen.corpus_store import write_corpus
from kernelcast.datagen.dataset import read_dataset

from kernelcast.schema import Kernel

ROOT = Path(__file__).resolve().parent.parent
SOURCES = {
    "saxpy": "__kernel void saxpy(__global const float* x, __global float* y, float a, int n) {\n"
             "  int i = get_global_id(0);\n  if (i < n) y[i] = a * x[i] + y[i];\n}\n",
    "scale": "__kernel void scale(__global const float* x, __global float* y, int n) {\n"
             "  int i = get_global_id(0);\n  if (i < n) y[i] = 3.0f * x[i];\n}\n",
}


def _session_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_sigterm_keeps_the_rows_and_the_rerun_resumes(tmp_path: Path, device) -> None:
    recs = [Kernel(source=s, name=n, dims=1, origin=f"stop/{n}").to_dict() for n, s in SOURCES.items()]
    write_corpus(tmp_path / "corpus", recs, {"kind": "corpus"})
    out = tmp_path / "ds"
    cmd = [sys.executable, "-m", "kernelcast", "datagen", "--corpus", str(tmp_path / "corpus"), "--out", str(out),
           "--configs-per-kernel", "40", "--lsizes-per-kernel", "2", "--sweeps-per-kernel", "0", "--args", "simple",
           "--no-validity", "--repeats", "3", "--min-time", "0", "--max-items", "65536", "--meter", "none",
           "--device", device.spec, "--quiet"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    journal = out / "journal.jsonl"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and p.poll() is None:
            if journal.is_file() and journal.read_text().count("\n") >= 3:
                break
            time.sleep(0.05)
        assert p.poll() is None, "datagen ended before it could be stopped"
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert p.returncode == 143, err
    assert "terminated:" in err and "rerun the same command to resume" in err and "Traceback" not in err
    t0 = time.monotonic()
    while _session_alive(p.pid) and time.monotonic() - t0 < 5:
        time.sleep(0.05)
    assert not _session_alive(p.pid), "a process datagen started outlived it"
    kept = len(read_dataset(out))
    assert kept >= 3
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert f"{kept} already stored" in r.stdout
    assert len(read_dataset(out)) > kept
