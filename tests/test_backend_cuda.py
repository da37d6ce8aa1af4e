"""The CUDA backend without a GPU: a fake of the ``pycuda.driver`` calls the backend makes (device
attributes, memory, module, function, events, errors), with real nvcc builds and the real runner
(guards, timing loop, statuses). On a machine with pycuda and a GPU the last test measures for real."""

from __future__ import annotations

import re
import subprocess
import sys
import types
from dataclasses import dataclass, field

import numpy as np
import pytest
from kernelcast.instrument.backends import cuda as cb
from kernelcast.instrument.backends import select_device
from kernelcast.instrument.backends.base import ConfigError, DeviceNotFound
from kernelcast.instrument.meters import auto_meter_name, make_meter
from kernelcast.instrument.runner import TimingPolicy, run_config

from kernelcast.schema import ArgBinding, Kernel, LaunchConfig

needs_nvcc = pytest.mark.skipif(cb.find_nvcc() is None, reason="nvcc not installed")

VADD = """__global__ void vadd(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
template <typename T, int BS> __global__ void scale(T* x, T s) { x[blockIdx.x * BS + threadIdx.x] *= s; }
"""

A100_ATTRS = {"MULTIPROCESSOR_COUNT": 108, "MAX_THREADS_PER_BLOCK": 1024, "MAX_BLOCK_DIM_X": 1024,
              "MAX_BLOCK_DIM_Y": 1024, "MAX_BLOCK_DIM_Z": 64, "WARP_SIZE": 32,
              "MAX_SHARED_MEMORY_PER_BLOCK": 49152, "TOTAL_CONSTANT_MEMORY": 65536, "CLOCK_RATE": 1410000,
              "TEXTURE_ALIGNMENT": 512}


# --------------------------------------------------------------------------------------------
# the fake driver: only what instrument/backends/cuda.py calls


class FakeError(Exception):
    pass


class FakeLogicError(FakeError):
    pass


class FakeLaunchError(FakeError):
    pass


class FakeMemoryError(FakeError):
    pass


@dataclass
class FakeGPU:
    """Device memory (address -> bytearray), a clock in ms, launches seen, and per-entry
    Python bodies that stand for the kernels."""

    memory: dict[int, bytearray] = field(default_factory=dict)
    next_addr: int = 0x7F0000000000
    clock_ms: float = 0.0
    launch_ms: float = 0.025
    launches: list[dict] = field(default_factory=list)
    bodies: dict = field(default_factory=dict)
    loaded: list[str] = field(default_factory=list)
    allocs: list[tuple[int, int]] = field(default_factory=list)      # (address, bytes) of every allocation
    alloc_error: Exception | None = None
    launch_error: Exception | None = None
    restores: int = 0                                                   # device-to-device copies

    def find(self, addr: int) -> tuple[bytearray, int]:
        for base, buf in self.memory.items():
            if base <= addr < base + len(buf) + 1:
                return buf, addr - base
        raise FakeLogicError("cuMemcpy failed: invalid argument")


def make_fake(gpu: FakeGPU, n_devices: int = 1) -> types.ModuleType:
    drv = types.ModuleType("pycuda.driver")
    drv.Error, drv.LogicError, drv.LaunchError, drv.MemoryError = FakeError, FakeLogicError, FakeLaunchError, \
        FakeMemoryError
    drv.device_attribute = types.SimpleNamespace(**{k: k for k in A100_ATTRS})
    drv.init = lambda: None
    drv.get_version = lambda: (12, 4, 0)
    drv.get_driver_version = lambda: 12040

    class Alloc:
        def __init__(self, n: int) -> None:
            self.addr = gpu.next_addr
            gpu.next_addr += (n + 4095) // 4096 * 4096 + 4096
            gpu.memory[self.addr] = bytearray(n)
            gpu.allocs.append((self.addr, n))

        def __int__(self) -> int:
            return self.addr

        def free(self) -> None:
            del gpu.memory[self.addr]

    def mem_alloc(n: int) -> Alloc:
        if gpu.alloc_error is not None:
            raise gpu.alloc_error
        return Alloc(n)

    def memcpy_htod(dst: Alloc, src: np.ndarray) -> None:
        raw = np.ascontiguousarray(src).view(np.uint8).tobytes()
        gpu.memory[int(dst)][:len(raw)] = raw

    def memcpy_dtoh(dst: np.ndarray, src: int) -> None:
        buf, off = gpu.find(int(src))
        dst.view(np.uint8)[:] = np.frombuffer(bytes(buf[off:off + dst.nbytes]), dtype=np.uint8)

    def memcpy_dtod_async(dst: int, src: int, size: int, stream=None) -> None:
        gpu.restores += 1
        sbuf, soff = gpu.find(int(src))
        dbuf, doff = gpu.find(int(dst))
        dbuf[doff:doff + size] = bytes(sbuf[soff:soff + size])

    class Context:
        def pop(self) -> None:
            pass

        def detach(self) -> None:
            pass

    class Device:
        def __init__(self, i: int) -> None:
            if not 0 <= i < n_devices:
                raise FakeLogicError("cuDeviceGet failed: invalid device ordinal")

        @staticmethod
        def count() -> int:
            return n_devices

        def name(self) -> str:
            return "NVIDIA A100-SXM4-40GB"

        def compute_capability(self) -> tuple[int, int]:
            return (8, 0)

        def total_memory(self) -> int:
            return 40 << 30

        def pci_bus_id(self) -> str:
            return "0000:07:00.0"

        def get_attribute(self, a: str) -> int:
            return A100_ATTRS[a]

        def make_context(self) -> Context:
            return Context()

    class Stream:
        def synchronize(self) -> None:
            pass

    class Event:
        def record(self, stream: Stream | None = None) -> Event:
            self.t = gpu.clock_ms
            return self

        def synchronize(self) -> None:
            pass

        def time_till(self, other: Event) -> float:
            return other.t - self.t

    class Function:
        def __init__(self, name: str) -> None:
            self.name = name

        def __call__(self, *args, block, grid, stream=None, shared=0) -> None:
            if gpu.launch_error is not None:
                raise gpu.launch_error
            gpu.launches.append({"entry": self.name, "args": args, "block": block, "grid": grid, "shared": shared})
            m = re.match(r"_Z(\d+)", self.name)
            body = gpu.bodies.get(self.name[m.end():m.end() + int(m.group(1))] if m else self.name)
            if body is not None:
                body(gpu, args, grid, block)
            gpu.clock_ms += gpu.launch_ms

    class Module:
        def get_function(self, name: str) -> Function:
            return Function(name)

    def module_from_buffer(b: bytes) -> Module:
        gpu.loaded.append(b.decode())
        return Module()

    drv.mem_alloc, drv.memcpy_htod, drv.memcpy_dtoh = mem_alloc, memcpy_htod, memcpy_dtoh
    drv.memcpy_dtod_async = memcpy_dtod_async
    drv.Device, drv.Stream, drv.Event, drv.module_from_buffer = Device, Stream, Event, module_from_buffer
    return drv


def vadd_body(gpu: FakeGPU, args: tuple, grid: tuple, block: tuple, overrun: int = 0) -> None:
    pa, pb, pc, n = args
    n = int(n)
    threads = grid[0] * block[0]
    ba, oa = gpu.find(int(pa))
    bb, ob = gpu.find(int(pb))
    bc, oc = gpu.find(int(pc))
    a = np.frombuffer(bytes(ba[oa:oa + 4 * n]), np.float32)
    b = np.frombuffer(bytes(bb[ob:ob + 4 * n]), np.float32)
    m = min(threads, n)
    bc[oc:oc + 4 * m] = (a[:m] + b[:m]).astype(np.float32).tobytes()
    if overrun:
        bc[oc + 4 * n:oc + 4 * n + overrun] = b"\x00" * overrun


@pytest.fixture()
def fake(monkeypatch):
    gpu = FakeGPU()
    drv = make_fake(gpu)
    monkeypatch.setattr(cb, "_driver", lambda: drv)
    return gpu, drv


def device() -> object:
    return cb.CudaBackend.list_devices()[0]


# --------------------------------------------------------------------------------------------


def test_device_info_from_driver_attributes(fake):
    (d,) = cb.CudaBackend.list_devices()
    assert d.backend == "cuda" and d.spec == "cuda:0" and d.platform_name == "CUDA"
    assert (d.compute_units, d.preferred_wg_multiple, d.max_work_group_size) == (108, 32, 1024)
    assert d.max_work_item_sizes == [1024, 1024, 64] and d.local_mem_bytes == 49152
    assert d.max_clock_mhz == 1410 and d.device_version == "sm_80" and d.pci_bus_id == "0000:07:00.0"
    assert d.meter == auto_meter_name("NVIDIA Corporation", "GPU") and d.type == "GPU"   # nvml where NVML loads
    assert type(d).from_dict(d.to_dict()) == d


def test_select_by_cuda_spec(fake):
    devs = cb.CudaBackend.list_devices()
    assert select_device("cuda:0", devs, language="cuda").spec == "cuda:0"
    assert select_device("auto", devs, language="cuda").spec == "cuda:0"
    with pytest.raises(DeviceNotFound, match="no cuda device 3"):
        select_device("cuda:3", devs, language="cuda")
    with pytest.raises(DeviceNotFound, match="runs cuda kernels, not opencl"):
        select_device("cuda:0", devs, language="opencl")


def test_no_pycuda_means_no_devices(monkeypatch):
    def missing():
        raise ImportError("No module named 'pycuda'")

    monkeypatch.setattr(cb, "_driver", missing)
    assert cb.CudaBackend.list_devices() == []
    with pytest.raises(DeviceNotFound, match="pip install 'kernelcast\\[cuda\\]'"):
        select_device("auto", language="cuda")


@pytest.mark.parametrize("gsize,lsize,grid,block", [
    ((1 << 20,), (256,), (4096, 1, 1), (256, 1, 1)),
    ((1024, 512), (16, 8), (64, 64, 1), (16, 8, 1)),
    ((64, 64, 8), (8, 8, 2), (8, 8, 4), (8, 8, 2)),
    ((1000,), None, (4, 1, 1), (250, 1, 1)),      # no block given: largest divisor up to 256
])
def test_grid_is_gsize_over_lsize(gsize, lsize, grid, block):
    assert cb.grid_block(gsize, lsize) == (grid, block)


def test_grid_rejects_non_dividing_block():
    with pytest.raises(ConfigError, match="does not divide"):
        cb.grid_block((1000,), (256,))


def _vadd_config(n: int = 4096, lsize: int = 256) -> LaunchConfig:
    return LaunchConfig(gsize=(n,), lsize=(lsize,), args=[
        ArgBinding("a", "buffer", "float", n), ArgBinding("b", "buffer", "float", n),
        ArgBinding("c", "buffer", "float", n, init="zeros"), ArgBinding("n", "scalar", "int", value=n)])


POLICY = TimingPolicy(warmup=1, min_repeats=5, min_time_s=0.0, max_repeats=20, idle_s=0.0)


@needs_nvcc
def test_run_binds_arguments_and_times_with_events(fake, tmp_path):
    gpu, _ = fake
    gpu.bodies["vadd"] = vadd_body
    be = cb.CudaBackend(device(), build_dir=tmp_path)
    m = run_config(be, Kernel(VADD, "vadd", language="cuda"), _vadd_config(), POLICY, make_meter("none"),
                   readback=["a", "b", "c"])
    assert m.status == "ok", m.reason
    # event times: every launch advances the fake clock by 0.025 ms = 25 us
    assert m.time is not None and m.time.repeats >= 5 and m.time.median_us == pytest.approx(25.0)
    first = gpu.launches[0]
    assert first["grid"] == (16, 1, 1) and first["block"] == (256, 1, 1) and first["entry"] == "_Z4vaddPKfS0_Pfi"
    pa, pb, pc, n = first["args"]
    # each pointer is the data inside its allocation, after the front guard
    for p in (pa, pb, pc):
        assert isinstance(p, np.uintp)
        base, size = max((a, n) for a, n in gpu.allocs if a <= int(p))
        assert int(p) - base == 4096 and size == 4096 + 4 * 4096 + 4096     # front guard, data, back guard
    assert isinstance(n, np.int32) and int(n) == 4096
    np.testing.assert_allclose(m.readback["c"], m.readback["a"] + m.readback["b"])
    assert ".entry _Z4vaddPKfS0_Pfi" in gpu.loaded[0]          # real nvcc PTX loaded into the module
    be.close()
    assert gpu.memory == {}                                    # every buffer freed


@needs_nvcc
def test_write_past_the_end_is_out_of_bounds(fake, tmp_path):
    gpu, _ = fake
    gpu.bodies["vadd"] = lambda g, a, gr, bl: vadd_body(g, a, gr, bl, overrun=4)
    be = cb.CudaBackend(device(), build_dir=tmp_path)
    m = run_config(be, Kernel(VADD, "vadd", language="cuda"), _vadd_config(), POLICY, make_meter("none"))
    assert m.status == "out_of_bounds" and "c: write 4 B past the end" in m.reason


@needs_nvcc
@pytest.mark.parametrize("err,status,text,lost", [
    (FakeLaunchError("cuLaunchKernel failed: unspecified launch failure"), "runtime_error", "launch failure", True),
    (FakeLogicError("cuLaunchKernel failed: too many resources requested for launch"), "invalid_config",
     "too many resources", False),
])
def test_launch_errors_map_to_statuses(fake, tmp_path, err, status, text, lost):
    gpu, _ = fake
    gpu.launch_error = err
    be = cb.CudaBackend(device(), build_dir=tmp_path)
    m = run_config(be, Kernel(VADD, "vadd", language="cuda"), _vadd_config(), POLICY, make_meter("none"))
    assert m.status == status and text in m.reason and m.reason.startswith("first launch")
    assert be.lost is lost


@needs_nvcc
def test_allocation_failure_is_runtime_error(fake, tmp_path):
    gpu, _ = fake
    gpu.alloc_error = FakeMemoryError("cuMemAlloc failed: out of memory")
    be = cb.CudaBackend(device(), build_dir=tmp_path)
    m = run_config(be, Kernel(VADD, "vadd", language="cuda"), _vadd_config(), POLICY, make_meter("none"))
    assert m.status == "runtime_error" and "allocating buffers" in m.reason and "out of memory" in m.reason


@needs_nvcc
def test_template_kernel_and_compile_error(fake, tmp_path):
    gpu, _ = fake
    be = cb.CudaBackend(device(), build_dir=tmp_path)
    cfg = LaunchConfig(gsize=(1024,), lsize=(128,), args=[ArgBinding("x", "buffer", "float", 1024),
                                                          ArgBinding("s", "scalar", "float", value=2.0)])
    m = run_config(be, Kernel(VADD, "scale<float, 128>", language="cuda"), cfg, POLICY, make_meter("none"))
    assert m.status == "ok", m.reason
    assert gpu.launches[0]["entry"] == "_Z5scaleIfLi128EEvPT_S0_" and gpu.launches[0]["grid"] == (8, 1, 1)
    assert isinstance(gpu.launches[0]["args"][1], np.float32)
    bad = Kernel("__global__ void k(float* a) { a[0] = nope; }", "k", language="cuda")
    m = run_config(be, bad, cfg, POLICY, make_meter("none"))
    assert m.status == "compile_error" and "nope" in m.reason


def test_measure_cuda_kernel_without_cuda_device_exits_2(tmp_path):
    # with or without pycuda, a machine without a CUDA GPU gives the same one line
    if _real_cuda_device():
        pytest.skip("a CUDA GPU is present: the kernel runs instead")
    p = tmp_path / "k.cu"
    p.write_text(VADD)
    r = subprocess.run([sys.executable, "-m", "kernelcast.cli", "measure", "--kernel", str(p), "--name", "vadd",
                        "--gsize", "1024", "--lsize", "256"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "no CUDA device found" in r.stderr and "pip install" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def _real_cuda_device() -> bool:
    try:
        import pycuda.driver as drv

        drv.init()
        return drv.Device.count() > 0
    except Exception:  # noqa: BLE001
        return False


@pytest.mark.skipif(not _real_cuda_device(), reason="no CUDA GPU with pycuda on this machine")
@needs_nvcc
def test_real_gpu_vadd(tmp_path):     # pragma: no cover - needs a GPU
    d = select_device("cuda:0", language="cuda")
    n = 1 << 24
    with cb.CudaBackend(d, build_dir=tmp_path) as be:
        m = run_config(be, Kernel(VADD, "vadd", language="cuda"), _vadd_config(n, 256), TimingPolicy(),
                       make_meter("none"), readback=["a", "b", "c"])
    assert m.status == "ok", m.reason
    np.testing.assert_allclose(m.readback["c"], m.readback["a"] + m.readback["b"])
    # 12 B per element: at least 1 us and at most 12 B * n / (50 GB/s) on any CUDA GPU
    assert 1.0 <= m.time.median_us <= 12 * n / 50e9 * 1e6


DYN = """template <typename T> __global__ void blocksum(const T* in, T* out, int n) {
    extern __shared__ T buf[];
    unsigned int tid = threadIdx.x, i = blockIdx.x * blockDim.x + threadIdx.x;
    buf[tid] = i < n ? in[i] : T(0);
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) { if (tid < s) buf[tid] += buf[tid + s]; __syncthreads(); }
    if (tid == 0) out[blockIdx.x] = buf[0];
}
"""


@needs_nvcc
def test_dynamic_shared_memory_is_the_launch_shared_size(fake, tmp_path):
    gpu, _ = fake
    be = cb.CudaBackend(device(), build_dir=tmp_path)
    cfg = LaunchConfig(gsize=(4096,), lsize=(256,), args=[
        ArgBinding("in", "buffer", "float", 4096), ArgBinding("out", "buffer", "float", 16),
        ArgBinding("n", "scalar", "int", value=4096), ArgBinding("buf", "local", "float", 256)])
    m = run_config(be, Kernel(DYN, "blocksum<float>", language="cuda"), cfg, POLICY, make_meter("none"))
    assert m.status == "ok", m.reason
    first = gpu.launches[0]
    assert first["shared"] == 256 * 4 and len(first["args"]) == 3      # buf is not a kernel argument
    too_big = LaunchConfig(gsize=(4096,), lsize=(256,),
                           args=[*cfg.args[:3], ArgBinding("buf", "local", "float", 1 << 20)])
    m = run_config(be, Kernel(DYN, "blocksum<float>", language="cuda"), too_big, POLICY, make_meter("none"))
    assert m.status == "invalid_config" and "49152" in m.reason          # the device's shared memory per block


DRAIN = """__global__ void drain(float *a, float *c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { c[i] += a[i]; a[i] = 0.0f; }
}
"""


def drain_body(gpu: FakeGPU, args: tuple, grid: tuple, block: tuple) -> None:
    pa, pc, n = args
    n = int(n)
    ba, oa = gpu.find(int(pa))
    bc, oc = gpu.find(int(pc))
    a = np.frombuffer(bytes(ba[oa:oa + 4 * n]), np.float32)
    c = np.frombuffer(bytes(bc[oc:oc + 4 * n]), np.float32)
    bc[oc:oc + 4 * n] = (c + a).astype(np.float32).tobytes()
    ba[oa:oa + 4 * n] = bytes(4 * n)


@needs_nvcc
def test_a_kernel_that_consumes_its_input_is_restored_before_every_timed_launch(fake, tmp_path):
    gpu, _ = fake
    gpu.bodies["drain"] = drain_body
    be = cb.CudaBackend(device(), build_dir=tmp_path)
    n = 1024
    cfg = LaunchConfig(gsize=(n,), lsize=(128,), args=[
        ArgBinding("a", "buffer", "float", n, init="ones"), ArgBinding("c", "buffer", "float", n, init="zeros"),
        ArgBinding("n", "scalar", "int", value=n)])
    m = run_config(be, Kernel(DRAIN, "drain", language="cuda"), cfg, POLICY, make_meter("none"))
    assert m.status == "ok", m.reason
    assert m.state_reset == "restore" and m.reset_buffers == ["a", "c"]     # c is read too (c += a)
    # every launch after the first found the pristine inputs again: two copies per later launch
    assert m.time is not None and gpu.restores == 2 * (len(gpu.launches) - 1) >= 2 * m.time.repeats
    be.close()
    assert gpu.memory == {}
