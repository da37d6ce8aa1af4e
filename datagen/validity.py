"""cldrive-style validity checks of a kernel under an argument selection.

Three runs of one small configuration, each from freshly initialised buffers:

* A and B with the same inputs: different outputs mean the kernel is *nondeterministic*;
* C with different inputs: the same outputs as A mean the kernel is *input-insensitive* (unless
  it has no input buffer at all, none it reads and none declared const: a generator over scalars,
  such as a Mandelbrot image, cannot be);
* A must change at least one non-const global buffer, or the kernel has *no output*.

A kernel that appends through an atomic counter (``s = atomic_inc(count); out[s] = v``) writes
its values in an order the schedule decides: for it, outputs are compared as multisets (each
buffer's elements in sorted order), so an append is not nondeterministic and a race that changes
values still is.

A kernel that fails a check is recorded with status ``invalid_output`` and the reason; one that
crashes, hangs, fails to build or writes out of bounds in A gets that status instead.

The small configuration runs so few work-groups that they hardly overlap, so a data race (a
non-atomic read-modify-write of one global by every work-item) passes it. With a ``concurrent``
configuration (many small work-groups, several per compute unit) the kernel also runs
:data:`CONCURRENT_RUNS` times from the same inputs there; any difference is nondeterminism too.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from kernelcast.datagen.indexargs import analyse_uses
from kernelcast.instrument.runner import TimingPolicy
from kernelcast.instrument.state import maybe_read_buffers

from kernelcast.clang import ParseError, kernel_signatures
from kernelcast.schema import Kernel, LaunchConfig

VALIDITY_SEED = 1234
#: runs of the concurrent configuration compared with one another
CONCURRENT_RUNS = 3
_ONCE = TimingPolicy(warmup=0, min_repeats=1, min_time_s=0.0, max_repeats=1, max_time_s=5.0)


@dataclass
class Validity:
    status: str
    reason: str = ""
    nondeterministic: bool | None = None
    input_insensitive: bool | None = None
    changed_outputs: list[str] = field(default_factory=list)
    concurrent_gsize: list[int] | None = None     # where the race check ran (None: not run)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _digests(m: Any, order_free: bool = False) -> dict[str, str]:
    """Each output buffer's digest; with ``order_free``, of its elements in sorted order."""
    key = "sorted_sha256" if order_free else "sha256"
    return {n: o.get(key, o["sha256"]) for n, o in m.outputs.items() if o.get("output_candidate")}


def _appends_through_a_counter(kernel: Kernel) -> bool:
    """Whether the kernel stores through slots an atomic counter hands out (rule R7:
    ``s = atomic_inc(count); out[s] = v``): which work-item gets which slot depends on the
    schedule, so two correct runs write the same values in another order."""
    try:
        params = kernel_signatures(kernel.source, kernel.build_options).get(kernel.name) or []
        return bool(analyse_uses(kernel.source, kernel.name, params).counters)
    except ParseError:
        return False


def check_validity(harness: Any, kernel: Kernel, config: LaunchConfig, seed: int = VALIDITY_SEED,
                   concurrent: LaunchConfig | None = None) -> Validity:
    a = harness.run(kernel, config, TimingPolicy(**{**asdict(_ONCE), "seed": seed}), want_outputs=True)
    if a.status != "ok":
        return Validity(a.status, a.reason)
    changed = sorted(n for n, o in a.outputs.items() if o.get("output_candidate") and o.get("changed"))
    if not changed:
        return Validity("invalid_output", "no output: no writable global buffer changed", changed_outputs=[])
    b = harness.run(kernel, config, TimingPolicy(**{**asdict(_ONCE), "seed": seed}), want_outputs=True)
    if b.status != "ok":
        return Validity(b.status, f"second run: {b.reason}", changed_outputs=changed)
    order_free = _appends_through_a_counter(kernel)
    da = _digests(a, order_free)
    nondet = da != _digests(b, order_free)
    c = harness.run(kernel, config, TimingPolicy(**{**asdict(_ONCE), "seed": seed + 1}), want_outputs=True)
    if c.status != "ok":
        return Validity(c.status, f"run with other inputs: {c.reason}", nondeterministic=nondet,
                        changed_outputs=changed)
    # compare only the buffers the kernel changed: an untouched buffer differs because its inputs did
    dc = _digests(c, order_free)
    insensitive = all(da[n] == dc[n] for n in changed)
    if insensitive and not _reads_a_buffer(kernel, config):
        # a generator (Mandelbrot over scalar bounds): it has no input buffer, so no input could
        # change its outputs; the check does not apply
        insensitive = False
    v = Validity("ok", "", nondet, insensitive, changed)
    if nondet:
        v.status, v.reason = "invalid_output", "nondeterministic: same inputs gave different outputs"
    elif insensitive:
        v.status, v.reason = "invalid_output", "input-insensitive: different inputs gave the same outputs"
    elif concurrent is not None:
        _check_concurrent(harness, kernel, concurrent, seed, v, order_free)
    return v


def _reads_a_buffer(kernel: Kernel, config: LaunchConfig) -> bool:
    """Whether the kernel has an input buffer: one it may read (its body's uses of it are not all
    plain stores) or one declared ``const`` (an input it ignores is still an input)."""
    names = [a.name for a in config.args if a.kind == "buffer"]
    try:
        params = kernel_signatures(kernel.source, kernel.build_options).get(kernel.name) or []
    except ParseError:
        return True
    if any(p.kind == "buffer" and p.is_const for p in params):
        return True
    return bool(names) and bool(maybe_read_buffers(kernel.source, kernel.name, names))


def _check_concurrent(harness: Any, kernel: Kernel, config: LaunchConfig, seed: int, v: Validity,
                      order_free: bool = False) -> None:
    """Run ``config`` from the same inputs :data:`CONCURRENT_RUNS` times; differing outputs make
    ``v`` nondeterministic. A run that fails leaves ``v`` as it is (the sampled configurations will
    show the failure with its status)."""
    first: dict[str, str] | None = None
    for _ in range(CONCURRENT_RUNS):
        m = harness.run(kernel, config, TimingPolicy(**{**asdict(_ONCE), "seed": seed}), want_outputs=True)
        if m.status != "ok":
            return
        d = {n: h for n, h in _digests(m, order_free).items() if n in v.changed_outputs}
        if first is None:
            first = d
            v.concurrent_gsize = list(config.gsize)
        elif d != first:
            v.nondeterministic = True
            v.status = "invalid_output"
            v.reason = (f"nondeterministic at global size {'x'.join(map(str, config.gsize))} (work-groups running "
                        f"concurrently): same inputs gave different outputs, a data race")
            return
