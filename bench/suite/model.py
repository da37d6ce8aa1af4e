"""The data model of a benchmark-suite manifest: a :class:`Suite` of :class:`KernelSpec` entries
(sizes, geometry, :class:`GeneratorSpec` s and :class:`ArgSpec` s), and the :class:`BenchInstance`
one entry gives at one problem size.

:mod:`bench.suite.manifest` reads and validates a document into these classes;
:meth:`KernelSpec.instance` evaluates an entry's expressions at one size, generates its inputs and
reports a value that does not work at that size as a :class:`ManifestError`.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from kernelcast.bench.suite.generators import KINDS, GeneratorError, generate

from kernelcast.cltypes import CLType, parse_type, scalar_value
from kernelcast.errors import InputError, KernelcastError
from kernelcast.expr import ExprError, evaluate, evaluate_int
from kernelcast.schema import ArgBinding, Kernel, LaunchConfig

Number = int | float
Expr = str | int | float


# -- errors ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Issue:
    """One problem in a manifest: which kernel (None for the suite), which field, what."""

    kernel: str | None
    field: str
    message: str

    def __str__(self) -> str:
        where = f"kernel {self.kernel!r}: " if self.kernel is not None else ""
        return f"{where}{self.field}: {self.message}"


class ManifestError(InputError, ValueError):
    """A manifest with problems; ``issues`` lists each, ``str()`` shows them all."""

    def __init__(self, path: str | Path, issues: list[Issue]):
        self.path = str(path)
        self.issues = list(issues)
        if len(issues) == 1:
            text = f"{self.path}: {issues[0]}"
        else:
            text = f"{self.path}: {len(issues)} problems:\n" + "\n".join(f"  - {i}" for i in issues)
        super().__init__(text)


class FieldError(KernelcastError):
    """Internal: one field of one kernel entry is wrong (becomes an :class:`Issue`)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


# -- the model -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PartRef:
    """``{"from": "A.col_indices"}``: part ``part`` of generator ``generator``."""

    generator: str
    part: str

    def __str__(self) -> str:
        return f"{self.generator}.{self.part}"


@dataclass(frozen=True)
class InitSpec:
    """How a buffer's contents are made: random / range / constant / zeros / ones / from."""

    kind: str
    low: Expr | None = None
    high: Expr | None = None
    seed: int | None = None
    value: Expr | None = None
    ref: PartRef | None = None


@dataclass
class ArgSpec:
    """One kernel argument as the manifest binds it."""

    name: str
    kind: str                                  # buffer | scalar | local
    dtype: str
    count: Expr | None = None                  # buffer / local
    init: InitSpec | None = None               # buffer
    value: Expr | list[Expr] | PartRef | None = None   # scalar
    notes: str = ""
    index: int = 0                             # position in the manifest's args list
    reset_each_run: bool = False               # buffer: initial contents restored before every launch

    @property
    def field(self) -> str:
        return f"args[{self.index}] ({self.name})"


@dataclass
class GeneratorSpec:
    """A declared generator: ``{"A": {"csr": {params}}}`` becomes GeneratorSpec("A", "csr", params)."""

    id: str
    kind: str
    params: dict[str, Any]


@dataclass
class BenchInstance:
    """One (kernel, problem size) of a suite, ready for :meth:`instrument.harness.Harness.run`."""

    suite: str
    id: str                                    # the manifest entry's id
    kernel: Kernel
    n: int
    gsize: tuple[int, ...]
    lsize: tuple[int, ...] | None
    args: list[ArgBinding]
    arrays: dict[str, np.ndarray]
    label: str
    env: dict[str, Number] = field(default_factory=dict)
    scalars: dict[str, Number] = field(default_factory=dict)   # generator scalar parts, "A.nnz" -> value

    @property
    def config(self) -> LaunchConfig:
        return LaunchConfig(self.gsize, self.lsize, list(self.args))

    def arg(self, name: str) -> ArgBinding:
        for a in self.args:
            if a.name == name:
                return a
        raise KeyError(name)

    def input_bytes(self) -> int:
        """Bytes of all global buffers."""
        return sum(int(a.count or 0) * parse_type(a.dtype).itemsize for a in self.args if a.kind == "buffer")


@dataclass
class KernelSpec:
    """One kernel entry of a manifest."""

    id: str
    file: Path
    kernel: str
    source: str                                # prelude + file text, what gets built
    build_options: str                         # user options + -D defines + -I includes
    sizes: list[int]
    gsize: list[Expr]
    lsize: list[Expr] | None
    args: list[ArgSpec]
    generators: dict[str, GeneratorSpec] = field(default_factory=dict)
    defines: dict[str, Number] = field(default_factory=dict)
    constants: dict[str, Expr] = field(default_factory=dict)
    title: str = ""
    notes: str = ""
    seed: int = 0
    suite_constants: dict[str, Number] = field(default_factory=dict)
    suite_seed: int = 0
    manifest: Path | None = None
    #: a launch-configuration sweep: every size is measured with each of these local sizes (instead of ``lsize``)
    lsizes: list[list[Expr]] | None = None

    # -- evaluation ----------------------------------------------------------------------------

    def kernel_record(self) -> Kernel:
        return Kernel(source=self.source, name=self.kernel, language="opencl", build_options=self.build_options,
                      dims=len(self.gsize), origin=str(self.file))

    def environment(self, n: int) -> dict[str, Number]:
        """Names an expression at size ``n`` can use: suite constants, defines, n, kernel constants."""
        env: dict[str, Number] = dict(self.suite_constants)
        env.update(self.defines)
        env["n"] = n
        for name, expr in self.constants.items():
            try:
                env[name] = evaluate(expr, env)
            except ExprError as e:
                raise FieldError(f"constants.{name}", str(e)) from None
        return env

    @property
    def variants(self) -> int:
        """Launch configurations per problem size: the local sizes of the sweep, or 1."""
        return len(self.lsizes) if self.lsizes else 1

    def label(self, n: int, variant: int = 0) -> str:
        """The instance's name: ``id n=N``, with ``lsize=AxB`` in a sweep."""
        if not self.lsizes:
            return f"{self.id} n={n}"
        return f"{self.id} n={n} lsize={'x'.join(str(e) for e in self.lsizes[variant])}"

    def geometry(self, env: Mapping[str, Number], variant: int = 0
                 ) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
        gs = tuple(_positive_int(e, env, f"gsize[{i}]" if len(self.gsize) > 1 else "gsize")
                   for i, e in enumerate(self.gsize))
        lsize, field_name = (self.lsizes[variant], f"lsizes[{variant}]") if self.lsizes else (self.lsize, "lsize")
        if lsize is None:
            return gs, None
        ls = tuple(_positive_int(e, env, f"{field_name}[{i}]" if len(lsize) > 1 else field_name)
                   for i, e in enumerate(lsize))
        for d, (g, loc) in enumerate(zip(gs, ls)):
            if g % loc:
                raise FieldError(field_name, f"local size {loc} does not divide global size {g} in dimension {d}")
        return gs, ls

    def generator_params(self, env: Mapping[str, Number]) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for gid, g in self.generators.items():
            kind = KINDS[g.kind]
            vals: dict[str, Any] = {}
            for pname, raw in g.params.items():
                p = kind.param(pname)
                where = f"generators.{gid}.{pname}"
                assert p is not None
                if p.kind in ("choice", "dtype") or (p.kind == "int_or_choice" and raw in p.choices):
                    vals[pname] = raw
                    continue
                try:
                    v: Number = evaluate_int(raw, env) if p.kind in ("int", "int_or_choice") else evaluate(raw, env)
                except ExprError as e:
                    raise FieldError(where, str(e)) from None
                if p.minimum is not None and v < p.minimum:
                    raise FieldError(where, f"{raw!r} = {v} is below the minimum {p.minimum:g}")
                vals[pname] = v
            out[gid] = vals
        return out

    def _seed(self, *what: object) -> int:
        text = "/".join(str(x) for x in (self.suite_seed, self.seed, self.id, *what))
        return zlib.crc32(text.encode())

    def instance(self, n: int, suite: str = "", variant: int = 0) -> BenchInstance:
        """Everything needed to launch this kernel at problem size ``n`` (generates the inputs), with
        the ``variant``-th local size of a sweep."""
        try:
            env = self.environment(n)
            gsize, lsize = self.geometry(env, variant)
            gparams = self.generator_params(env)
            generated: dict[str, Any] = {}
            for gid, params in gparams.items():
                try:
                    generated[gid] = generate(self.generators[gid].kind, params, self._seed("gen", gid, n))
                except GeneratorError as e:
                    raise FieldError(f"generators.{gid}", str(e)) from None
            bindings, arrays = self._bind(env, n, generated)
        except FieldError as e:
            raise ManifestError(self.manifest or self.file, [Issue(self.id, e.field, f"at n={n}: {e.message}")]
                                ) from None
        scalars = {f"{gid}.{k}": v for gid, g in generated.items() for k, v in g.scalars.items()}
        return BenchInstance(suite=suite, id=self.id, kernel=self.kernel_record(), n=n, gsize=gsize, lsize=lsize,
                             args=bindings, arrays=arrays, label=self.label(n, variant), env=dict(env),
                             scalars=scalars)

    def _bind(self, env: Mapping[str, Number], n: int, generated: Mapping[str, Any] | None
              ) -> tuple[list[ArgBinding], dict[str, np.ndarray]]:
        """Argument bindings and arrays; with ``generated=None`` only checks what can be checked
        without generating data (validation)."""
        bindings: list[ArgBinding] = []
        arrays: dict[str, np.ndarray] = {}
        for a in self.args:
            b, data = self._bind_one(a, env, n, generated)
            bindings.append(b)
            if data is not None:
                arrays[a.name] = data
        return bindings, arrays

    def _bind_one(self, a: ArgSpec, env: Mapping[str, Number], n: int, generated: Mapping[str, Any] | None
                  ) -> tuple[ArgBinding, np.ndarray | None]:
        t = parse_type(a.dtype)
        if a.kind == "local":
            return ArgBinding(a.name, "local", a.dtype, count=_nonneg_int(a.count, env, f"{a.field}.count")), None
        if a.kind == "scalar":
            return ArgBinding(a.name, "scalar", a.dtype, value=self._scalar(a, t, env, generated)), None
        count, data = self._buffer(a, t, env, n, generated)
        init = a.init.kind if a.init is not None and a.init.kind in ("zeros", "ones") else "array"
        return ArgBinding(a.name, "buffer", a.dtype, count=count, init=init, reset_each_run=a.reset_each_run), data

    def _scalar(self, a: ArgSpec, t: CLType, env: Mapping[str, Number],
                generated: Mapping[str, Any] | None) -> Any:
        where = f"{a.field}.value"
        if isinstance(a.value, PartRef):
            if generated is None:
                return None
            value: Any = generated[a.value.generator].scalars[a.value.part]
        elif isinstance(a.value, list):
            try:
                value = [evaluate(v, env) for v in a.value]
            except ExprError as e:
                raise FieldError(where, str(e)) from None
        else:
            try:
                value = evaluate(a.value if a.value is not None else 0, env)
            except ExprError as e:
                raise FieldError(where, str(e)) from None
        if not t.is_float:
            vals = value if isinstance(value, list) else [value]
            if any(isinstance(v, float) and v.is_integer() for v in vals):
                vals = [int(v) if isinstance(v, float) and v.is_integer() else v for v in vals]
                value = vals if isinstance(value, list) else vals[0]
        try:
            scalar_value(t, value)
        except ValueError as e:
            raise FieldError(where, str(e)) from None
        return value

    def _buffer(self, a: ArgSpec, t: CLType, env: Mapping[str, Number], n: int,
                generated: Mapping[str, Any] | None) -> tuple[int | None, np.ndarray | None]:
        init = a.init or InitSpec("random")
        count = _nonneg_int(a.count, env, f"{a.field}.count") if a.count is not None else None
        if init.kind == "from":
            assert init.ref is not None
            if generated is None:
                return count, None
            part = np.asarray(generated[init.ref.generator].arrays[init.ref.part]).reshape(-1)
            width = t.storage_width
            if part.size % width:
                raise FieldError(f"{a.field}.init", f"part {init.ref} has {part.size} values, not a whole number "
                                 f"of {a.dtype} ({width} each)")
            have = part.size // width
            if count is not None and count != have:
                raise FieldError(f"{a.field}.count", f"{count} elements declared, but part {init.ref} has {have}")
            return have, _cast(part, t, f"{a.field}.init", f"part {init.ref}")
        assert count is not None
        total = count * t.storage_width
        dt = t.numpy
        if init.kind in ("zeros", "ones"):
            return count, None
        if init.kind == "range":
            return count, None if generated is None else np.arange(total, dtype=np.int64).astype(dt)
        if init.kind == "constant":
            try:
                v = evaluate(init.value if init.value is not None else 0, env)
            except ExprError as e:
                raise FieldError(f"{a.field}.init.constant", str(e)) from None
            one = _cast(np.array([v]), t, f"{a.field}.init.constant", "the constant")
            return count, None if generated is None else np.full(total, one[0], dtype=dt)
        # random
        lo_default, hi_default = (0.0, 1.0) if t.is_float else (0, 100)
        try:
            lo = evaluate(init.low, env) if init.low is not None else lo_default
            hi = evaluate(init.high, env) if init.high is not None else hi_default
        except ExprError as e:
            raise FieldError(f"{a.field}.init.random", str(e)) from None
        if not lo < hi:
            raise FieldError(f"{a.field}.init.random", f"low {lo} must be below high {hi}")
        if generated is None:
            if not t.is_float:
                _cast(np.array([lo, hi - 1]), t, f"{a.field}.init.random", "the range")
            return count, None
        rng = np.random.default_rng(init.seed if init.seed is not None else self._seed("arg", a.name, n))
        data: np.ndarray
        if t.is_float:
            data = rng.random(total) * (hi - lo) + lo
        else:
            data = rng.integers(int(np.ceil(lo)), int(np.ceil(hi)), size=total, dtype=np.int64)
        return count, _cast(data, t, f"{a.field}.init.random", "the range")


@dataclass
class Suite:
    """A loaded, validated manifest."""

    name: str
    version: int
    path: Path
    kernels: list[KernelSpec]
    description: str = ""
    constants: dict[str, Number] = field(default_factory=dict)
    seed: int = 0

    def ids(self) -> list[str]:
        """The kernel ids, in manifest order."""
        return [k.id for k in self.kernels]

    def kernel(self, kid: str) -> KernelSpec:
        for k in self.kernels:
            if k.id == kid:
                return k
        raise KeyError(f"no kernel {kid!r} in suite {self.name!r} (kernels: {', '.join(self.ids())})")

    def select(self, ids: Iterable[str]) -> Suite:
        """A suite with only the given kernel ids (in the manifest's order)."""
        wanted = list(ids)
        for kid in wanted:
            self.kernel(kid)
        return Suite(self.name, self.version, self.path, [k for k in self.kernels if k.id in wanted],
                     self.description, dict(self.constants), self.seed)

    def __len__(self) -> int:
        """Number of instances (kernel, size)."""
        return sum(len(k.sizes) for k in self.kernels)

    def instances(self, ids: Iterable[str] | None = None, sizes: Iterable[int] | None = None
                  ) -> Iterator[BenchInstance]:
        """One :class:`BenchInstance` per (kernel, size), inputs generated on the fly.

        ``ids`` restricts the kernels, ``sizes`` the problem sizes (ones a kernel does not list
        are skipped)."""
        chosen = self.kernels if ids is None else [self.kernel(k) for k in ids]
        only = set(sizes) if sizes is not None else None
        for k in chosen:
            for n in k.sizes:
                if only is None or n in only:
                    for v in range(k.variants):
                        yield k.instance(n, self.name, v)


# -- evaluation helpers ----------------------------------------------------------------------------

def _positive_int(expr: Expr, env: Mapping[str, Number], where: str) -> int:
    try:
        v = evaluate_int(expr, env)
    except ExprError as e:
        raise FieldError(where, str(e)) from None
    if v <= 0:
        raise FieldError(where, f"{expr!r} = {v} is not positive")
    return v


def _nonneg_int(expr: Expr | None, env: Mapping[str, Number], where: str) -> int:
    if expr is None:
        raise FieldError(where, "missing")
    try:
        v = evaluate_int(expr, env)
    except ExprError as e:
        raise FieldError(where, str(e)) from None
    if v < 0:
        raise FieldError(where, f"{expr!r} = {v} is negative")
    return v


def _cast(data: np.ndarray, t: CLType, where: str, what: str) -> np.ndarray:
    """``data`` as the buffer's base dtype; integers must fit."""
    dt = t.numpy
    if dt.kind == "f":
        with np.errstate(over="ignore", invalid="ignore"):
            out = np.ascontiguousarray(data.astype(dt, copy=False))
        if data.size and np.isfinite(data).all() and not np.isfinite(out).all():
            raise FieldError(where, f"{what} overflows {t.base} (largest magnitude {np.abs(data).max():g})")
        return out
    if dt.kind in "iu":
        if data.size:
            info = np.iinfo(dt)
            lo, hi = data.min(), data.max()
            if lo < info.min or hi > info.max:
                raise FieldError(where, f"{what} spans [{lo}, {hi}], outside {t.base} [{info.min}, {info.max}]")
            if np.asarray(data).dtype.kind == "f" and not np.all(np.floor(data) == data):
                raise FieldError(where, f"{what} has non-integer values for a {t.base} buffer")
    return np.ascontiguousarray(data.astype(dt, copy=False))
