"""Device classes: the interface the shared pipeline calls, and the registry that picks a class for
a profile.

A device class is what the model knows about one kind of device beyond the shared roofline: how
many work-groups a compute unit holds at once, what one work-item's operations cost, which memory
level serves a working set, how the waves' compute and memory time combine, and what a launch
costs. :class:`DeviceClass` holds the plainest answer to each (one work-group per compute unit,
operations at the peak rates, compute and memory overlapped); a class overrides what its devices do
differently. A class registers itself with :func:`register` and says which profiles it takes in
:meth:`DeviceClass.matches` (from :class:`DeviceKind`: the profile's device type and vendor); the
registered class of the highest ``priority`` that matches a profile is its class
(:func:`device_class_for`). A new class is a new module that registers one: nothing in the pipeline
names a class.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import numpy as np
from kernelcast.calib.profile import DeviceProfile
from kernelcast.models.analytical.params import RATE_CLASSES, SharedParams
from kernelcast.models.static.features import BUILTIN_CLASSES, GROUP_SHARE

#: profile keys of the atomic benchmark (``calib --only atomic``)
ATOMIC_KEY = re.compile(r"^atomic_(global|local)(_b\d+)?_gops$")


@dataclass(frozen=True)
class DeviceKind:
    """What a profile says about its device, the key a device class is chosen by."""

    device_type: str          # OpenCL CL_DEVICE_TYPE in upper case: "CPU", "GPU", "ACCELERATOR", ... or ""
    vendor: str               # the device's vendor string as the profile has it ("" where unknown)
    name: str
    values: frozenset[str]    # the profile's value names (e.g. ``max_warps_per_cu``: a GPU occupancy model)

    @classmethod
    def of(cls, p: DeviceProfile) -> DeviceKind:
        dev = getattr(p, "device", None)
        return cls(device_type=(getattr(dev, "device_type", "") or "").upper(),
                   vendor=getattr(dev, "vendor", "") or "", name=getattr(dev, "name", "") or "",
                   values=frozenset(k for k, v in p.values.items() if v.value is not None))


@dataclass
class ItemCosts:
    """One work-item's compute cost on one compute unit, what the waves multiply out."""

    seconds: np.ndarray                # seconds of one compute unit per work-item
    flops: np.ndarray                  # floating-point operations per work-item
    busiest_s: np.ndarray | None = None   # the time of a critical-path work-item, if any (a floor on the kernel)
    #: further terms of the cost per work-item that the explanation shows (seconds, by name)
    parts: dict[str, np.ndarray] | None = None


class DeviceClass(ABC):
    """One kind of device behind the shared pipeline (:class:`~.model.AnalyticalModel`).

    The defaults are the model of a device that runs one work-group per compute unit at the peak
    rates of the profile, with compute and memory overlapped; a class overrides what differs."""

    #: the class's name, shown by ``kernelcast predict`` and the registry
    name: ClassVar[str] = ""
    #: the parameter dataclass this class reads from a profile
    params_type: ClassVar[type[SharedParams]] = SharedParams
    #: among the classes that match a profile, the highest priority wins
    priority: ClassVar[int] = 0
    #: prefix of the per-work-item counts the operation costs read (``warp_``: counts per warp)
    count_prefix: ClassVar[str] = ""
    #: whether the waves are counted over the working work-groups only (:meth:`working_groups`)
    waves_of_working_groups: ClassVar[bool] = False
    #: whether the compute part of a partial last wave after full ones is that of a full wave
    full_tail_wave: ClassVar[bool] = False

    def __init__(self, profile: DeviceProfile, device_info: Any = None) -> None:
        self.profile = profile
        self.params = self.params_type.from_profile(profile, device_info)

    @classmethod
    @abstractmethod
    def matches(cls, kind: DeviceKind) -> bool:
        """Whether this class models the device a profile describes."""

    # -- the pipeline's stages ----------------------------------------------------------------

    def feature_symbols(self) -> dict[str, float]:
        """Symbols of the static features this device fixes (e.g. ``warp``: the width the
        per-warp counts and the coalescing are counted at); the features' defaults otherwise."""
        return {}

    def compiled_features(self, f: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The evaluated static features of the code this device's compiler makes from the source
        (the facts the static analysis records of what a compiler may remove); as counted by default."""
        return f

    def compiled_resources(self, source: str, name: str, language: str, options: str,
                           cache_dir: str | None = None) -> dict[str, float]:
        """What this device's compiler makes of one configuration's code that the source does not
        show (registers, spills), as ``compiled_<name>`` values the later stages read from the
        features; none by default (the class cannot compile for its device)."""
        return {}

    def compile_target(self) -> str:
        """The compiler target :meth:`compiled_resources` compiles for (empty: it does not compile)."""
        return ""

    def estimated_resources(self, feats: Any, f: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """What this device's compiler would make of the code, estimated from the static analysis
        where no compiler report stands in ``f`` (registers, spills), as features the later stages
        read; none by default."""
        return {}

    def working_groups(self, f: Mapping[str, np.ndarray], env: Mapping[str, np.ndarray], n_wg: np.ndarray
                       ) -> np.ndarray:
        """The work-groups the waves are counted over: with :attr:`waves_of_working_groups`, those in
        which some work-item does the kernel's work (:func:`working_groups`), the others exiting
        at once; else all of them (default)."""
        return working_groups(f, env, n_wg) if self.waves_of_working_groups else n_wg

    def unrunnable(self, feats: Any, f: Mapping[str, np.ndarray], lsz: np.ndarray) -> np.ndarray:
        """Why the device cannot run each configuration ("" where it can): a work-group larger than
        the device's largest, or more local memory per work-group than it may use
        (``local_mem_bytes``: the fixed-size arrays and the ``__local`` arguments' lengths), or more
        in fixed-size arrays than it may declare so (CUDA's 48 KiB). Such a configuration fails to
        build or to launch on the device, so it gets no time (NaN) and this reason."""
        d = self.params
        out = np.full(lsz.shape, "", dtype=object)
        local = np.broadcast_to(np.asarray(f["local_mem_bytes"], dtype=np.float64), lsz.shape)
        fixed = float(getattr(feats, "local_mem_bytes", 0) or 0)
        checks = [(d.max_wg_size, lsz, "a work-group of {v:,.0f} work-items, more than the device's {lim:,.0f}"),
                  (d.max_local_mem_per_wg, local, "{v:,.0f} B of local memory per work-group, more than the "
                                                  "device's {lim:,.0f} B"),
                  (d.max_static_local_mem_per_wg, np.full(lsz.shape, fixed),
                   "{v:,.0f} B of fixed-size local arrays, more than the {lim:,.0f} B a kernel may declare so")]
        for lim, v, text in checks:
            if not lim:
                continue
            for i in np.flatnonzero((v > lim) & (out == "")):
                out[i] = text.format(v=float(v[i]), lim=float(lim))
        return out

    def residency(self, f: Mapping[str, np.ndarray], g: np.ndarray, lsz: np.ndarray, n_wg: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
        """Resident work-groups per compute unit and the occupancy (0-1), per configuration."""
        cu = float(self.params.compute_units)
        return np.ones_like(g), np.minimum(n_wg, cu) / cu

    def item_costs(self, feats: Any, f: Mapping[str, np.ndarray], env: Mapping[str, Any], g: np.ndarray,
                   n_wg: np.ndarray) -> ItemCosts:
        """Compute seconds of one compute unit per work-item (:func:`operation_seconds` at the peak
        rates)."""
        comp, flops = operation_seconds(self.params, f, g, self.count_prefix)
        return ItemCosts(comp, flops)

    def level_fits(self, i: int, ws: np.ndarray, active_cu: np.ndarray) -> np.ndarray:
        """Whether memory level ``i`` (of :attr:`SharedParams.bw_levels`) holds the working set."""
        return ws <= self.params.bw_levels[i][0]

    def strided(self, feats: Any, env: Mapping[str, Any], level: np.ndarray, fetched: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
        """Seconds per work-item of accesses charged apart from the streamed bytes (on one compute
        unit), and the bytes per work-item left to stream at the level's bandwidth."""
        return np.zeros_like(fetched), fetched

    def barrier_seconds(self, lsz: np.ndarray) -> np.ndarray:
        """Seconds per barrier per work-group of ``lsz`` work-items."""
        return self.params.barrier_s + 0.0 * lsz

    def body(self, f: Mapping[str, np.ndarray], lsz: np.ndarray, per_cu: np.ndarray, n_wg: np.ndarray,
             comp_t: np.ndarray, mem_t: np.ndarray, busiest_s: np.ndarray | None
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The waves' time from their compute and memory parts: (body, compute part, the share of
        the body spent waiting for compute units to join). Default: the two overlap."""
        even = np.maximum(comp_t, mem_t)
        return even, comp_t, even - even

    def memory_levels(self, f: Mapping[str, np.ndarray], env: Mapping[str, Any], g: np.ndarray, lsz: np.ndarray,
                      n_wg: np.ndarray, per_cu: np.ndarray, mem_t: np.ndarray
                      ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The memory part from the levels of the hierarchy, and their figures as parts of the
        explanation (per-level seconds, bytes, hit rates). Default: the streamed memory part
        as the pipeline charged it, no levels."""
        return mem_t, {}

    def latency_seconds(self, f: Mapping[str, np.ndarray], levels: Mapping[str, np.ndarray], lsz: np.ndarray,
                        per_cu: np.ndarray, n_wg: np.ndarray, comp_t: np.ndarray, mem_t: np.ndarray
                        ) -> np.ndarray | None:
        """The time the latency of memory accesses sets when too few warps hide it (a floor on the
        body), None where the class does not model it."""
        return None

    def with_latency(self, body: np.ndarray, latency: np.ndarray) -> np.ndarray:
        """The body given the latency floor of :meth:`latency_seconds`. Default: the floor bounds
        it from below."""
        return np.maximum(body, latency)

    def capped_body(self, body: np.ndarray, comp_t: np.ndarray, mem_t: np.ndarray, freq_ratio: np.ndarray,
                    n_wg: np.ndarray) -> np.ndarray:
        """The body under a power cap that slows the clock to ``freq_ratio``: compute slows with it."""
        return np.maximum(comp_t / freq_ratio, mem_t)

    def launch_seconds(self, n_wg: np.ndarray, lsz: np.ndarray) -> np.ndarray:
        """A launch's fixed cost and its work-groups' overheads."""
        d = self.params
        return d.launch_s + n_wg * d.wg_overhead_s

    # -- the explanation ----------------------------------------------------------------------

    def kernel_assumptions(self, feats: Any) -> dict[str, Any]:
        """What the prediction of a kernel assumed whatever its configuration (none here)."""
        return {}

    def atomic_assumptions(self, feats: Any, env: Mapping[str, Any]) -> dict[str, Any]:
        """How the kernel's atomics were charged at one configuration: as bytes only here."""
        if not any(a.kind == "atomic" for a in getattr(feats, "accesses", [])):
            return {}
        has_rates = any(ATOMIC_KEY.match(k) and v.value and v.value > 0
                        for k, v in self.profile.values.items())
        return {"atomics": "charged as memory bytes only: " + (
            "atomic rates are charged on CPU devices only" if has_rates
            else "the profile has no atomic rates (calib --only atomic)")}


def working_groups(f: Mapping[str, np.ndarray], env: Mapping[str, np.ndarray], n_wg: np.ndarray) -> np.ndarray:
    """The work-groups of a launch in which some work-item does the kernel's work: per dimension,
    the share the static analysis reports (``group_share<d>``: the group ids for which the guards
    around the kernel's accesses and loops can hold, :mod:`models.static.groups`) of that
    dimension's groups, at least one; all of them where the features have no share."""
    n = np.ones_like(np.asarray(n_wg, dtype=np.float64))
    for d in range(3):
        ng = np.asarray(env.get(f"ngroups{d}", 1.0), dtype=np.float64)
        share = f.get(f"{GROUP_SHARE}{d}")
        if share is None:
            n = n * ng
            continue
        # the share is a count of group ids over their number: an integer up to rounding
        n = n * np.clip(np.ceil(ng * share - 1e-6), 1.0, np.maximum(ng, 1.0))
    return np.minimum(n, n_wg)


def operation_seconds(d: SharedParams, f: Mapping[str, np.ndarray], g: np.ndarray, prefix: str = ""
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Seconds of one compute unit per work-item for its operations at the device's peak rates
    (``prefix``: read the per-warp counts, ``warp_<class>``, where they exist), every special
    function in its builtin family at the family's rate; and the flops per work-item."""
    cu = float(d.compute_units)
    comp_s_item = np.zeros_like(g)
    flops = np.zeros_like(g)
    families = [b for b in BUILTIN_CLASSES if b in f and np.any(f[b] > 0)]
    for op in RATE_CLASSES:
        cnt = f.get(prefix + op, f.get(op))
        if cnt is None:
            continue
        if op == "sfu" and families:
            continue        # every special function is charged in its family below
        comp_s_item = comp_s_item + cnt / (d.rate(op) / cu)
        if op.startswith("fp"):
            flops = flops + f[op] * (2 if op.endswith("fma") else 1)
    for b in families:
        comp_s_item = comp_s_item + f.get(prefix + b, f[b]) / (d.builtin_rate(b) / cu)
    return np.maximum(comp_s_item, np.zeros_like(g)), flops


_CLASSES: list[type[DeviceClass]] = []

C = TypeVar("C", bound=type[DeviceClass])


def register(cls: C) -> C:
    """Class decorator: make a device class available to :func:`device_class_for` (a class of the
    same name registered again replaces the earlier one)."""
    _CLASSES[:] = [c for c in _CLASSES if c.name != cls.name]
    _CLASSES.append(cls)
    return cls


def unregister(name: str) -> None:
    """Remove the registered class ``name`` (nothing if there is none)."""
    _CLASSES[:] = [c for c in _CLASSES if c.name != name]


def registered_classes() -> list[type[DeviceClass]]:
    """The registered device classes, highest priority first."""
    return sorted(_CLASSES, key=lambda c: -c.priority)


def device_class_for(profile: DeviceProfile) -> type[DeviceClass]:
    """The device class of ``profile``: the registered class of the highest priority that matches
    it. :class:`LookupError` when none does (the package registers a generic class that takes any)."""
    kind = DeviceKind.of(profile)
    for c in registered_classes():
        if c.matches(kind):
            return c
    raise LookupError(f"no device class for device type {kind.device_type!r} ({kind.name or 'unnamed'})")


def params_from_profile(profile: DeviceProfile, device_info: Any = None) -> SharedParams:
    """The parameters of ``profile`` as its device class reads them."""
    return device_class_for(profile).params_type.from_profile(profile, device_info)


class DeviceParams:
    """The parameters of a profile for its device class: ``DeviceParams.from_profile(p)`` is
    :func:`params_from_profile` (a :class:`SharedParams` subclass instance)."""

    from_profile = staticmethod(params_from_profile)

