"""The CUDA backend (pycuda, the optional extra ``kernelcast[cuda]``): devices, nvcc builds and
:class:`CudaBackend`.

Selected with ``--device cuda:N`` (or ``auto`` for a CUDA kernel). It runs CUDA kernels
(``Kernel.language == "cuda"``) with the same harness, guard regions and meters as OpenCL:

* **Builds**: ``nvcc -ptx -arch=compute_XY`` (the device's compute capability, or the lowest the
  installed nvcc supports), loaded with ``module_from_buffer`` (the driver JIT-compiles the PTX);
  the PTX is the cached program binary. A template kernel is named with its arguments
  (``reduce<float, 256>``) and instantiated for the build; its mangled ``.entry`` is found by
  :func:`kernelcast.cuda.ptx_entry_name`.
* **Launch geometry**: OpenCL's words are kept: ``gsize`` is the total number of threads per
  dimension and ``lsize`` the block, so ``grid = gsize / lsize`` per dimension (``lsize`` must
  divide ``gsize``, as the runner checks). Without ``lsize`` the block is the largest divisor of
  ``gsize[0]`` up to 256 (CUDA has no driver-chosen block).
* **Buffers**: one ``mem_alloc`` per argument holding the guards and the data; the kernel gets
  the device pointer of the data (``np.uintp``), so both guards are checked.
* **Timing**: CUDA events recorded around each launch on one stream (``time_till``, ms -> us).
* **Errors**: driver errors become :class:`BackendError` (statuses ``runtime_error``), a launch
  the device cannot take ("too many resources requested", "invalid configuration", "invalid
  argument" at launch) :class:`ConfigError` (status ``invalid_config``). After a sticky error
  (``LaunchError``: illegal address, unspecified launch failure) the context is unusable:
  :attr:`Backend.lost` is set and the harness replaces the worker.

pycuda is imported only when a device is listed or opened (:func:`_driver`; tests replace it with
a fake of the calls made here). Dynamic shared memory (``extern __shared__ T s[]``) is a ``local``
parameter, bound like an OpenCL ``__local`` argument (``--arg s=local:float:256``) and passed as the
launch's shared-memory size.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import numpy as np
from kernelcast.instrument.backends.base import (
    Backend,
    BackendError,
    BoundArgs,
    BoundBuffer,
    Compiled,
    ConfigError,
    DeviceInfo,
    Driver,
    Restore,
)
from kernelcast.instrument.meters import auto_meter_name

from kernelcast.clang import build_option_defines
from kernelcast.cuda import instantiation, ptx_entry_name
from kernelcast.schema import Kernel

log = logging.getLogger(__name__)

#: block size used when the launch gives none (largest divisor of gsize[0] up to this)
DEFAULT_BLOCK = 256
NVCC_TIMEOUT_S = 120.0

_CONFIG_ERRORS = ("too many resources requested", "invalid configuration", "invalid argument", "invalid value")


def _driver() -> ModuleType:
    """``pycuda.driver``, initialised; ImportError when pycuda is not installed."""
    import pycuda.driver as drv  # deferred: pycuda is optional and loads the CUDA driver

    drv.init()
    return drv


def find_nvcc() -> str | None:
    c = shutil.which("nvcc")
    if c is None and os.path.exists("/usr/local/cuda/bin/nvcc"):
        c = "/usr/local/cuda/bin/nvcc"
    return c


def _nvcc_archs(nvcc: str) -> list[int]:
    try:
        r = subprocess.run([nvcc, "--list-gpu-arch"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []

    return sorted({int(m) for m in re.findall(r"compute_(\d+)", r.stdout)})


def grid_block(gsize: tuple[int, ...], lsize: tuple[int, ...] | None) -> tuple[tuple[int, int, int],
                                                                              tuple[int, int, int]]:
    """CUDA (grid, block) of an OpenCL-style launch: ``grid = gsize / lsize`` per dimension."""
    g = [int(x) for x in gsize] + [1] * (3 - len(gsize))
    if lsize is None:
        b0 = max(d for d in range(1, min(g[0], DEFAULT_BLOCK) + 1) if g[0] % d == 0)
        block = [b0, 1, 1]
    else:
        block = [int(x) for x in lsize] + [1] * (3 - len(lsize))
    for d in range(3):
        if block[d] <= 0 or g[d] % block[d]:
            raise ConfigError(f"block {block[d]} does not divide the {g[d]} threads of dimension {d}")
    grid = [g[d] // block[d] for d in range(3)]
    return (grid[0], grid[1], grid[2]), (block[0], block[1], block[2])


def map_error(drv: ModuleType, e: Exception, during: str) -> Exception:
    """The kernelcast exception of a pycuda error (see the module docstring)."""
    msg = f"{during}: {e}".strip()
    text = str(e).lower()
    if isinstance(e, getattr(drv, "LaunchError", ())):
        return BackendError(msg)
    if during.startswith("launch") and any(s in text for s in _CONFIG_ERRORS):
        return ConfigError(msg)
    return BackendError(msg)


def _is_sticky(drv: ModuleType, e: Exception) -> bool:
    return isinstance(e, getattr(drv, "LaunchError", ())) or "illegal address" in str(e).lower()


@dataclass
class CudaProgram:
    """A loaded module with the PTX it came from."""

    module: Driver
    ptx: str


@dataclass
class CudaLaunch:
    """A kernel with its arguments and its dynamic shared memory, ready to launch."""

    function: Driver
    args: list[Any]
    shared_bytes: int = 0


@dataclass(frozen=True)
class DynamicShared:
    """The value bound to a ``local`` parameter (``extern __shared__`` array): bytes of dynamic
    shared memory, passed at launch, not as a kernel argument."""

    nbytes: int


class CudaBackend(Backend):
    """CUDA through pycuda: one context and one stream on one device."""

    name: ClassVar[str] = "cuda"
    label: ClassVar[str] = "CUDA"
    install_hint: ClassVar[str] = "CUDA devices need an NVIDIA driver and pycuda: pip install 'kernelcast[cuda]'"
    languages: ClassVar[tuple[str, ...]] = ("cuda",)

    # -- devices and facts ----------------------------------------------------------------

    @classmethod
    def list_devices(cls, probe: bool = True) -> list[DeviceInfo]:
        """Every CUDA device (none without pycuda or a driver). ``builds`` says whether nvcc is
        installed (the driver itself compiles no CUDA C++)."""
        try:
            drv = _driver()
        except ImportError:
            return []
        except Exception as e:  # noqa: BLE001 - pycuda without a working driver: no devices
            log.debug("CUDA driver unavailable: %s", e)
            return []

        A = drv.device_attribute
        nvcc = find_nvcc()
        out = []
        try:
            n = drv.Device.count()
        except drv.Error as e:
            log.debug("cuDeviceGetCount failed: %s", e)
            return []
        for i in range(n):
            dev = drv.Device(i)
            cc = dev.compute_capability()
            mem = int(dev.total_memory())
            try:
                bus = str(dev.pci_bus_id())
            except drv.Error:
                bus = None
            info = DeviceInfo(
                platform_index=0, device_index=i, platform_name="CUDA",
                platform_version="CUDA " + ".".join(str(x) for x in drv.get_version()),
                name=str(dev.name()), vendor="NVIDIA Corporation", type="GPU",
                driver_version=str(drv.get_driver_version()), device_version=f"sm_{cc[0]}{cc[1]}",
                compute_units=int(dev.get_attribute(A.MULTIPROCESSOR_COUNT)),
                max_work_group_size=int(dev.get_attribute(A.MAX_THREADS_PER_BLOCK)),
                max_work_item_sizes=[int(dev.get_attribute(a)) for a in
                                     (A.MAX_BLOCK_DIM_X, A.MAX_BLOCK_DIM_Y, A.MAX_BLOCK_DIM_Z)],
                preferred_wg_multiple=int(dev.get_attribute(A.WARP_SIZE)),
                global_mem_bytes=mem, max_alloc_bytes=mem,
                local_mem_bytes=int(dev.get_attribute(A.MAX_SHARED_MEMORY_PER_BLOCK)),
                max_constant_bytes=int(dev.get_attribute(A.TOTAL_CONSTANT_MEMORY)),
                max_clock_mhz=int(dev.get_attribute(A.CLOCK_RATE)) // 1000,
                mem_base_align_bytes=int(dev.get_attribute(A.TEXTURE_ALIGNMENT)),
                pci_bus_id=bus, builds=nvcc is not None if probe else None,
                build_error="" if nvcc is not None or not probe else "nvcc not found",
                backend="cuda",
            )
            info.meter = auto_meter_name(info.vendor, info.type)
            out.append(info)
        return out

    @classmethod
    def version_facts(cls) -> dict[str, str]:
        try:
            import pycuda  # deferred: pycuda is optional and loads the CUDA driver

            facts = {"pycuda_version": str(getattr(pycuda, "VERSION_TEXT", "?"))}
        except ImportError:
            facts = {}
        try:
            drv = _driver()
            facts["cuda_driver_version"] = str(drv.get_driver_version())
        except Exception:  # noqa: BLE001 - facts are best effort
            pass
        return facts

    @classmethod
    def has_int64_atomics(cls, device: DeviceInfo) -> bool:
        return True     # every CUDA device with compute capability >= 3.5 has 64-bit atomics

    # -- an open device -------------------------------------------------------------------

    def __init__(self, device: DeviceInfo, *, build_dir: Path | None = None, profiling: bool = True) -> None:
        super().__init__(device, build_dir=build_dir, profiling=profiling)
        drv = _driver()
        self._drv = drv
        try:
            self._dev = drv.Device(device.device_index)
            self._ctx = self._dev.make_context()
            self._stream = drv.Stream()
        except drv.Error as e:
            raise BackendError(f"opening CUDA device {device.device_index}: {e}") from e
        self._closed = False

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._builds.clear()
        try:
            if not self.lost:
                self._stream.synchronize()
        except self._drv.Error as e:
            log.debug("stream did not finish on close: %s", e)
        try:
            self._ctx.pop()
            self._ctx.detach()
        except self._drv.Error as e:
            log.debug("context release: %s", e)

    def _fail(self, e: Exception, during: str) -> Exception:
        if _is_sticky(self._drv, e):
            self.lost = True
        return map_error(self._drv, e, during)

    # builds

    def _arch(self) -> str:
        want = int(self.device.device_version.removeprefix("sm_") or 0)
        nvcc = find_nvcc()
        archs = _nvcc_archs(nvcc) if nvcc else []
        ok = [a for a in archs if a <= want]
        return f"compute_{max(ok) if ok else (archs[0] if archs else want)}"

    def build_key(self, kernel: Kernel) -> str:
        h = hashlib.sha256()
        for part in (hashlib.sha256(kernel.source.encode()).hexdigest(), kernel.name, kernel.build_options,
                     self.device.identity, "cuda"):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()[:32]

    def _compile(self, kernel: Kernel) -> Compiled:
        nvcc = find_nvcc()
        if nvcc is None:
            return Compiled(False, None, "nvcc not found: CUDA kernels are compiled with the CUDA toolkit's nvcc")
        with tempfile.TemporaryDirectory(prefix="kc_cuda_") as td:
            src, dst = os.path.join(td, "kernel.cu"), os.path.join(td, "kernel.ptx")
            Path(src).write_text(kernel.source + instantiation(kernel.name))
            cmd = [nvcc, "-ptx", f"-arch={self._arch()}", *build_option_defines(kernel.build_options), src, "-o", dst]
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=NVCC_TIMEOUT_S, check=False, cwd=td)
            except subprocess.TimeoutExpired:
                return Compiled(False, None, f"nvcc did not finish in {NVCC_TIMEOUT_S:g} s")
            if r.returncode != 0 or not os.path.exists(dst):
                return Compiled(False, None, (r.stderr + r.stdout).replace(src, "kernel.cu").strip() or "nvcc failed")
            ptx = Path(dst).read_text()
        try:
            return Compiled(True, self._load_binary(kernel, ptx.encode()), "")
        except BackendError as e:
            return Compiled(False, None, str(e))

    def _load_binary(self, kernel: Kernel, binary: bytes) -> CudaProgram:
        try:
            module = self._drv.module_from_buffer(binary)
        except self._drv.Error as e:
            raise self._fail(e, "loading the PTX") from e
        return CudaProgram(module, binary.decode(errors="replace"))

    def _program_binary(self, program: CudaProgram) -> bytes | None:
        return program.ptx.encode()

    def has_kernel(self, program: CudaProgram, name: str) -> bool:
        return ptx_entry_name(program.ptx, name) is not None

    # argument buffers

    def _allocate(self, name: str, image: np.ndarray, raw: np.ndarray, front: int) -> tuple[Driver, Driver, int]:
        try:
            parent = self._drv.mem_alloc(max(int(image.nbytes), 1))
            self._drv.memcpy_htod(parent, image)
        except self._drv.Error as e:
            raise self._fail(e, f"allocating {name}") from e
        return parent, np.uintp(int(parent) + front), front

    def _local_arg(self, nbytes: int) -> Driver:
        return DynamicShared(nbytes)

    def read_range(self, buf: BoundBuffer, offset: int, size: int) -> np.ndarray:
        out = np.empty(size, dtype=np.uint8)
        if size:
            try:
                self._stream.synchronize()
                self._drv.memcpy_dtoh(out, int(buf.parent) + offset)
            except self._drv.Error as e:
                raise self._fail(e, f"reading {buf.name}") from e
        return out

    # state-consuming kernels

    def upload(self, data: np.ndarray) -> Driver:
        raw = np.ascontiguousarray(data).view(np.uint8)
        try:
            mem = self._drv.mem_alloc(max(int(raw.nbytes), 1))
            if raw.nbytes:
                self._drv.memcpy_htod(mem, raw)
        except self._drv.Error as e:
            raise self._fail(e, "allocating a pristine copy") from e
        return mem

    def restore(self, items: Sequence[Restore]) -> None:
        try:
            for r in items:
                if r.buffer.nbytes:
                    self._drv.memcpy_dtod_async(int(r.buffer.parent) + r.buffer.front, r.pristine, r.buffer.nbytes,
                                                self._stream)
        except self._drv.Error as e:
            raise self._fail(e, "restoring a buffer") from e

    def free(self, mem: Driver) -> None:
        try:
            mem.free()
        except self._drv.Error as e:    # best effort
            log.debug("freeing a pristine copy: %s", e)

    def release(self, bound: BoundArgs) -> None:
        for b in bound.buffers:
            try:
                b.parent.free()
            except self._drv.Error as e:    # freeing is best effort
                log.debug("freeing %s: %s", b.name, e)
        bound.buffers.clear()
        bound.values.clear()

    # launches

    def prepare(self, program: CudaProgram, name: str, bound: BoundArgs) -> CudaLaunch:
        entry = ptx_entry_name(program.ptx, name)
        if entry is None:
            raise BackendError(f"no kernel {name!r} in the module")
        try:
            fn = program.module.get_function(entry)
        except self._drv.Error as e:
            raise self._fail(e, "getting the kernel") from e
        args = [v for v in bound.values if not isinstance(v, DynamicShared)]
        shared = sum(v.nbytes for v in bound.values if isinstance(v, DynamicShared))
        return CudaLaunch(fn, args, shared)

    def _call(self, k: CudaLaunch, grid: tuple[int, int, int], block: tuple[int, int, int]) -> None:
        k.function(*k.args, block=block, grid=grid, stream=self._stream, shared=k.shared_bytes)

    def enqueue(self, kernel: CudaLaunch, gsize: tuple[int, ...], lsize: tuple[int, ...] | None,
                count: int = 1, restore: Sequence[Restore] = ()) -> None:
        grid, block = grid_block(gsize, lsize)
        try:
            for _ in range(count):
                if restore:
                    self.restore(restore)
                self._call(kernel, grid, block)
        except self._drv.Error as e:
            raise self._fail(e, "launch") from e

    def synchronize(self) -> None:
        try:
            self._stream.synchronize()
        except self._drv.Error as e:
            raise self._fail(e, "synchronize") from e

    def launch(self, kernel: CudaLaunch, gsize: tuple[int, ...], lsize: tuple[int, ...] | None) -> float:
        return self.launch_batch(kernel, gsize, lsize, 1)[0]

    def launch_batch(self, kernel: CudaLaunch, gsize: tuple[int, ...], lsize: tuple[int, ...] | None,
                     count: int, restore: Sequence[Restore] = ()) -> list[float]:
        if not self.profiling:
            raise BackendError("the device was opened without timing (profiling=False)")
        grid, block = grid_block(gsize, lsize)
        drv = self._drv
        try:
            events = [(drv.Event(), drv.Event()) for _ in range(count)]
            for start, end in events:
                if restore:             # outside the timed interval: before the start event
                    self.restore(restore)
                start.record(self._stream)
                self._call(kernel, grid, block)
                end.record(self._stream)
            if events:
                events[-1][1].synchronize()
            self._stream.synchronize()
            return [float(start.time_till(end)) * 1e3 for start, end in events]
        except drv.Error as e:
            raise self._fail(e, "launch") from e
