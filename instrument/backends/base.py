"""The backend seam: what the harness needs of a compute API (OpenCL, CUDA).

A :class:`Backend` subclass answers questions about devices without opening one (class methods:
discovery, version facts, features) and, as an instance, is one open device in the worker
process: cached builds, argument buffers with canary guards, timed launches, release.

What does not depend on the API lives here once: the build cache policy (memory, then disk, then
compile), the guard layout and its check, the initial buffer contents; the device record
(:class:`DeviceInfo`), device selection by spec and the errors live in :mod:`instrument.device`
and are re-exported here. A backend implements the primitives marked
abstract; driver errors leave it as :class:`BackendError`, bad launch configurations as
:class:`ConfigError`, so the runner can turn both into statuses without knowing the API.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol

import numpy as np

# the device record and the errors live below the backends; importers of this module still find them here
from kernelcast.instrument.device import (  # noqa: F401
    BackendError,
    ConfigError,
    DeviceInfo,
    DeviceNotFound,
    choose_device,
)
from kernelcast.instrument.memcheck import check_buffer_memory

from kernelcast.cltypes import CLType, parse_type, scalar_value
from kernelcast.config import cache_dir
from kernelcast.schema import ArgBinding, Kernel

log = logging.getLogger(__name__)

#: the canary written into the guard regions around every buffer
CANARY = np.frombuffer(bytes.fromhex("deadbeefcafef00d"), dtype=np.uint8)

#: a driver object (program, kernel, buffer, context...): the drivers' Python bindings are untyped
Driver = Any


# ---------------------------------------------------------------------------------------------
# builds


@dataclass
class TrialBuild:
    """The outcome of a trial build: whether the source built (and has the kernel asked for),
    and the compiler's log (warnings when it built, the errors when it did not)."""

    ok: bool
    log: str
    program: Driver = None


Cached = Literal["", "memory", "disk"]


@dataclass
class BuildResult:
    """A build through the cache; a compile error is ``ok=False`` with the compiler's log."""

    ok: bool
    program: Driver = None
    log: str = ""
    seconds: float = 0.0
    cached: Cached = ""     # "": built now; "memory", "disk": from the cache


@dataclass
class Compiled:
    """What a backend's compiler returns: the program, or the log of a failed build."""

    ok: bool
    program: Driver = None
    log: str = ""


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------
# argument buffers


class Param(Protocol):
    """What binding needs of a kernel parameter (:class:`kernelcast.clang.KernelParam` is one);
    a ``qualifier`` attribute (``"constant"``...) is used when present."""

    @property
    def name(self) -> str: ...

    @property
    def kind(self) -> str: ...

    @property
    def dtype(self) -> str: ...

    @property
    def is_const(self) -> bool: ...


@dataclass
class BoundBuffer:
    name: str
    cltype: CLType
    count: int
    nbytes: int
    front: int                 # guard bytes before the data
    back: int                  # guard bytes after the data
    parent: Driver             # the whole allocation (guards + data)
    arg: Driver                # what is passed to the kernel (sub-buffer or parent)
    host_digest: bytes         # sha256 of the initial contents (only when digests were asked for)
    is_output_candidate: bool


@dataclass
class BoundArgs:
    values: list[Any]          # per parameter: a buffer, a local-memory size or a numpy scalar
    buffers: list[BoundBuffer] = field(default_factory=list)
    local_bytes: int = 0


def _round_up(x: int, m: int) -> int:
    return (x + m - 1) // m * m


def canary_at(offset: int, size: int) -> np.ndarray:
    """The canary bytes that belong at ``[offset, offset + size)`` of an allocation."""
    reps = (offset % len(CANARY) + size) // len(CANARY) + 2
    tiled = np.tile(CANARY, reps)
    start = offset % len(CANARY)
    return tiled[start:start + size]


def guarded_image(raw: np.ndarray, front: int, total: int) -> np.ndarray:
    """An allocation of ``total`` bytes: ``raw`` at ``front``, the canary everywhere else."""
    out = np.empty(total, dtype=np.uint8)
    out[:front] = canary_at(0, front)
    out[front:front + raw.size] = raw
    out[front + raw.size:] = canary_at(front + raw.size, total - front - raw.size)
    return out


def init_contents(t: CLType, count: int, init: str, rng: np.random.Generator,
                  array: np.ndarray | None = None) -> np.ndarray:
    """The initial host contents of a buffer of ``count`` elements of ``t``: ``random`` (drawn
    from ``rng``), ``zeros``, ``ones`` or ``array`` (the given values)."""
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
    ranged = parse_ranged_init(init)
    if ranged is not None:
        kind, lo, top = ranged
        vals: np.ndarray
        if dt.kind == "f":
            vals = lo + (top - lo) * rng.random(n)
        elif kind == "sorted" and n and int(top) - int(lo) >= n:
            # room for distinct values: strictly increasing (a CSR row pointer without empty rows)
            vals = int(lo) + rng.choice(int(top) - int(lo), size=n, replace=False)
        else:
            vals = rng.integers(int(lo), max(int(lo) + 1, int(top)), size=n) if n else np.zeros(0, dtype=np.int64)
        if kind == "sorted":
            vals = np.sort(vals)
        return np.asarray(vals).astype(dt)
    raise ConfigError(f"unknown buffer init {init!r} (random, zeros, ones, array, uniform:LO:HI, sorted:LO:HI)")


def parse_ranged_init(init: str) -> tuple[str, float, float] | None:
    """``uniform:LO:HI`` (values drawn uniformly from [LO, HI)) or ``sorted:LO:HI`` (the same
    values in nondecreasing order, e.g. a CSR row pointer; distinct, so strictly increasing, for
    an integer buffer when the range holds at least as many values) as (kind, LO, HI); None for any other
    init. Integer buffers draw integers in [LO, HI); LO >= HI gives LO everywhere."""
    parts = init.split(":")
    if len(parts) != 3 or parts[0] not in ("uniform", "sorted"):
        return None
    try:
        lo, hi = float(parts[1]), float(parts[2])
    except ValueError:
        return None
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return None
    return parts[0], lo, hi


# ---------------------------------------------------------------------------------------------
# the interface


class Backend(ABC):
    """One compute API. Class methods need no open device; an instance is one open device.

    An instance is opened in the worker process (``backend_for(device)(device)``) and used for
    many kernels: :meth:`build` (cached), :meth:`bind` (buffers with guards), :meth:`prepare`
    (kernel + arguments), :meth:`launch` / :meth:`launch_batch` (device-timed) or
    :meth:`enqueue` + :meth:`synchronize` (untimed), :meth:`check_guards`, :meth:`read_back`,
    :meth:`release`, and finally :meth:`close`.
    """

    #: registry name ("opencl")
    name: ClassVar[str]
    #: the API's name in messages ("OpenCL")
    label: ClassVar[str]
    #: appended to "no <label> device found" when the API shows no device at all
    install_hint: ClassVar[str] = ""
    #: kernel languages it builds (``Kernel.language``)
    languages: ClassVar[tuple[str, ...]] = ("opencl",)

    # -- devices and facts (no device open) ---------------------------------------------------

    @classmethod
    @abstractmethod
    def list_devices(cls, probe: bool = True) -> list[DeviceInfo]:
        """Every device of this API. ``probe``: build a trivial kernel once per device and
        driver (cached) to learn whether it builds and its preferred work-group multiple."""

    @classmethod
    def owns(cls, device: DeviceInfo) -> bool:
        """Whether ``device`` is one of this API's devices (it lists them with ``backend = name``)."""
        return device.backend == cls.name

    @classmethod
    @abstractmethod
    def version_facts(cls) -> dict[str, str]:
        """Versions of the API bindings, for dataset manifests (keys name the package)."""

    @classmethod
    @abstractmethod
    def has_int64_atomics(cls, device: DeviceInfo) -> bool:
        """Whether ``device`` has 64-bit min/max/inc atomics on global memory (``False`` when
        it cannot be asked)."""

    # -- an open device -------------------------------------------------------------------

    def __init__(self, device: DeviceInfo, *, build_dir: Path | None = None, profiling: bool = True) -> None:
        """Open ``device``. Builds are cached in memory for the life of the instance and on disk
        in ``build_dir`` (default: the ``builds`` folder of the kernelcast cache).
        ``profiling=False`` opens it as a plain application would, without device timing
        (:meth:`launch` and :meth:`launch_batch` then fail)."""
        self.device = device
        self.profiling = profiling
        self.build_dir = build_dir or (cache_dir() / "builds")
        self.build_dir.mkdir(parents=True, exist_ok=True)
        self._builds: dict[str, BuildResult] = {}
        #: the device context is unusable after a sticky driver error: the harness replaces the worker
        self.lost = False

    @abstractmethod
    def close(self) -> None:
        """Release the context and queue; the instance is unusable afterwards."""

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # builds

    @abstractmethod
    def build_key(self, kernel: Kernel) -> str:
        """The build cache key of ``kernel`` on this device (source, name, options, device)."""

    @abstractmethod
    def _compile(self, kernel: Kernel) -> Compiled:
        """Compile ``kernel.source``; a compile error is ``Compiled(ok=False, log=...)``."""

    @abstractmethod
    def _load_binary(self, kernel: Kernel, binary: bytes) -> Driver:
        """A program from a binary :meth:`_program_binary` gave; raise if it is unusable."""

    @abstractmethod
    def _program_binary(self, program: Driver) -> bytes | None:
        """The binary of a built program, to cache on disk (``None`` or an exception: the
        driver gives none)."""

    @abstractmethod
    def has_kernel(self, program: Driver, name: str) -> bool:
        """Whether a built program defines kernel ``name``."""

    def build(self, kernel: Kernel) -> BuildResult:
        """Build ``kernel``, from memory, then disk (program binaries and failure logs, keyed by
        :meth:`build_key`), then source. Compile errors are a result, not an exception."""
        key = self.build_key(kernel)
        if key in self._builds:
            r = self._builds[key]
            return BuildResult(r.ok, r.program, r.log, 0.0, "memory")
        t0 = time.perf_counter()
        err_path, bin_path = self.build_dir / f"{key}.err", self.build_dir / f"{key}.bin"
        if err_path.is_file():
            r = BuildResult(False, None, err_path.read_text(errors="replace"), 0.0, "disk")
            self._builds[key] = r
            return r
        if bin_path.is_file():
            try:
                prg = self._load_binary(kernel, bin_path.read_bytes())
                r = BuildResult(True, prg, "", time.perf_counter() - t0, "disk")
                self._builds[key] = r
                return r
            except Exception as e:  # noqa: BLE001 - stale or foreign binary: rebuild from source
                log.debug("cached binary %s unusable (%s); rebuilding", bin_path.name, e)
        c = self._compile(kernel)
        r = BuildResult(c.ok, c.program, c.log, time.perf_counter() - t0, "")
        if not c.ok:
            _atomic_write_bytes(err_path, c.log.encode())
        else:
            try:
                binary = self._program_binary(c.program)
                if binary:
                    _atomic_write_bytes(bin_path, binary)
            except Exception as e:  # noqa: BLE001 - some drivers give no binary
                log.debug("no program binary to cache: %s", e)
        self._builds[key] = r
        return r

    # argument buffers

    @abstractmethod
    def _allocate(self, name: str, image: np.ndarray, raw: np.ndarray, front: int) -> tuple[Driver, Driver, int]:
        """Allocate a buffer holding ``image`` (guards + data at ``front``); return (the whole
        allocation, what the kernel gets, the data's offset in the allocation). A backend that
        cannot pass an offset stores ``raw`` at 0 instead (only the back guard then guards)."""

    @abstractmethod
    def _local_arg(self, nbytes: int) -> Driver:
        """The argument value of a local (shared) memory parameter of ``nbytes``."""

    def bind(self, params: Sequence[Param], bindings: Sequence[ArgBinding], seed: int,
             guard_bytes: int = 4096, arrays: dict[str, np.ndarray] | None = None,
             digests: bool = False) -> BoundArgs:
        """Create device buffers (with canary guards), local-memory sizes and scalar values,
        one per parameter in order; ``bindings`` must cover every parameter. Raises
        :class:`ConfigError` for bindings the device cannot take, :class:`BackendError` when
        the driver fails. Random contents are drawn in parameter order from ``seed``."""
        info = self.device
        by_name = {b.name: b for b in bindings}
        check_buffer_memory(info, [by_name[p.name] for p in params if p.name in by_name])
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
                st = parse_type(p.dtype)
                try:
                    bound.values.append(scalar_value(st, b.value))
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
                bound.values.append(self._local_arg(max(nbytes, 1)))
                continue
            if nbytes > info.max_alloc_bytes:
                raise ConfigError(f"argument {p.name!r}: {nbytes} B exceeds the device's max allocation "
                                  f"{info.max_alloc_bytes} B")
            if getattr(p, "qualifier", "") == "constant" and nbytes > info.max_constant_bytes:
                raise ConfigError(f"argument {p.name!r}: {nbytes} B exceeds the device's __constant "
                                  f"limit {info.max_constant_bytes} B")
            data = init_contents(t, int(b.count), b.init, rng, (arrays or {}).get(p.name))
            raw = data.view(np.uint8)
            total = guard + _round_up(max(nbytes, 1), 8) + guard
            total_alloc += total
            if total_alloc > info.global_mem_bytes:
                raise ConfigError(f"buffers need {total_alloc} B, device has {info.global_mem_bytes} B")
            parent, arg, front = self._allocate(p.name, guarded_image(raw, guard, total), raw, guard)
            bound.buffers.append(BoundBuffer(
                name=p.name, cltype=t, count=int(b.count), nbytes=nbytes, front=front,
                back=total - front - nbytes, parent=parent, arg=arg,
                host_digest=hashlib.sha256(raw.tobytes()).digest() if digests else b"",
                is_output_candidate=not p.is_const,
            ))
            bound.values.append(arg)
        return bound

    @abstractmethod
    def read_range(self, buf: BoundBuffer, offset: int, size: int) -> np.ndarray:
        """``size`` bytes of ``buf``'s allocation from ``offset`` (guards included), waiting for
        the queue."""

    def read_back(self, buf: BoundBuffer) -> np.ndarray:
        """The whole allocation of a buffer (guards and data) as bytes."""
        return self.read_range(buf, 0, buf.front + buf.nbytes + buf.back)

    def check_guards(self, bound: BoundArgs, digests: bool = False
                     ) -> tuple[str, dict[str, tuple[bytes, bytes]]]:
        """Check every canary; returns (reason or "", and if ``digests``, per buffer the sha256 of
        its data and the sha256 of its elements in sorted order: equal for two runs that wrote the
        same values in another order, as an append through an atomic counter does)."""
        problems = []
        out: dict[str, tuple[bytes, bytes]] = {}
        for b in bound.buffers:
            front = self.read_range(b, 0, b.front)
            back_off = b.front + b.nbytes
            back = self.read_range(b, back_off, b.back)
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
                data = np.ascontiguousarray(self.read_range(b, b.front, b.nbytes)).view(np.uint8)
                elems = data[:data.size - data.size % b.cltype.itemsize].view(np.dtype(("V", b.cltype.itemsize)))
                out[b.name] = (hashlib.sha256(data.tobytes()).digest(),
                               hashlib.sha256(np.sort(elems).tobytes()).digest())
        return "; ".join(problems), out

    @abstractmethod
    def release(self, bound: BoundArgs) -> None:
        """Free the buffers of ``bound`` (after the last launch that uses them)."""

    # launches

    @abstractmethod
    def prepare(self, program: Driver, name: str, bound: BoundArgs) -> Driver:
        """Kernel ``name`` of ``program`` with the arguments of ``bound`` set, ready to launch.
        :class:`BackendError` when the driver refuses the arguments."""

    @abstractmethod
    def enqueue(self, kernel: Driver, gsize: tuple[int, ...], lsize: tuple[int, ...] | None,
                count: int = 1, restore: Sequence[Restore] = ()) -> None:
        """Queue ``count`` launches without waiting or timing them (``restore``: as in
        :meth:`launch_batch`)."""

    @abstractmethod
    def synchronize(self) -> None:
        """Wait until everything queued has finished."""

    @abstractmethod
    def launch(self, kernel: Driver, gsize: tuple[int, ...], lsize: tuple[int, ...] | None) -> float:
        """One launch, waited for: its device-measured time in microseconds."""

    @abstractmethod
    def launch_batch(self, kernel: Driver, gsize: tuple[int, ...], lsize: tuple[int, ...] | None,
                     count: int, restore: Sequence[Restore] = ()) -> list[float]:
        """``count`` launches back to back, then wait for all: the device time of each, in
        microseconds (the device stays busy in between, as a meter window needs). ``restore``:
        before each launch, copy each pristine buffer over its target (device side, untimed)."""

    # state-consuming kernels

    @abstractmethod
    def upload(self, data: np.ndarray) -> Driver:
        """A new device buffer holding ``data`` (a pristine copy for :class:`Restore`)."""

    @abstractmethod
    def restore(self, items: Sequence[Restore]) -> None:
        """Queue the device-side copies of ``items`` (pristine contents over the buffers' data)."""

    @abstractmethod
    def free(self, mem: Driver) -> None:
        """Release a buffer made by :meth:`upload`."""


@dataclass
class Restore:
    """A buffer whose initial contents are put back before every launch, and its pristine copy."""

    buffer: BoundBuffer
    pristine: Driver

