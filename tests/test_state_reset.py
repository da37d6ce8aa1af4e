"""State-consuming kernels: detected, restored before every timed launch, recorded per row."""

from __future__ import annotations

import numpy as np
import pytest
from kernelcast.instrument.runner import TimingPolicy
from kernelcast.instrument.state import kernel_body, maybe_read_buffers

from kernelcast.schema import ArgBinding, Kernel, LaunchConfig

from .kernels import TRIAD

# one BFS level that consumes its frontier: every frontier vertex is cleared from the frontier as
# it is expanded, so a second launch on the state the first leaves finds an empty frontier
BFS_CLEAR = """
__kernel void bfs_clear(__global const int *row, __global const int *col, __global uchar *frontier,
                        __global uchar *visited, __global uchar *next, __global int *cost, const int n) {
  int v = get_global_id(0);
  if (v >= n || !frontier[v]) return;
  frontier[v] = 0;
  int c = cost[v] + 1;
  for (int e = row[v]; e < row[v + 1]; e++) {
    int w = col[e];
    if (!visited[w]) { cost[w] = c; next[w] = 1; }
  }
}
"""

INPLACE = """__kernel void scale(__global float *x, const float s) { x[get_global_id(0)] *= s; }"""


def test_source_test_of_reads():
    # triad: c is only stored into, a and b are const (not candidates here)
    assert maybe_read_buffers(TRIAD, "triad", ["a", "b", "c"]) == {"a", "b"}
    params = ["row", "col", "frontier", "visited", "next", "cost"]
    assert maybe_read_buffers(BFS_CLEAR, "bfs_clear", params) == {"row", "col", "frontier", "visited", "cost"}
    assert maybe_read_buffers(INPLACE, "scale", ["x"]) == {"x"}
    # a pointer handed to a function or compared counts as read; "==" is not a store
    src = ("void f(__global int *p);\n"
           "__kernel void k(__global int *p, __global int *q) { f(p); if (q[0] == 1) q[1] = 2; }")
    assert maybe_read_buffers(src, "k", ["p", "q"]) == {"p", "q"}
    src = "__kernel void k(__global int *p) { *p = 3; }"
    assert maybe_read_buffers(src, "k", ["p"]) == set()
    assert kernel_body("__kernel void k(int a);", "k") is None


def _graph(n: int, degree: int, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    row = np.arange(0, (n + 1) * degree, degree, dtype=np.int32)
    col = rng.integers(0, n, n * degree, dtype=np.int32)
    return {"row": row, "col": col, "frontier": np.ones(n, np.uint8), "visited": np.zeros(n, np.uint8),
            "next": np.zeros(n, np.uint8), "cost": np.zeros(n, np.int32)}


def _config(n: int, degree: int, reset: bool = False) -> LaunchConfig:
    arr = "array"
    return LaunchConfig((n,), (64,), [
        ArgBinding("row", "buffer", "int", n + 1, init=arr), ArgBinding("col", "buffer", "int", n * degree, init=arr),
        ArgBinding("frontier", "buffer", "uchar", n, init=arr, reset_each_run=reset),
        ArgBinding("visited", "buffer", "uchar", n, init=arr), ArgBinding("next", "buffer", "uchar", n, init=arr),
        ArgBinding("cost", "buffer", "int", n, init=arr), ArgBinding("n", "scalar", "int", value=n)])


POLICY = TimingPolicy(warmup=1, min_repeats=15, min_time_s=0.0, max_repeats=15, max_time_s=20)


def test_bfs_that_clears_its_frontier_is_timed_on_the_intended_state(harness):
    n, degree = 1 << 17, 16
    g = _graph(n, degree)
    k = Kernel(BFS_CLEAR, "bfs_clear")
    m = harness.run(k, _config(n, degree), POLICY, arrays=g)
    assert m.status == "ok", m.reason
    assert m.state_reset == "restore"
    # frontier is cleared; next/cost change too but next is only stored into; cost is read
    assert set(m.reset_buffers) == {"frontier", "cost"}
    # without the reset (as before) the repeats would find an empty frontier: measure that state
    # directly. With the reset every repeat does the full level's work, ~50x the consumed state's
    # on a CPU runtime; 5x leaves room for a shared machine
    consumed = dict(g, frontier=np.zeros(n, np.uint8))
    e = harness.run(k, _config(n, degree), POLICY, arrays=consumed)
    assert e.status == "ok" and e.state_reset == "none"
    assert m.time.median_us > 5 * e.time.median_us, (m.time.median_us, e.time.median_us)


def test_manifest_flag_forces_a_reset_and_plain_kernels_are_left_alone(harness):
    n, degree = 1 << 12, 4
    g = _graph(n, degree)
    m = harness.run(Kernel(BFS_CLEAR, "bfs_clear"), _config(n, degree, reset=True), POLICY, arrays=g)
    assert m.status == "ok" and "frontier" in m.reset_buffers
    t = harness.run(Kernel(TRIAD, "triad"), LaunchConfig((1024,), (64,), [
        ArgBinding("a", "buffer", "float", 1024), ArgBinding("b", "buffer", "float", 1024),
        ArgBinding("c", "buffer", "float", 1024), ArgBinding("s", "scalar", "float", value=2.0),
        ArgBinding("n", "scalar", "int", value=1024)]), POLICY)
    assert t.status == "ok" and t.state_reset == "none" and t.reset_buffers == []
    # an in-place update changes what it reads: restored, so x holds x0 * s after every launch
    x0 = np.arange(256, dtype=np.float32)
    s = harness.run(Kernel(INPLACE, "scale"), LaunchConfig((256,), (64,), [
        ArgBinding("x", "buffer", "float", 256, init="array"), ArgBinding("s", "scalar", "float", value=2.0)]),
        POLICY, arrays={"x": x0})
    assert s.state_reset == "restore" and s.reset_buffers == ["x"]
    assert s.time.repeats == 15
    # the machine state comes with the row
    assert "load_avg_1m" in t.machine and t.machine["window_s"] > 0


@pytest.mark.parametrize("n", [1 << 16])
def test_guard_check_still_sees_restored_buffers(harness, n):
    # the restore copies only the data region: the canaries around it stay intact (status ok)
    g = _graph(n, 2)
    m = harness.run(Kernel(BFS_CLEAR, "bfs_clear"), _config(n, 2), POLICY, arrays=g)
    assert m.status == "ok", m.reason


def test_suite_manifest_takes_reset_each_run(tmp_path):
    import json

    from kernelcast.bench.suite.manifest import ManifestError, load_manifest

    (tmp_path / "k.cl").write_text(INPLACE)
    doc = {"name": "t", "version": 1, "kernels": [{
        "id": "scale", "file": "k.cl", "kernel": "scale", "sizes": [256], "gsize": "n", "lsize": 64,
        "args": [{"name": "x", "buffer": "float", "count": "n", "reset_each_run": True},
                 {"name": "s", "scalar": "float", "value": 2}]}]}
    (tmp_path / "s.json").write_text(json.dumps(doc))
    suite = load_manifest(tmp_path / "s.json")
    inst = next(iter(suite.instances()))
    assert inst.arg("x").reset_each_run is True
    doc["kernels"][0]["args"][0]["reset_each_run"] = "yes"
    (tmp_path / "s.json").write_text(json.dumps(doc))
    with pytest.raises(ManifestError, match="reset_each_run"):
        load_manifest(tmp_path / "s.json")
