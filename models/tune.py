"""The search space of ``tune``: work-group sizes and block shapes (FlipFlop Algorithm 2), power
caps, and the time/energy Pareto set. Every enumeration is bounded."""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from kernelcast.errors import UsageError

#: the most power caps one search takes
MAX_POWER_CAPS = 1000
#: the most (configuration x power cap) points one search scores
MAX_POINTS = 200_000


def power_caps(text: str | None) -> list[float | None]:
    """``LO:HI:STEP`` in watts as a list of caps (``[None]``: no cap)."""
    if not text:
        return [None]
    try:
        parts = [float(x) for x in text.split(":")]
    except ValueError:
        raise UsageError(f"--power-caps {text!r}: expected LO:HI:STEP in watts") from None
    if len(parts) != 3 or not all(math.isfinite(x) for x in parts) or parts[2] <= 0 or parts[0] > parts[1] \
            or parts[0] <= 0:
        raise UsageError(f"--power-caps {text!r}: expected LO:HI:STEP with 0 < LO <= HI and STEP > 0")
    n = math.floor((parts[1] - parts[0]) / parts[2] + 1e-9) + 1
    if n > MAX_POWER_CAPS:
        raise UsageError(f"--power-caps {text!r}: {n} caps; at most {MAX_POWER_CAPS} (use a larger STEP)")
    return list(np.arange(parts[0], parts[1] + 1e-9, parts[2]))


def enumerate_shapes(n: tuple[int, ...], warp: int, max_wg: int, max_items: list[int] | None,
                     shapes: bool) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """(gsize, lsize) pairs: work-group sizes that are multiples of the warp up to the device
    maximum (FlipFlop Algorithm 2), the global size padded up to a multiple of each."""
    out: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
    dims = len(n)
    totals = [w for w in range(warp, max_wg + 1, warp)]
    for t in totals:
        cand: list[tuple[int, ...]]
        if dims == 1:
            cand = [(t,)]
        elif shapes:
            cand = [(x, t // x) + (1,) * (dims - 2) for x in range(1, t + 1) if t % x == 0]
        else:
            x = min(t, 2 ** int(math.log2(max(1, int(math.sqrt(t))))) * 2)
            cand = [(x, t // x) + (1,) * (dims - 2)] if t % x == 0 else []
        for ls in cand:
            if max_items and any(a > b for a, b in zip(ls, max_items)):
                continue
            g = tuple(int(math.ceil(a / b) * b) for a, b in zip(n, ls))
            out.append((g, ls))
    return out


def pareto(time_: np.ndarray, energy: np.ndarray) -> np.ndarray:
    """Indices of the points no other point beats in both time and energy."""
    order = np.lexsort((energy, time_))
    best_e = np.inf
    keep = []
    for i in order:
        if energy[i] < best_e:
            keep.append(i)
            best_e = energy[i]
    return np.array(keep, dtype=int)


#: Kernel Tuner's names of the work-group dimensions
KT_BLOCK_NAMES = ("block_size_x", "block_size_y", "block_size_z")
KT_FORMAT = "kernelcast-kernel-tuner-shortlist"


def kernel_tuner_shortlist(kernel_name: str, problem: tuple[int, ...], lsizes: list[tuple[int, ...]],
                           power_caps_w: list[float | None], pred_us: list[float], pred_energy_j: list[float | None],
                           *, objective: str, profile: str) -> dict[str, Any]:
    """The chosen configurations (best first) as Kernel Tuner input: ``tune_params`` (the values of
    ``block_size_x/y/z`` and, with power caps, ``nvml_pwr_limit``) and ``restrictions`` (one string
    that admits exactly the chosen combinations), for ``kernel_tuner.tune_kernel(name, source,
    problem_size, args, tune_params, restrictions=restrictions)``. Kernel Tuner launches
    ``ceil(problem / block)`` work-groups of ``block`` work-items, the global size kernelcast
    predicted (the problem padded up to a multiple of the work-group size)."""
    dims = len(problem)
    names = list(KT_BLOCK_NAMES[:dims])
    with_caps = any(c is not None for c in power_caps_w)
    if with_caps:
        names.append("nvml_pwr_limit")
    configs: list[dict[str, object]] = []
    seen: set[tuple[int, ...]] = set()
    for rank, (ls, cap, t, e) in enumerate(zip(lsizes, power_caps_w, pred_us, pred_energy_j), start=1):
        values = tuple(int(x) for x in ls) + ((int(round(cap)) if cap is not None else 0,) if with_caps else ())
        if values in seen:        # two caps that round to the same whole watt
            continue
        seen.add(values)
        c: dict[str, object] = dict(zip(names, values))
        c.update(rank=rank, pred_us=float(t), pred_energy_j=None if e is None or not math.isfinite(e) else float(e))
        configs.append(c)
    tune_params = {n: sorted({int(str(c[n])) for c in configs}) for n in names}
    clauses = ["(" + " and ".join(f"{n} == {c[n]}" for n in names) + ")" for c in configs]
    return {
        "format": KT_FORMAT, "version": 1, "kernel_name": kernel_name, "problem_size": list(problem),
        "objective": objective, "profile": profile,
        "tune_params": tune_params,
        "restrictions": [" or ".join(clauses)] if len(configs) > 1 or dims > 1 or with_caps else [],
        "configurations": configs,
        "usage": "kernel_tuner.tune_kernel(kernel_name, source, problem_size, arguments, tune_params, "
                 "restrictions=restrictions, lang='OpenCL')",
    }


def write_shortlist(path: str | os.PathLike[str], doc: dict[str, Any]) -> None:
    """Write a :func:`kernel_tuner_shortlist` as JSON, atomically (a temporary file renamed)."""
    p = Path(path)
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
