"""The OpenCL backend (pyopencl): device discovery, trial builds, and :class:`OpenCLBackend`.

Everything device-specific (compute units, warp/wavefront width, work-group limits, alignment)
is queried from the device; nothing is assumed. pyopencl is imported only when a device is
listed, probed or opened. This module is the only one of the project that touches pyopencl
objects (its tests apart).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
import subprocess
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, cast

import numpy as np
from kernelcast.instrument.backends.base import (
    Backend,
    BackendError,
    BoundArgs,
    BoundBuffer,
    Compiled,
    DeviceInfo,
    Driver,
    Restore,
    TrialBuild,
    guarded_image,
)
from kernelcast.instrument.meters import auto_meter_name

from kernelcast.config import cache_dir
from kernelcast.schema import Kernel

if TYPE_CHECKING:
    import pyopencl as cl

log = logging.getLogger(__name__)

DEFAULT_BUILD_OPTIONS = "-cl-std=CL1.2"
_PROBE_SOURCE = "__kernel void kc_probe(__global float* a) { a[get_global_id(0)] = 1.0f; }"
#: the second probe: the math builtins on the widest vector types, which some drivers' compilers
#: cannot lower (PoCL 3.0's LLVM 14 on an AVX-512 host aborts on ``fma``/``sqrt`` of ``float16``)
_VECTOR_PROBE_SOURCE = """
__kernel void kc_vprobe(__global float16* a, __global double8* b)
{ size_t i = get_global_id(0);
  a[i] = fma(a[i], a[i], sqrt(a[i])) + sin(a[i]) + exp(a[i]);
  b[i] = fma(b[i], b[i], b[i]); }
"""
_VECTOR_PROBE_KERNEL = "kc_vprobe"
_VECTOR_PROBE_TIMEOUT_S = 180.0

# OpenCL extension queries (cl_nv_device_attribute_query, cl_amd_device_attribute_query)
_CL_DEVICE_WARP_SIZE_NV = 0x4003
_CL_DEVICE_PCI_BUS_ID_NV = 0x4008
_CL_DEVICE_PCI_SLOT_ID_NV = 0x4009
_CL_DEVICE_WAVEFRONT_WIDTH_AMD = 0x4043


def cl_device(info: DeviceInfo) -> cl.Device:
    """The pyopencl device of ``info``."""
    import pyopencl as cl  # deferred: pyopencl loads the OpenCL driver

    return cl.get_platforms()[info.platform_index].get_devices()[info.device_index]


def _type_name(t: int) -> str:
    import pyopencl as cl  # deferred: pyopencl loads the OpenCL driver

    names = []
    for attr in ("GPU", "CPU", "ACCELERATOR", "CUSTOM"):
        if t & getattr(cl.device_type, attr, 0):
            names.append(attr)
    return "+".join(names) or "OTHER"


def _ext_query(dev: cl.Device, param: int) -> Any:
    """A vendor extension's device query (its number is not among pyopencl's ``device_info``)."""
    try:
        return dev.get_info(cast("cl.device_info", param))
    except Exception:  # noqa: BLE001 - extension absent
        return None


def _first_error(text: str) -> str:
    msg = text.strip().splitlines()
    return next((m for m in msg if "error" in m.lower()), msg[-1] if msg else "")[:300]


def _options(kernel: Kernel) -> str:
    opts = kernel.build_options.strip()
    if "-cl-std" not in opts:
        opts = f"{DEFAULT_BUILD_OPTIONS} {opts}".strip()
    return opts


# ---------------------------------------------------------------------------------------------
# trial builds and device probes


def _trial_build(ctx: cl.Context, dev: cl.Device, source: str, options: str, kernel_name: str | None) -> TrialBuild:
    import pyopencl as cl  # deferred: pyopencl loads the OpenCL driver

    prg = cl.Program(ctx, source)

    def build_log() -> str:
        try:
            return (prg.get_build_info(dev, cl.program_build_info.LOG) or "").strip()
        except Exception:  # noqa: BLE001 - no log from this driver
            return ""

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            prg.build(options=options, devices=[dev])
    except cl.Error as exc:
        return TrialBuild(False, build_log() or str(exc).strip() or "build failed")
    if kernel_name is not None:
        try:
            cl.Kernel(prg, kernel_name)
        except cl.Error as exc:
            return TrialBuild(False, f"no kernel {kernel_name!r} after the build: {str(exc).strip()}")
    return TrialBuild(True, build_log(), prg)


_TRIAL_CONTEXTS: dict[str, tuple[cl.Context, cl.Device]] = {}


def trial_build(device: DeviceInfo, source: str, options: str = DEFAULT_BUILD_OPTIONS,
                kernel_name: str | None = None) -> TrialBuild:
    """Build ``source`` with ``options`` on ``device`` once, without running anything: the one
    compile check of the project (device probes, corpus ingestion, synthetic kernels). With
    ``kernel_name`` the program must also define that kernel. One context per device is kept
    for the life of the process."""
    import pyopencl as cl  # deferred: pyopencl loads the OpenCL driver

    if device.identity not in _TRIAL_CONTEXTS:
        dev = cl_device(device)
        _TRIAL_CONTEXTS[device.identity] = (cl.Context([dev]), dev)
    ctx, dev = _TRIAL_CONTEXTS[device.identity]
    return _trial_build(ctx, dev, source, options, kernel_name)


def _probe_cache_path() -> Path:
    return cache_dir() / "device_probes.json"


def _load_probes() -> dict[str, Any]:
    try:
        probes: dict[str, Any] = json.loads(_probe_cache_path().read_text())
        return probes
    except (OSError, ValueError):
        return {}


def _save_probes(probes: dict[str, Any]) -> None:
    path = _probe_cache_path()
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(probes, indent=1, sort_keys=True))
    os.replace(tmp, path)


def _vector_probe(platform_index: int, device_index: int) -> tuple[bool, str]:
    """Build and launch :data:`_VECTOR_PROBE_SOURCE` (8 work-items) on the device in a child
    process (a compiler that aborts kills the child, not this process; a CPU runtime such as PoCL
    generates the machine code at the first launch): does it run, and if not, why (one line)."""
    code = ("import sys, pyopencl as cl\n"
            "from kernelcast.instrument.backends.opencl import (_VECTOR_PROBE_KERNEL, _VECTOR_PROBE_SOURCE,\n"
            "    _trial_build)\n"
            "d = cl.get_platforms()[int(sys.argv[1])].get_devices()[int(sys.argv[2])]\n"
            "ctx = cl.Context([d])\n"
            "tb = _trial_build(ctx, d, _VECTOR_PROBE_SOURCE, '-cl-std=CL1.2', _VECTOR_PROBE_KERNEL)\n"
            "if not tb.ok:\n"
            "    print('kc-probe: ' + ' '.join(tb.log.split())[:200], file=sys.stderr, flush=True)\n"
            "    sys.exit(1)\n"
            "q = cl.CommandQueue(ctx)\n"
            "a = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 64 * 8)\n"
            "b = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 64 * 8)\n"
            "cl.Kernel(tb.program, _VECTOR_PROBE_KERNEL)(q, (8,), (8,), a, b)\n"
            "q.finish()\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(Path(__file__).resolve().parents[2]),
                                                                   os.environ.get("PYTHONPATH", "")) if p))
    try:
        r = subprocess.run([sys.executable, "-c", code, str(platform_index), str(device_index)], env=env,
                           capture_output=True, text=True, timeout=_VECTOR_PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return False, f"the vector-builtin probe build ran past {_VECTOR_PROBE_TIMEOUT_S:g} s"
    except OSError as e:
        return False, f"the vector-builtin probe could not start: {e}"
    if r.returncode == 0:
        return True, ""
    lines = [ln.strip() for ln in (r.stdout + "\n" + r.stderr).splitlines() if ln.strip()]
    own = [ln[len("kc-probe: "):] for ln in lines if ln.startswith("kc-probe: ")]
    if own:           # the build failed (the driver may still abort at exit: that says nothing more)
        return False, f"float16/double8 math builtins do not build: {own[0][:160]}"
    llvm = [ln for ln in lines if "LLVM ERROR" in ln] or [ln for ln in lines if "error" in ln.lower()]
    why = (llvm or lines[-1:] or [""])[0][:160]
    if r.returncode < 0:
        try:
            sig = signal.Signals(-r.returncode).name
        except ValueError:
            sig = f"signal {-r.returncode}"
        return False, f"the compiler crashed ({sig}) building float16/double8 math builtins{f': {why}' if why else ''}"
    return False, f"float16/double8 math builtins do not build{f': {why}' if why else ''}"


def _probe(dev: cl.Device) -> tuple[bool, int | None, str]:
    """Build a trivial kernel on ``dev``: does it build, and its preferred work-group multiple."""
    import pyopencl as cl  # deferred: pyopencl loads the OpenCL driver

    try:
        ctx = cl.Context([dev])
    except Exception as e:  # noqa: BLE001 - any driver failure means "does not build"
        return False, None, _first_error(str(e))
    tb = _trial_build(ctx, dev, _PROBE_SOURCE, DEFAULT_BUILD_OPTIONS, "kc_probe")
    if not tb.ok:
        return False, None, _first_error(tb.log)
    try:
        k = cl.Kernel(tb.program, "kc_probe")
        mult = k.get_work_group_info(cl.kernel_work_group_info.PREFERRED_WORK_GROUP_SIZE_MULTIPLE, dev)
    except Exception as e:  # noqa: BLE001
        return False, None, _first_error(str(e))
    return True, int(mult), ""


# ---------------------------------------------------------------------------------------------
# the backend


class OpenCLBackend(Backend):
    """OpenCL through pyopencl: one context and one in-order queue (with profiling, for the
    device-side launch times) on one device."""

    name: ClassVar[str] = "opencl"
    label: ClassVar[str] = "OpenCL"
    install_hint: ClassVar[str] = "is an OpenCL driver such as PoCL installed?"

    # -- devices and facts ----------------------------------------------------------------

    @classmethod
    def list_devices(cls, probe: bool = True) -> list[DeviceInfo]:
        """Every OpenCL device on every platform. ``probe`` builds a trivial kernel once per
        device and driver (cached on disk) to learn whether it builds and its preferred multiple."""
        import pyopencl as cl  # deferred: pyopencl loads the OpenCL driver

        try:
            platforms = cl.get_platforms()
        except cl.Error:  # no ICD / no platform
            return []
        probes = _load_probes() if probe else {}
        changed = False
        out: list[DeviceInfo] = []
        for pi, plat in enumerate(platforms):
            try:
                devices = plat.get_devices()
            except cl.Error:
                continue
            for di, dev in enumerate(devices):
                bus = None
                if "nvidia" in dev.vendor.lower():
                    b, s = _ext_query(dev, _CL_DEVICE_PCI_BUS_ID_NV), _ext_query(dev, _CL_DEVICE_PCI_SLOT_ID_NV)
                    if b is not None:
                        bus = f"00000000:{int(b):02X}:{int(s or 0) >> 3:02X}.0"
                info = DeviceInfo(
                    platform_index=pi, device_index=di,
                    platform_name=plat.name.strip(), platform_version=plat.version.strip(),
                    name=dev.name.strip(), vendor=dev.vendor.strip(), type=_type_name(dev.type),
                    driver_version=dev.driver_version.strip(), device_version=dev.version.strip(),
                    compute_units=int(dev.max_compute_units),
                    max_work_group_size=int(dev.max_work_group_size),
                    max_work_item_sizes=[int(x) for x in dev.max_work_item_sizes],
                    preferred_wg_multiple=None,
                    global_mem_bytes=int(dev.global_mem_size), max_alloc_bytes=int(dev.max_mem_alloc_size),
                    local_mem_bytes=int(dev.local_mem_size),
                    max_constant_bytes=int(dev.max_constant_buffer_size),
                    max_clock_mhz=int(dev.max_clock_frequency),
                    mem_base_align_bytes=max(1, int(dev.mem_base_addr_align) // 8),
                    pci_bus_id=bus,
                )
                warp = _ext_query(dev, _CL_DEVICE_WARP_SIZE_NV) or _ext_query(dev, _CL_DEVICE_WAVEFRONT_WIDTH_AMD)
                if probe:
                    key = info.identity
                    if "vector_builtins" not in probes.get(key, {}):   # new, or cached before that probe
                        ok, mult, err = _probe(dev)
                        vok, verr = _vector_probe(pi, di) if ok else (None, "")
                        probes[key] = {"builds": ok, "multiple": mult, "error": err,
                                       "vector_builtins": vok, "vector_error": verr}
                        changed = True
                    p = probes[key]
                    info.builds, info.build_error = p["builds"], p["error"]
                    info.vector_builtins, info.vector_error = p["vector_builtins"], p["vector_error"]
                    info.preferred_wg_multiple = p["multiple"]
                if warp:
                    info.preferred_wg_multiple = int(warp)
                info.meter = auto_meter_name(info.vendor, info.type)
                out.append(info)
        if changed:
            _save_probes(probes)
        return out

    @classmethod
    def version_facts(cls) -> dict[str, str]:
        import pyopencl as cl  # deferred: pyopencl loads the OpenCL driver

        return {"pyopencl_version": str(cl.VERSION_TEXT)}

    @classmethod
    def has_int64_atomics(cls, device: DeviceInfo) -> bool:
        try:
            ext = str(cl_device(device).extensions).split()
        except Exception:  # noqa: BLE001 - cannot ask: assume the safe 32-bit form
            return False
        return "cl_khr_int64_base_atomics" in ext and "cl_khr_int64_extended_atomics" in ext

    # -- an open device -------------------------------------------------------------------

    def __init__(self, device: DeviceInfo, *, build_dir: Path | None = None, profiling: bool = True) -> None:
        """A context and an in-order queue on ``device`` (with event profiling unless
        ``profiling=False``)."""
        import pyopencl as cl  # deferred: pyopencl loads the OpenCL driver

        super().__init__(device, build_dir=build_dir, profiling=profiling)
        self._dev: cl.Device = cl_device(device)
        self._ctx = cl.Context([self._dev])
        if profiling:
            self._queue = cl.CommandQueue(self._ctx, self._dev,
                                          properties=cl.command_queue_properties.PROFILING_ENABLE)
        else:
            self._queue = cl.CommandQueue(self._ctx, self._dev)
        self._closed = False

    def close(self) -> None:
        import pyopencl as cl  # deferred: pyopencl loads the OpenCL driver

        if self._closed:
            return
        self._closed = True
        self._builds.clear()
        try:
            self._queue.finish()
        except cl.Error as e:
            log.debug("queue did not finish on close: %s", e)

    # builds

    def build_key(self, kernel: Kernel) -> str:
        h = hashlib.sha256()
        for part in (hashlib.sha256(kernel.source.encode()).hexdigest(), kernel.name,
                     _options(kernel), self.device.identity):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()[:32]

    def _compile(self, kernel: Kernel) -> Compiled:
        import pyopencl as cl  # deferred: pyopencl loads the OpenCL driver

        prg = cl.Program(self._ctx, kernel.source)
        try:
            prg.build(options=_options(kernel))
        except cl.RuntimeError as e:
            try:
                blog = prg.get_build_info(self._dev, cl.program_build_info.LOG)
            except Exception:  # noqa: BLE001
                blog = ""
            return Compiled(False, None, str(blog or e).strip())
        return Compiled(True, prg, "")

    def _load_binary(self, kernel: Kernel, binary: bytes) -> cl.Program:
        import pyopencl as cl  # deferred: pyopencl loads the OpenCL driver

        prg = cl.Program(self._ctx, [self._dev], [binary])
        prg.build(options=_options(kernel))
        return prg

    def _program_binary(self, program: cl.Program) -> bytes | None:
        import pyopencl as cl  # deferred: pyopencl loads the OpenCL driver

        binaries = program.get_info(cl.program_info.BINARIES)
        if isinstance(binaries, (list, tuple)) and binaries and binaries[0]:
            return bytes(binaries[0])
        return None

    def has_kernel(self, program: cl.Program, name: str) -> bool:
        return name in str(program.kernel_names).split(";")

    # argument buffers

    def _allocate(self, name: str, image: np.ndarray, raw: np.ndarray, front: int) -> tuple[Driver, Driver, int]:
        import pyopencl as cl  # deferred: pyopencl loads the OpenCL driver

        try:
            parent = cl.Buffer(self._ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=image)
            try:
                return parent, parent.get_sub_region(front, max(raw.size, 1)), front
            except cl.Error:
                # no sub-buffers: pass the start of the allocation; only the back guard protects it
                log.debug("sub-buffer refused; only the back guard is checked for %s", name)
            cl.enqueue_copy(self._queue, parent, guarded_image(raw, 0, image.size))
            return parent, parent, 0
        except cl.Error as e:
            raise BackendError(str(e)) from e

    def _local_arg(self, nbytes: int) -> cl.LocalMemory:
        import pyopencl as cl  # deferred: pyopencl loads the OpenCL driver

        return cl.LocalMemory(nbytes)

    def read_range(self, buf: BoundBuffer, offset: int, size: int) -> np.ndarray:
        import pyopencl as cl  # deferred: pyopencl loads the OpenCL driver

        out = np.empty(size, dtype=np.uint8)
        if size:
            try:
                cl.enqueue_copy(self._queue, out, buf.parent, src_offset=offset)
            except cl.Error as e:
                raise BackendError(str(e)) from e
        return out

    def release(self, bound: BoundArgs) -> None:
        import pyopencl as cl  # deferred: pyopencl loads the OpenCL driver

        for b in bound.buffers:
            for mem in ((b.arg, b.parent) if b.arg is not b.parent else (b.parent,)):
                try:
                    mem.release()
                except cl.Error as e:  # freeing is best effort
                    log.debug("releasing %s: %s", b.name, e)
        bound.buffers.clear()
        bound.values.clear()

    # launches

    def prepare(self, program: cl.Program, name: str, bound: BoundArgs) -> cl.Kernel:
        import pyopencl as cl  # deferred: pyopencl loads the OpenCL driver

        knl = cl.Kernel(program, name)
        try:
            knl.set_args(*bound.values)
        except cl.Error as e:
            raise BackendError(str(e)) from e
        return knl

    def enqueue(self, kernel: cl.Kernel, gsize: tuple[int, ...], lsize: tuple[int, ...] | None,
                count: int = 1, restore: Sequence[Restore] = ()) -> None:
        import pyopencl as cl  # deferred: pyopencl loads the OpenCL driver

        try:
            for _ in range(count):
                if restore:
                    self.restore(restore)
                cl.enqueue_nd_range_kernel(self._queue, kernel, gsize, lsize)
        except cl.Error as e:
            raise BackendError(str(e)) from e

    def synchronize(self) -> None:
        import pyopencl as cl  # deferred: pyopencl loads the OpenCL driver

        try:
            self._queue.finish()
        except cl.Error as e:
            raise BackendError(str(e)) from e

    def launch(self, kernel: cl.Kernel, gsize: tuple[int, ...], lsize: tuple[int, ...] | None) -> float:
        import pyopencl as cl  # deferred: pyopencl loads the OpenCL driver

        try:
            ev = cl.enqueue_nd_range_kernel(self._queue, kernel, gsize, lsize)
            ev.wait()
            return _event_us(ev)
        except cl.Error as e:
            raise BackendError(str(e)) from e

    def launch_batch(self, kernel: cl.Kernel, gsize: tuple[int, ...], lsize: tuple[int, ...] | None,
                     count: int, restore: Sequence[Restore] = ()) -> list[float]:
        import pyopencl as cl  # deferred: pyopencl loads the OpenCL driver

        try:
            events = []
            for _ in range(count):
                if restore:
                    self.restore(restore)
                events.append(cl.enqueue_nd_range_kernel(self._queue, kernel, gsize, lsize))
            if events:
                events[-1].wait()
            self._queue.finish()
            return [_event_us(e) for e in events]
        except cl.Error as e:
            raise BackendError(str(e)) from e


    # state-consuming kernels

    def upload(self, data: np.ndarray) -> cl.Buffer:
        import pyopencl as cl  # deferred: pyopencl loads the OpenCL driver

        raw = np.ascontiguousarray(data).view(np.uint8)
        try:
            if raw.size == 0:
                return cl.Buffer(self._ctx, cl.mem_flags.READ_ONLY, 8)
            return cl.Buffer(self._ctx, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR, hostbuf=raw)
        except cl.Error as e:
            raise BackendError(str(e)) from e

    def restore(self, items: Sequence[Restore]) -> None:
        import pyopencl as cl  # deferred: pyopencl loads the OpenCL driver

        try:
            for r in items:
                if r.buffer.nbytes:
                    cl.enqueue_copy(self._queue, r.buffer.parent, r.pristine, byte_count=r.buffer.nbytes,
                                    dst_offset=r.buffer.front)
        except cl.Error as e:
            raise BackendError(str(e)) from e

    def free(self, mem: cl.Buffer) -> None:
        import pyopencl as cl  # deferred: pyopencl loads the OpenCL driver

        try:
            mem.release()
        except cl.Error as e:  # best effort
            log.debug("releasing a pristine copy: %s", e)


def _event_us(ev: cl.Event) -> float:
    """Device time of a finished launch (profiling event start to end), in microseconds."""
    return (ev.profile.end - ev.profile.start) / 1e3
