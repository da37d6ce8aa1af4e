"""The harness run for real on the local OpenCL device (PoCL here)."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from kernelcast.instrument.runner import TimingPolicy

from kernelcast.schema import ArgBinding, Kernel, LaunchConfig

FAST = TimingPolicy(warmup=1, min_repeats=3, min_time_s=0.0, max_repeats=50, max_time_s=5)

TYPES_SRC = """
__kernel void types(__global float4* out4, __global int2* out2, __global float* outf,
                    __local float* scratch, char c, uchar uc, short s, ushort us, int i, uint ui,
                    long l, ulong ul, float f, double d, float4 v) {
  size_t g = get_global_id(0);
  size_t lid = get_local_id(0);
  scratch[lid] = (float)lid;
  barrier(CLK_LOCAL_MEM_FENCE);
  out4[g] = v * (float)g;
  out2[g] = (int2)((int)g + i, (int)ui);
  outf[g] = (float)c + (float)uc + (float)s + (float)us + (float)l + (float)ul + f + (float)d
            + scratch[(lid + 1) % get_local_size(0)];
}
"""


def _sha(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def test_binding_every_kind_and_type(harness):
    n, ls = 256, 32
    k = Kernel(TYPES_SRC, "types")
    args = [
        ArgBinding("out4", "buffer", "float4", n, init="zeros"),
        ArgBinding("out2", "buffer", "int2", n, init="zeros"),
        ArgBinding("outf", "buffer", "float", n, init="zeros"),
        ArgBinding("scratch", "local", "float", ls),
        *[ArgBinding(nm, "scalar", t, value=v) for nm, t, v in [
            ("c", "char", -3), ("uc", "uchar", 200), ("s", "short", -1000), ("us", "ushort", 60000),
            ("i", "int", 7), ("ui", "uint", 4000000000), ("l", "long", -(2**40)), ("ul", "ulong", 2**41),
            ("f", "float", 0.5), ("d", "double", 0.25), ("v", "float4", "1,2,3,4")]],
    ]
    m = harness.run(k, LaunchConfig((n,), (ls,), args), FAST, want_outputs=True)
    assert m.status == "ok", m.reason
    g = np.arange(n, dtype=np.float32)
    exp4 = np.stack([g * 1, g * 2, g * 3, g * 4], axis=1).astype(np.float32)
    exp2 = np.stack([np.arange(n) + 7, np.full(n, np.uint32(4000000000).astype(np.int32))], axis=1).astype(np.int32)
    lid = np.arange(n) % ls
    base = np.float32(-3 + 200 - 1000 + 60000) + np.float32(-(2**40)) + np.float32(2**41) + 0.5 + 0.25
    expf = (np.float32(base) + ((lid + 1) % ls).astype(np.float32)).astype(np.float32)
    assert m.outputs["out4"]["sha256"] == _sha(exp4)
    assert m.outputs["out2"]["sha256"] == _sha(exp2)
    assert m.outputs["outf"]["changed"] is True
    assert m.outputs["outf"]["sha256"] == _sha(expf)


def test_sorted_digest_is_blind_to_the_order_of_elements(harness):
    """Two kernels that write the same int2 elements in opposite orders: their buffers' digests
    differ, the digests of their elements in sorted order do not."""
    src = ("__kernel void fwd(__global int2* o) { int g = get_global_id(0); o[g] = (int2)(g, -g); }\n"
           "__kernel void rev(__global int2* o) { int g = get_global_id(0); int n = get_global_size(0);\n"
           "  o[n - 1 - g] = (int2)(g, -g); }\n")
    n = 64
    cfg = LaunchConfig((n,), (16,), [ArgBinding("o", "buffer", "int2", n, init="zeros")])
    fwd, rev = (harness.run(Kernel(src, name), cfg, FAST, want_outputs=True).outputs["o"] for name in ("fwd", "rev"))
    g = np.arange(n, dtype=np.int32)
    elems = np.stack([g, -g], axis=1)
    assert fwd["sha256"] == _sha(elems) and rev["sha256"] == _sha(elems[::-1])
    assert fwd["sorted_sha256"] == rev["sorted_sha256"] and fwd["sha256"] != rev["sha256"]


def test_timing_statistics(harness):
    k = Kernel("__kernel void inc(__global float* a, int n) { int i = get_global_id(0); if (i < n) a[i] += 1.0f; }",
               "inc")
    n = 1 << 16
    cfg = LaunchConfig((n,), (64,), [ArgBinding("a", "buffer", "float", n), ArgBinding("n", "scalar", "int", value=n)])
    pol = TimingPolicy(warmup=1, min_repeats=20, min_time_s=0.02, max_repeats=5000, max_time_s=10)
    m = harness.run(k, cfg, pol)
    assert m.status == "ok", m.reason
    t = m.time
    assert t.repeats == len(t.times_us) >= 20
    # a ~10 us kernel: a sample is the interquartile mean of a group of launches (about 1 ms of
    # them); the window stops on the untrimmed summed time >= 0.02 s, which preempted launches
    # inflate under load, so only the launch count is a firm bound here
    assert t.group >= 4 and t.repeats * t.group >= 20 * 4
    assert t.min_us <= t.q1_us <= t.median_us <= t.q3_us
    assert t.iqr_us == pytest.approx(t.q3_us - t.q1_us)
    assert t.median_us == pytest.approx(float(np.median(t.times_us)))
    assert t.min_us == min(t.times_us) and t.mean_us == pytest.approx(float(np.mean(t.times_us)))
    assert t.cv == pytest.approx(float(np.std(t.times_us, ddof=1) / np.mean(t.times_us)))   # std / mean
    assert m.energy_j is None and m.avg_power_w is None and m.meter == "none"


def test_compile_error_is_a_status(harness):
    k = Kernel("__kernel void broken(__global float* a) { a[0] = undefined_thing; }", "broken")
    m = harness.run(k, LaunchConfig((64,), (64,), [ArgBinding("a", "buffer", "float", 64)]), FAST)
    assert m.status == "compile_error"
    assert "undefined_thing" in m.compile_log
    assert m.time is None


@pytest.mark.parametrize("index,where", [("i + 16", "past the end"), ("i - 4", "before the start")])
def test_out_of_bounds_write_detected(harness, index, where):
    src = f"__kernel void oob(__global int* a, int n) {{ int i = get_global_id(0); if (i < n) a[{index}] = 7; }}"
    n = 256
    cfg = LaunchConfig((n,), (64,), [ArgBinding("a", "buffer", "int", n), ArgBinding("n", "scalar", "int", value=n)])
    m = harness.run(Kernel(src, "oob"), cfg, FAST)
    assert m.status == "out_of_bounds"
    assert where in m.reason and m.reason.startswith("a:")


def test_in_bounds_kernel_is_not_flagged(harness):
    src = "__kernel void edge(__global int* a, int n) { int i = get_global_id(0); if (i < n) a[n - 1 - i] = i; }"
    n = 256
    cfg = LaunchConfig((n,), (64,), [ArgBinding("a", "buffer", "int", n), ArgBinding("n", "scalar", "int", value=n)])
    assert harness.run(Kernel(src, "edge"), cfg, FAST).status == "ok"


def test_invalid_configs(harness):
    k = Kernel("__kernel void z(__global float* a) { a[get_global_id(0)] = 0.0f; }", "z")
    buf = [ArgBinding("a", "buffer", "float", 100)]
    m = harness.run(k, LaunchConfig((100,), (64,), buf), FAST)
    assert m.status == "invalid_config" and "does not divide" in m.reason
    m = harness.run(k, LaunchConfig((1 << 20,), (1 << 20,), buf), FAST)
    assert m.status == "invalid_config" and "exceeds" in m.reason
    m = harness.run(k, LaunchConfig((64,), (64,), [ArgBinding("a", "scalar", "float", value=1)]), FAST)
    assert m.status == "invalid_config" and "is a buffer" in m.reason


def test_crash_and_timeout_replace_the_worker(device):
    from kernelcast.instrument.harness import Harness

    crash = Kernel("__kernel void boom(__global int* a) { __global int* p = (__global int*)0x10; "
                   "p[get_global_id(0) * 4096] = 1; a[0] = 1; }", "boom")
    hang = Kernel("__kernel void spin(__global volatile int* a, int n) { while (a[0] >= 0) { a[1] += n; } }", "spin")
    good = Kernel("__kernel void fine(__global int* a) { a[get_global_id(0)] = 1; }", "fine")
    with Harness(device, meter="none", timeout_s=3) as h:
        m = h.run(crash, LaunchConfig((64,), (64,), [ArgBinding("a", "buffer", "int", 64)]), FAST)
        assert m.status == "crash"
        assert "SIGSEGV" in m.reason or "SIGBUS" in m.reason, m.reason
        assert h.run(good, LaunchConfig((64,), (64,), [ArgBinding("a", "buffer", "int", 64)]), FAST).status == "ok"
        m = h.run(hang, LaunchConfig((1,), (1,), [ArgBinding("a", "buffer", "int", 4, init="zeros"),
                                                   ArgBinding("n", "scalar", "int", value=1)]), FAST)
        assert m.status == "timeout" and "3 s" in m.reason
        assert h.run(good, LaunchConfig((64,), (64,), [ArgBinding("a", "buffer", "int", 64)]), FAST).status == "ok"
        assert h.restarts == 2


def test_worker_stderr_goes_to_its_file_not_the_terminal(tmp_path):
    """What a crashing worker writes (glibc's heap-corruption abort here) lands in its stderr file,
    where the harness reads the crash's reason, and nothing reaches the caller's terminal."""
    import subprocess
    import sys

    path = tmp_path / "worker.stderr"
    code = ("import ctypes, sys; from kernelcast.instrument.harness import _redirect_stderr; "
            f"_redirect_stderr({str(path)!r}); sys.stderr.write('from python\\n'); sys.stderr.flush(); "
            "libc = ctypes.CDLL(None); libc.malloc.restype = ctypes.c_void_p; libc.free.argtypes = [ctypes.c_void_p]; "
            "p = libc.malloc(64); libc.free(p); libc.free(p)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       cwd=str(__import__("pathlib").Path(__file__).resolve().parents[1]))
    assert r.returncode != 0 and r.stderr == "" and r.stdout == ""
    text = path.read_text()
    assert "from python" in text and "double free" in text, text


def test_a_chatty_workers_stderr_file_stays_bounded(device, tmp_path):
    from kernelcast.instrument.harness import STDERR_MAX_BYTES, Harness

    h = Harness(device, meter="none")
    path = tmp_path / "w.stderr"
    path.write_bytes(b"x" * (STDERR_MAX_BYTES + 1))
    h._stderr_path = str(path)
    h._bound_stderr()
    assert path.stat().st_size == 0
    path.write_bytes(b"warning\n")
    h._bound_stderr()
    assert path.read_bytes() == b"warning\n" and h._stderr_tail() == "warning"


def test_build_cache_memory_and_disk(device, tmp_path):
    from kernelcast.instrument.backends import backend_for

    opened = backend_for(device)
    k = Kernel("__kernel void c1(__global float* a) { a[get_global_id(0)] *= 2.0f; }", "c1")
    bad = Kernel("__kernel void c2(__global float* a) { a[0] = nope; }", "c2")
    with opened(device, build_dir=tmp_path) as be:
        r1 = be.build(k)
        assert r1.ok and r1.cached == ""
        assert be.build(k).cached == "memory"
        assert not be.build(bad).ok
    with opened(device, build_dir=tmp_path) as be:
        r3 = be.build(k)
        assert r3.ok and r3.cached == "disk"
        assert be.has_kernel(r3.program, "c1") and not be.has_kernel(r3.program, "c2")
        again = be.build(bad)
        assert not again.ok and again.cached == "disk" and "nope" in again.log
        # a different option string is a different build
        assert be.build(Kernel(k.source, "c1", build_options="-DX=1")).cached == ""


def test_backend_interface_in_process(device, tmp_path):
    """The seam the runner uses, driven directly: bind with guards, launch, time, check, release."""
    from kernelcast.instrument.backends import BACKENDS, backend_for, get_backend

    from kernelcast.clang import kernel_signatures

    cls = backend_for(device)
    assert get_backend(cls.name) is cls and cls.name in BACKENDS
    assert all(v for v in cls.version_facts().values())
    src = "__kernel void add1(__global int* a, int n) { int i = get_global_id(0); if (i < n) a[i] += 1; }"
    params = kernel_signatures(src)["add1"]
    n = 100
    with cls(device, build_dir=tmp_path) as be:
        br = be.build(Kernel(src, "add1"))
        assert br.ok, br.log
        bound = be.bind(params, [ArgBinding("a", "buffer", "int", n, init="zeros"),
                                 ArgBinding("n", "scalar", "int", value=n)], seed=0, guard_bytes=64)
        (buf,) = bound.buffers
        assert buf.front >= 64 and buf.back >= 64 and buf.nbytes == 4 * n
        knl = be.prepare(br.program, "add1", bound)
        assert be.launch(knl, (128,), (64,)) > 0
        times = be.launch_batch(knl, (128,), (64,), 3)
        assert len(times) == 3 and all(t > 0 for t in times)
        be.enqueue(knl, (128,), (64,), count=2)
        be.synchronize()
        assert be.check_guards(bound) == ("", {})
        whole = be.read_back(buf)
        assert np.array_equal(whole[buf.front:buf.front + buf.nbytes].view(np.int32), np.full(n, 6, np.int32))
        be.release(bound)
        assert bound.buffers == []


def test_readback_and_given_arrays(harness):
    src = "__kernel void sq(__global const int* a, __global int* b) { int i = get_global_id(0); b[i] = a[i] * a[i]; }"
    a = np.arange(64, dtype=np.int32)
    cfg = LaunchConfig((64,), (32,), [ArgBinding("a", "buffer", "int", 64, init="array"),
                                       ArgBinding("b", "buffer", "int", 64, init="zeros")])
    m = harness.run(Kernel(src, "sq"), cfg, FAST, readback=["b"], arrays={"a": a})
    assert m.status == "ok", m.reason
    assert np.array_equal(m.readback["b"], a * a)
    assert "readback" not in m.to_dict()
    bad = harness.run(Kernel(src, "sq"), cfg, FAST, arrays={"a": a[:10]})
    assert bad.status == "invalid_config" and "needs 64" in bad.reason
