"""The OpenCL backend: device discovery, cached builds, argument binding, timed launches.

Everything device-specific (compute units, warp/wavefront width, work-group limits, alignment)
is queried from the device; nothing is assumed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from instrument.cltypes import CLType, parse_type, scalar_value
from kernelcast.config import cache_dir
from kernelcast.errors import InputError
from kernelcast.schema import ArgBinding, Kernel

log = logging.getLogger(__name__)

#: the canary written into the guard regions around every buffer
CANARY = np.frombuffer(bytes.fromhex("deadbeefcafef00d"), dtype=np.uint8)
DEFAULT_BUILD_OPTIONS = "-cl-std=CL1.2"
_PROBE_SOURCE = "__kernel void kc_probe(__global float* a) { a[get_global_id(0)] = 1.0f; }"

# OpenCL extension queries (cl_nv_device_attribute_query, cl_amd_device_attribute_query)
_CL_DEVICE_WARP_SIZE_NV = 0x4003
_CL_DEVICE_PCI_BUS_ID_NV = 0x4008
_CL_DEVICE_PCI_SLOT_ID_NV = 0x4009
_CL_DEVICE_WAVEFRONT_WIDTH_AMD = 0x4043


class DeviceNotFound(InputError, LookupError):
    """No OpenCL device matches the given spec."""


@dataclass
class DeviceInfo:
    """What the harness and the models need to know about one OpenCL device."""

    platform_index: int
    device_index: int
    platform_name: str
    platform_version: str
    name: str
    vendor: str
    type: str                       # "GPU", "CPU", "ACCELERATOR", ...
    driver_version: str
    device_version: str
    compute_units: int
    max_work_group_size: int
    max_work_item_sizes: list[int]
    preferred_wg_multiple: int | None   # warp / wavefront width; from a probe build
    global_mem_bytes: int
    max_alloc_bytes: int
    local_mem_bytes: int
    max_constant_bytes: int
    max_clock_mhz: int
    mem_base_align_bytes: int
    pci_bus_id: str | None = None
    builds: bool | None = None          # did a trivial kernel build on it
    build_error: str = ""
    meter: str = "none"                 # energy meter --meter auto would pick

    @property
    def spec(self) -> str:
        return f"{self.platform_index}:{self.device_index}"

    @property
    def identity(self) -> str:
        """A string identifying device + driver, for cache keys and dataset manifests."""
        return f"{self.platform_version}|{self.name}|{self.driver_version}|{self.device_version}"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["spec"] = self.spec
        return d


def _type_name(t: int) -> str:
    import pyopencl as cl

    names = []
    for attr in ("GPU", "CPU", "ACCELERATOR", "CUSTOM"):
        if t & getattr(cl.device_type, attr, 0):
            names.append(attr)
    return "+".join(names) or "OTHER"


def _probe_cache_path() -> Path:
    return cache_dir() / "device_probes.json"


def _load_probes() -> dict[str, Any]:
    try:
        return json.loads(_probe_cache_path().read_text())
    except (OSError, ValueError):
        return {}


def _save_probes(probes: dict[str, Any]) -> None:
    path = _probe_cache_path()
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(probes, indent=1, sort_keys=True))
    os.replace(tmp, path)


def _probe(dev: Any) -> tuple[bool, int | None, str]:
    """Build a trivial kernel on ``dev``: does it build, and its preferred work-group multiple."""
    import pyopencl as cl

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


def _first_error(text: str) -> str:
    msg = text.strip().splitlines()
    return next((m for m in msg if "error" in m.lower()), msg[-1] if msg else "")[:300]


@dataclass
class TrialBuild:
    """The outcome of :func:`trial_build`: whether the source built (and has the kernel asked
    for), and the compiler's log (warnings when it built, the errors when it did not)."""

    ok: bool
    log: str
    program: Any = None


def _trial_build(ctx: Any, dev: Any, source: str, options: str, kernel_name: str | None) -> TrialBuild:
    import warnings

    import pyopencl as cl

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


_TRIAL_CONTEXTS: dict[str, tuple[Any, Any]] = {}


def trial_build(device: DeviceInfo, source: str, options: str = DEFAULT_BUILD_OPTIONS,
                kernel_name: str | None = None) -> TrialBuild:
    """Build ``source`` with ``options`` on ``device`` once, without running anything: the one
    compile check of the project (device probes, corpus ingestion, synthetic kernels). With
    ``kernel_name`` the program must also define that kernel. One context per device is kept
    for the life of the process."""
    import pyopencl as cl

    if device.identity not in _TRIAL_CONTEXTS:
        dev = cl_device(device)
        _TRIAL_CONTEXTS[device.identity] = (cl.Context([dev]), dev)
    ctx, dev = _TRIAL_CONTEXTS[device.identity]
    return _trial_build(ctx, dev, source, options, kernel_name)


def _ext_query(dev: Any, param: int) -> Any:
    try:
        return dev.get_info(param)
    except Exception:  # noqa: BLE001 - extension absent
        return None


def list_devices(probe: bool = True) -> list[DeviceInfo]:
    """Every OpenCL device on every platform. ``probe`` builds a trivial kernel once per
    device and driver (cached on disk) to learn whether it builds and its preferred multiple."""
    import pyopencl as cl

    from instrument.meters import auto_meter_name

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
                if key not in probes:
                    ok, mult, err = _probe(dev)
                    probes[key] = {"builds": ok, "multiple": mult, "error": err}
                    changed = True
                p = probes[key]
                info.builds, info.build_error = p["builds"], p["error"]
                info.preferred_wg_multiple = p["multiple"]
            if warp:
                info.preferred_wg_multiple = int(warp)
            info.meter = auto_meter_name(info.vendor, info.type)
            out.append(info)
    if changed:
        _save_probes(probes)
    return out


def select_device(spec: str = "auto", devices: list[DeviceInfo] | None = None) -> DeviceInfo:
    """Pick a device by spec.

    ``auto``: the first GPU that builds, else the first device that builds. ``P:D``: platform P,
    device D. Anything else: the first device whose name or platform name contains it
    (case-insensitive)."""
    devs = devices if devices is not None else list_devices()
    if not devs:
        raise DeviceNotFound("no OpenCL device found (is an OpenCL driver such as PoCL installed?)")
    if spec in ("", "auto"):
        for want_gpu in (True, False):
            for d in devs:
                if ("GPU" in d.type) == want_gpu and d.builds is not False:
                    return d
        errs = "; ".join(f"{d.spec} {d.name}: {d.build_error}" for d in devs)
        raise DeviceNotFound(f"no OpenCL device can build a kernel ({errs})")
    if ":" in spec and all(p.isdigit() for p in spec.split(":", 1)):
        pi, di = (int(p) for p in spec.split(":", 1))
        for d in devs:
            if d.platform_index == pi and d.device_index == di:
                return d
        raise DeviceNotFound(f"no OpenCL device {spec} (have {', '.join(d.spec for d in devs)})")
    s = spec.lower()
    for d in devs:
        if s in d.name.lower() or s in d.platform_name.lower() or s in d.platform_version.lower():
            return d
    raise DeviceNotFound(f"no OpenCL device matches {spec!r} (have {', '.join(d.name for d in devs)})")


def cl_device(info: DeviceInfo) -> Any:
    import pyopencl as cl

    return cl.get_platforms()[info.platform_index].get_devices()[info.device_index]


# ---------------------------------------------------------------------------------------------
# builds


def build_key(kernel: Kernel, device: DeviceInfo) -> str:
    h = hashlib.sha256()
    for part in (hashlib.sha256(kernel.source.encode()).hexdigest(), kernel.name,
                 _options(kernel), device.identity):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:32]


def _options(kernel: Kernel) -> str:
    opts = kernel.build_options.strip()
    if "-cl-std" not in opts:
        opts = f"{DEFAULT_BUILD_OPTIONS} {opts}".strip()
    return opts


@dataclass
class BuildResult:
    ok: bool
    program: Any = None
    log: str = ""
    seconds: float = 0.0
    cached: str = ""        # "", "memory", "disk"


class BuildCache:
    """Programs keyed by (source hash, kernel name, build options, device identity).

    In memory for the life of the worker; on disk as program binaries (and failure logs), so a
    rerun of a dataset does not recompile."""

    def __init__(self, ctx: Any, device: Any, info: DeviceInfo, directory: Path | None = None):
        self.ctx, self.device, self.info = ctx, device, info
        self.dir = directory or (cache_dir() / "builds")
        self.dir.mkdir(parents=True, exist_ok=True)
        self._mem: dict[str, BuildResult] = {}

    def build(self, kernel: Kernel) -> BuildResult:
        import pyopencl as cl

        key = build_key(kernel, self.info)
        if key in self._mem:
            r = self._mem[key]
            return BuildResult(r.ok, r.program, r.log, 0.0, "memory")
        t0 = time.perf_counter()
        err_path, bin_path = self.dir / f"{key}.err", self.dir / f"{key}.bin"
        if err_path.is_file():
            r = BuildResult(False, None, err_path.read_text(errors="replace"), 0.0, "disk")
            self._mem[key] = r
            return r
        if bin_path.is_file():
            try:
                prg = cl.Program(self.ctx, [self.device], [bin_path.read_bytes()])
                prg.build(options=_options(kernel))
                r = BuildResult(True, prg, "", time.perf_counter() - t0, "disk")
                self._mem[key] = r
                return r
            except Exception as e:  # noqa: BLE001 - stale or foreign binary: rebuild from source
                log.debug("cached binary %s unusable (%s); rebuilding", bin_path.name, e)
        prg = cl.Program(self.ctx, kernel.source)
        try:
            prg.build(options=_options(kernel))
        except cl.RuntimeError as e:
            try:
                blog = prg.get_build_info(self.device, cl.program_build_info.LOG)
            except Exception:  # noqa: BLE001
                blog = ""
            text = (blog or str(e)).strip()
            r = BuildResult(False, None, text, time.perf_counter() - t0, "")
            _atomic_write_bytes(err_path, text.encode())
            self._mem[key] = r
            return r
        r = BuildResult(True, prg, "", time.perf_counter() - t0, "")
        try:
            binaries = prg.get_info(cl.program_info.BINARIES)
            if binaries and binaries[0]:
                _atomic_write_bytes(bin_path, bytes(binaries[0]))
        except Exception as e:  # noqa: BLE001 - some drivers give no binary
            log.debug("no program binary to cache: %s", e)
        self._mem[key] = r
        return r


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------
# argument binding


class ConfigError(InputError, ValueError):
    """A launch configuration that cannot run on this device (status ``invalid_config``)."""


@dataclass
class BoundBuffer:
    name: str
    cltype: CLType
    count: int
    nbytes: int
    front: int                 # guard bytes before the data
    back: int                  # guard bytes after the data
    parent: Any                # the whole allocation (guards + data)
    arg: Any                   # what is passed to the kernel (sub-buffer or parent)
    host_digest: bytes         # sha256 of the initial contents (only when digests were asked for)
    is_output_candidate: bool


@dataclass
class BoundArgs:
    values: list[Any]
    buffers: list[BoundBuffer] = field(default_factory=list)
    local_bytes: int = 0


def _round_up(x: int, m: int) -> int:
    return (x + m - 1) // m * m


def _init_contents(t: CLType, count: int, init: str, rng: np.random.Generator,
                   array: np.ndarray | None = None) -> np.ndarray:
    n = count * t.storage_width
    dt = t.numpy
    if init == "array":
        if array is None:
            raise ConfigError("init=array without an array")
        a = np.asarray(array, dtype=dt).reshape(-1)
        if a.size != n:
            raise ConfigError(f"array has {a.size} values, the buffer needs {n}")
        return a
    if init == "zeros":
        return np.zeros(n, dtype=dt)
    if init == "ones":
        return np.ones(n, dtype=dt)
    if init == "random":
        if dt.kind == "f":
            if dt.itemsize in (4, 8):
                return rng.random(n, dtype=dt.type)
            return rng.random(n, dtype=np.float32).astype(dt)
        hi = 256 if dt.itemsize == 1 and dt.kind == "u" else 128 if dt.itemsize == 1 else 1024
        return rng.integers(0, hi, size=n, dtype=dt)
    raise ConfigError(f"unknown buffer init {init!r} (random, zeros, ones, array)")


def bind_args(ctx: Any, queue: Any, info: DeviceInfo, params: list[Any], bindings: list[ArgBinding],
              seed: int, guard_bytes: int = 4096,
              arrays: dict[str, np.ndarray] | None = None, digests: bool = False) -> BoundArgs:
    """Create device buffers (with canary guards), local-memory sizes and scalar values.

    ``params`` are the kernel's :class:`kernelcast.clang.KernelParam` (or anything with
    ``name``, ``kind``, ``dtype``, ``is_const``); ``bindings`` must cover every parameter."""
    import pyopencl as cl

    by_name = {b.name: b for b in bindings}
    rng = np.random.default_rng(seed)
    align = max(info.mem_base_align_bytes, 8)
    guard = _round_up(max(guard_bytes, align), align)
    bound = BoundArgs(values=[])
    total_alloc = 0
    for p in params:
        b = by_name.get(p.name)
        if b is None:
            raise ConfigError(f"no value bound for argument {p.name!r}")
        if b.kind != p.kind:
            raise ConfigError(f"argument {p.name!r} is a {p.kind}, bound as a {b.kind}")
        if b.kind == "scalar":
            t = parse_type(p.dtype)
            try:
                bound.values.append(scalar_value(t, b.value))
            except ValueError as e:
                raise ConfigError(f"argument {p.name!r}: {e}") from None
            continue
        t = parse_type(b.dtype)
        if b.count is None or b.count < 0:
            raise ConfigError(f"argument {p.name!r}: element count missing or negative")
        nbytes = int(b.count) * t.itemsize
        if b.kind == "local":
            bound.local_bytes += nbytes
            if bound.local_bytes > info.local_mem_bytes:
                raise ConfigError(f"__local arguments need {bound.local_bytes} B, device has "
                                  f"{info.local_mem_bytes} B")
            bound.values.append(cl.LocalMemory(max(nbytes, 1)))
            continue
        if nbytes > info.max_alloc_bytes:
            raise ConfigError(f"argument {p.name!r}: {nbytes} B exceeds the device's max allocation "
                              f"{info.max_alloc_bytes} B")
        if getattr(p, "qualifier", "") == "constant" and nbytes > info.max_constant_bytes:
            raise ConfigError(f"argument {p.name!r}: {nbytes} B exceeds the device's __constant "
                              f"limit {info.max_constant_bytes} B")
        data = _init_contents(t, int(b.count), b.init, rng, (arrays or {}).get(p.name))
        raw = data.view(np.uint8)
        data_span = _round_up(max(nbytes, 1), 8)
        total = guard + data_span + guard
        total_alloc += total
        if total_alloc > info.global_mem_bytes:
            raise ConfigError(f"buffers need {total_alloc} B, device has {info.global_mem_bytes} B")
        host_all = np.empty(total, dtype=np.uint8)
        host_all[:guard] = canary_at(0, guard)
        host_all[guard:guard + nbytes] = raw
        host_all[guard + nbytes:] = canary_at(guard + nbytes, total - guard - nbytes)
        parent = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=host_all)
        front = guard
        try:
            arg = parent.get_sub_region(guard, max(nbytes, 1))
        except cl.Error:
            # no sub-buffers: pass the start of the allocation; only the back guard protects it
            log.debug("sub-buffer refused; only the back guard is checked for %s", p.name)
            host_all[:nbytes] = raw
            host_all[nbytes:] = canary_at(nbytes, total - nbytes)
            cl.enqueue_copy(queue, parent, host_all)
            front, arg = 0, parent
        bound.buffers.append(BoundBuffer(
            name=p.name, cltype=t, count=int(b.count), nbytes=nbytes, front=front,
            back=total - front - nbytes, parent=parent, arg=arg,
            host_digest=hashlib.sha256(raw.tobytes()).digest() if digests else b"",
            is_output_candidate=not p.is_const,
        ))
        bound.values.append(arg)
    return bound


def read_back(queue: Any, buf: BoundBuffer) -> np.ndarray:
    """The whole allocation of a buffer (guards and data) as bytes."""
    import pyopencl as cl

    size = buf.front + buf.nbytes + buf.back
    out = np.empty(size, dtype=np.uint8)
    cl.enqueue_copy(queue, out, buf.parent)
    return out


def _read_range(queue: Any, buf: BoundBuffer, offset: int, size: int) -> np.ndarray:
    import pyopencl as cl

    out = np.empty(size, dtype=np.uint8)
    if size:
        cl.enqueue_copy(queue, out, buf.parent, src_offset=offset)
    return out


def canary_at(offset: int, size: int) -> np.ndarray:
    """The canary bytes that belong at ``[offset, offset + size)`` of an allocation."""
    reps = (offset % len(CANARY) + size) // len(CANARY) + 2
    tiled = np.tile(CANARY, reps)
    start = offset % len(CANARY)
    return tiled[start:start + size]


def check_guards(queue: Any, bound: BoundArgs, digests: bool = False) -> tuple[str, dict[str, bytes]]:
    """Check every canary; returns (reason or "", sha256 of each buffer's data if ``digests``)."""
    problems = []
    out: dict[str, bytes] = {}
    for b in bound.buffers:
        front = _read_range(queue, b, 0, b.front)
        back_off = b.front + b.nbytes
        back = _read_range(queue, b, back_off, b.back)
        exp_front, exp_back = canary_at(0, b.front), canary_at(back_off, b.back)
        bad = []
        if not np.array_equal(front, exp_front):
            i = int(np.nonzero(front != exp_front)[0][0])
            bad.append(f"{b.front - i} B before the start")
        if not np.array_equal(back, exp_back):
            i = int(np.nonzero(back != exp_back)[0][-1])
            bad.append(f"{i + 1} B past the end")
        if bad:
            problems.append(f"{b.name}: write {' and '.join(bad)} ({b.count} x {b.cltype.name})")
        if digests:
            data = _read_range(queue, b, b.front, b.nbytes)
            out[b.name] = hashlib.sha256(data.tobytes()).digest()
    return "; ".join(problems), out
