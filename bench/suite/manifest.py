"""Benchmark-suite manifests: which kernels to sweep over which problem sizes, with which inputs.

A manifest is a JSON (or, with PyYAML, YAML) document; ``manifest.schema.json`` next to this
module describes it and README.md explains it with examples. :func:`load_manifest` validates
everything it can without a device -- fields, types, expressions at every size, file paths,
the kernel's signature (through libclang) against the declared arguments, generator references
-- and raises one :class:`ManifestError` listing every problem, each naming the kernel id and
the field. :meth:`Suite.instances` then yields one :class:`BenchInstance` per (kernel, size)
with the launch geometry, the argument bindings and the generated input arrays.
"""

from __future__ import annotations

import json
import logging
import os
import re
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench.suite.expr import FUNCTIONS, ExprError, evaluate, evaluate_int, parse_expr
from bench.suite.generators import KINDS, GeneratorError, generate
from instrument.cltypes import CLType, parse_type, scalar_value
from kernelcast.clang import ParseError, kernel_signatures
from kernelcast.schema import ArgBinding, Kernel, LaunchConfig

log = logging.getLogger(__name__)

MANIFEST_VERSION = 1
SCHEMA_PATH = Path(__file__).with_name("manifest.schema.json")

Number = int | float
Expr = str | int | float

TOP_FIELDS = ("$schema", "name", "version", "description", "constants", "seed", "kernels")
KERNEL_FIELDS = ("id", "title", "file", "kernel", "build_options", "defines", "includes", "prelude",
                 "constants", "sizes", "gsize", "lsize", "generators", "args", "notes", "seed")
ARG_FIELDS = ("name", "buffer", "scalar", "local", "count", "init", "value", "notes")
INIT_NAMES = ("random", "range", "zeros", "ones")          # string forms
INIT_OBJECTS = ("random", "constant", "from")              # object forms
RANDOM_FIELDS = ("low", "high", "seed")
_ID_RE = re.compile(r"^[A-Za-z0-9_.\-]+$")
_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_ENV_RE = re.compile(r"\$(\w+)|\$\{(\w+)\}")


# -- errors -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Issue:
    """One problem in a manifest: which kernel (None for the suite), which field, what."""

    kernel: str | None
    field: str
    message: str

    def __str__(self) -> str:
        where = f"kernel {self.kernel!r}: " if self.kernel is not None else ""
        return f"{where}{self.field}: {self.message}"


class ManifestError(ValueError):
    """A manifest with problems; ``issues`` lists each, ``str()`` shows them all."""

    def __init__(self, path: str | Path, issues: list[Issue]):
        self.path = str(path)
        self.issues = list(issues)
        if len(issues) == 1:
            text = f"{self.path}: {issues[0]}"
        else:
            text = f"{self.path}: {len(issues)} problems:\n" + "\n".join(f"  - {i}" for i in issues)
        super().__init__(text)


class FieldError(Exception):
    """Internal: one field of one kernel entry is wrong."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


# -- the parsed manifest ----------------------------------------------------------------------------

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

    def geometry(self, env: Mapping[str, Number]) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
        gs = tuple(_positive_int(e, env, f"gsize[{i}]" if len(self.gsize) > 1 else "gsize")
                   for i, e in enumerate(self.gsize))
        if self.lsize is None:
            return gs, None
        ls = tuple(_positive_int(e, env, f"lsize[{i}]" if len(self.lsize) > 1 else "lsize")
                   for i, e in enumerate(self.lsize))
        for d, (g, loc) in enumerate(zip(gs, ls)):
            if g % loc:
                raise FieldError("lsize", f"local size {loc} does not divide global size {g} in dimension {d}")
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

    def instance(self, n: int, suite: str = "") -> BenchInstance:
        """Everything needed to launch this kernel at problem size ``n`` (generates the inputs)."""
        try:
            env = self.environment(n)
            gsize, lsize = self.geometry(env)
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
                             args=bindings, arrays=arrays, label=f"{self.id} n={n}", env=dict(env), scalars=scalars)

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
        return ArgBinding(a.name, "buffer", a.dtype, count=count, init=init), data

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
                    yield k.instance(n, self.name)


# -- loading and validation -------------------------------------------------------------------------

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


def _is_expr(v: Any) -> bool:
    return isinstance(v, (int, float, str)) and not isinstance(v, bool)


class _Checker:
    """Collects issues while reading a manifest."""

    def __init__(self, path: Path):
        self.path = path
        self.issues: list[Issue] = []

    def add(self, kernel: str | None, field: str, message: str) -> None:
        self.issues.append(Issue(kernel, field, message))

    def unknown(self, kernel: str | None, prefix: str, d: Mapping[str, Any], allowed: Iterable[str]) -> None:
        allowed = tuple(allowed)
        for k in d:
            if k not in allowed:
                self.add(kernel, f"{prefix}{k}", f"unknown field (allowed: {', '.join(allowed)})")

    def expr(self, kernel: str | None, where: str, v: Any) -> bool:
        if not _is_expr(v):
            self.add(kernel, where, f"expected a number or an expression string, got {json.dumps(v)}")
            return False
        if isinstance(v, str):
            try:
                parse_expr(v)
            except ExprError as e:
                self.add(kernel, where, str(e))
                return False
        return True


def read_document(path: str | Path) -> Any:
    """The parsed JSON/YAML document (YAML for .yaml/.yml, which needs PyYAML)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise ManifestError(p, [Issue(None, "file", f"cannot read the manifest: {e.strerror or e}")]) from None
    if p.suffix.lower() in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise ManifestError(p, [Issue(None, "file", "YAML manifests need PyYAML (pip install pyyaml)")]) from None
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise ManifestError(p, [Issue(None, "file", f"not valid YAML: {e}")]) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ManifestError(p, [Issue(None, "file", f"not valid JSON: line {e.lineno} column {e.colno}: {e.msg}")]
                            ) from None


def load_manifest(path: str | Path, *, check_signatures: bool = True) -> Suite:
    """Read and validate a manifest; raise :class:`ManifestError` listing every problem.

    ``check_signatures=False`` skips the libclang comparison of arguments with the kernel's
    parameters (which needs libclang and a parseable source)."""
    p = Path(path).expanduser().resolve()
    return parse_manifest(read_document(p), p, check_signatures=check_signatures)


def parse_manifest(doc: Any, path: str | Path, *, check_signatures: bool = True) -> Suite:
    """Validate an already-parsed manifest document; ``path`` anchors relative file paths."""
    p = Path(path)
    chk = _Checker(p)
    if not isinstance(doc, dict):
        raise ManifestError(p, [Issue(None, "manifest", "the document must be an object with name, version, kernels")])
    chk.unknown(None, "", doc, TOP_FIELDS)
    for req in ("name", "version", "kernels"):
        if req not in doc:
            chk.add(None, req, "missing field")
    name = doc.get("name", "")
    if "name" in doc and not isinstance(name, str):
        chk.add(None, "name", "must be a string")
    if "version" in doc and doc["version"] != MANIFEST_VERSION:
        chk.add(None, "version", f"unsupported version {doc['version']!r} (this reader knows {MANIFEST_VERSION})")
    seed = doc.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        chk.add(None, "seed", "must be a non-negative integer")
        seed = 0
    constants = _suite_constants(chk, doc.get("constants", {}))
    kernels_raw = doc.get("kernels", [])
    kernels: list[KernelSpec] = []
    if "kernels" in doc and (not isinstance(kernels_raw, list) or not kernels_raw):
        chk.add(None, "kernels", "must be a non-empty list")
        kernels_raw = []
    seen: set[str] = set()
    for i, raw in enumerate(kernels_raw):
        spec = _parse_kernel(chk, raw, i, p.parent, constants, seed, seen, check_signatures)
        if spec is not None:
            kernels.append(spec)
    if chk.issues:
        raise ManifestError(p, chk.issues)
    _jsonschema_check(doc, p)
    return Suite(name=name, version=MANIFEST_VERSION, path=p, kernels=kernels,
                 description=str(doc.get("description", "")), constants=constants, seed=seed)


def _suite_constants(chk: _Checker, raw: Any) -> dict[str, Number]:
    out: dict[str, Number] = {}
    if not isinstance(raw, dict):
        chk.add(None, "constants", "must be an object of name -> number or expression")
        return out
    for k, v in raw.items():
        where = f"constants.{k}"
        if not _NAME_RE.match(str(k)) or k in FUNCTIONS or k == "n":
            chk.add(None, where, "not a valid constant name (an identifier, not 'n' or a function name)")
            continue
        if not chk.expr(None, where, v):
            continue
        try:
            out[k] = evaluate(v, out)
        except ExprError as e:
            chk.add(None, where, str(e))
    return out


def _resolve_file(raw: str, base: Path) -> Path:
    missing = [m.group(1) or m.group(2) for m in _ENV_RE.finditer(raw)
               if (m.group(1) or m.group(2)) not in os.environ]
    if missing:
        raise FieldError("file", f"environment variable {missing[0]} in {raw!r} is not set")
    p = Path(os.path.expanduser(os.path.expandvars(raw)))
    return p if p.is_absolute() else (base / p)


def _parse_kernel(chk: _Checker, raw: Any, index: int, base: Path, suite_constants: dict[str, Number],
                  suite_seed: int, seen: set[str], check_signatures: bool) -> KernelSpec | None:
    manifest_path = chk.path
    if not isinstance(raw, dict):
        chk.add(f"#{index}", "kernels", f"entry {index} must be an object")
        return None
    kid = raw.get("id")
    if not isinstance(kid, str) or not _ID_RE.match(kid):
        label = f"#{index}"
        chk.add(label, "id", "missing field" if kid is None else
                f"{kid!r} is not a valid id (letters, digits, _ . -)")
        kid = label
    elif kid in seen:
        chk.add(kid, "id", f"duplicate id (kernel entry {index})")
    seen.add(kid)
    before = len(chk.issues)
    chk.unknown(kid, "", raw, KERNEL_FIELDS)
    for req in ("file", "kernel", "sizes", "gsize", "args"):
        if req not in raw:
            chk.add(kid, req, "missing field")

    # strings
    for f in ("title", "notes", "build_options", "prelude"):
        if f in raw and not isinstance(raw[f], str):
            chk.add(kid, f, "must be a string")
    kname = raw.get("kernel")
    if "kernel" in raw and (not isinstance(kname, str) or not _NAME_RE.match(kname or "")):
        chk.add(kid, "kernel", f"{kname!r} is not a kernel function name")
        kname = None
    kseed = raw.get("seed", 0)
    if not isinstance(kseed, int) or isinstance(kseed, bool) or kseed < 0:
        chk.add(kid, "seed", "must be a non-negative integer")
        kseed = 0

    # source file
    source: str | None = None
    path: Path | None = None
    if "file" in raw:
        if not isinstance(raw["file"], str) or not raw["file"]:
            chk.add(kid, "file", "must be a path (relative to the manifest, or absolute)")
        else:
            try:
                path = _resolve_file(raw["file"], base).resolve()
                source = path.read_text(encoding="utf-8", errors="replace")
            except FieldError as e:
                chk.add(kid, e.field, e.message)
            except FileNotFoundError:
                chk.add(kid, "file", f"file not found: {path}")
            except OSError as e:
                chk.add(kid, "file", f"cannot read {path}: {e.strerror or e}")
    prelude = raw.get("prelude", "") if isinstance(raw.get("prelude", ""), str) else ""
    if source is not None and prelude:
        source = prelude.rstrip("\n") + "\n" + source

    # defines and includes -> build options
    defines: dict[str, Number] = {}
    raw_defines = raw.get("defines", {})
    if not isinstance(raw_defines, dict):
        chk.add(kid, "defines", "must be an object of macro name -> number or expression")
        raw_defines = {}
    for k, v in raw_defines.items():
        where = f"defines.{k}"
        if not _NAME_RE.match(str(k)) or k in FUNCTIONS or k == "n":
            chk.add(kid, where, "not a valid macro name")
        elif k in suite_constants:
            chk.add(kid, where, "shadows a suite constant of the same name")
        elif chk.expr(kid, where, v):
            try:
                defines[k] = evaluate(v, {**suite_constants, **defines})
            except ExprError as e:
                chk.add(kid, where, f"{e} (defines may use suite constants and earlier defines, not n)")
    includes: list[str] = []
    raw_inc = raw.get("includes", [])
    if not isinstance(raw_inc, list) or not all(isinstance(x, str) for x in raw_inc):
        chk.add(kid, "includes", "must be a list of directories")
        raw_inc = []
    for j, inc in enumerate(raw_inc):
        try:
            d = _resolve_file(inc, base).resolve()
        except FieldError as e:
            chk.add(kid, f"includes[{j}]", e.message)
            continue
        if not d.is_dir():
            chk.add(kid, f"includes[{j}]", f"directory not found: {d}")
        includes.append(str(d))
    if path is not None and source is not None and "#include" in source and str(path.parent) not in includes:
        includes.append(str(path.parent))
    user_opts = raw.get("build_options", "") if isinstance(raw.get("build_options", ""), str) else ""
    opts = [f"-D{k}={_fmt_define(v)}" for k, v in defines.items()]
    opts += [user_opts.strip()] if user_opts.strip() else []
    opts += [f"-I {d}" for d in includes]
    build_options = " ".join(opts)

    # kernel constants
    constants: dict[str, Expr] = {}
    raw_consts = raw.get("constants", {})
    if not isinstance(raw_consts, dict):
        chk.add(kid, "constants", "must be an object of name -> number or expression")
        raw_consts = {}
    for k, v in raw_consts.items():
        where = f"constants.{k}"
        if not _NAME_RE.match(str(k)) or k in FUNCTIONS or k == "n":
            chk.add(kid, where, "not a valid constant name (an identifier, not 'n' or a function name)")
        elif k in suite_constants or k in defines:
            chk.add(kid, where, "shadows a suite constant or define of the same name")
        elif chk.expr(kid, where, v):
            constants[k] = v

    # sizes
    sizes: list[int] = []
    raw_sizes = raw.get("sizes")
    if "sizes" in raw:
        if not isinstance(raw_sizes, list) or not raw_sizes:
            chk.add(kid, "sizes", "must be a non-empty list of problem sizes")
        else:
            env0 = {**suite_constants, **defines}
            for j, s in enumerate(raw_sizes):
                if not chk.expr(kid, f"sizes[{j}]", s):
                    continue
                try:
                    v = evaluate_int(s, env0)
                except ExprError as e:
                    chk.add(kid, f"sizes[{j}]", str(e))
                    continue
                if v <= 0:
                    chk.add(kid, f"sizes[{j}]", f"{s!r} = {v} is not a positive problem size")
                elif v in sizes:
                    chk.add(kid, f"sizes[{j}]", f"duplicate size {v}")
                else:
                    sizes.append(v)

    # geometry
    gsize = _geometry_list(chk, kid, "gsize", raw.get("gsize"))
    lsize = None
    if raw.get("lsize") is not None:
        lsize = _geometry_list(chk, kid, "lsize", raw.get("lsize"))
        if gsize and lsize and len(lsize) != len(gsize):
            chk.add(kid, "lsize", f"has {len(lsize)} dimensions, gsize has {len(gsize)}")
            lsize = None

    generators = _parse_generators(chk, kid, raw.get("generators", {}))
    args = _parse_args(chk, kid, raw.get("args"), generators) if "args" in raw else []

    if len(chk.issues) > before:
        return None
    assert path is not None and source is not None and kname is not None
    spec = KernelSpec(id=kid, file=path, kernel=kname, source=source, build_options=build_options, sizes=sizes,
                      gsize=gsize or [], lsize=lsize, args=args, generators=generators, defines=defines,
                      constants=constants, title=raw.get("title", "") or "", notes=raw.get("notes", "") or "",
                      seed=kseed, suite_constants=dict(suite_constants), suite_seed=suite_seed,
                      manifest=manifest_path)
    if check_signatures:
        _check_signature(chk, spec)
    elif not re.search(rf"\b{re.escape(kname)}\s*\(", source):
        chk.add(kid, "kernel", f"no kernel {kname!r} in {path.name}")
    _check_sizes(chk, spec)
    if len(chk.issues) > before:
        return None
    return spec


def _fmt_define(v: Number) -> str:
    if isinstance(v, float) and v.is_integer() and abs(v) < 2**53:
        return str(int(v))
    return repr(v) if isinstance(v, float) else str(v)


def _geometry_list(chk: _Checker, kid: str, name: str, raw: Any) -> list[Expr] | None:
    if raw is None:
        return None
    items = raw if isinstance(raw, list) else [raw]
    if not 1 <= len(items) <= 3:
        chk.add(kid, name, f"must be an expression or a list of 1-3 expressions, got {len(items)}")
        return None
    ok = True
    for j, e in enumerate(items):
        ok &= chk.expr(kid, f"{name}[{j}]" if isinstance(raw, list) else name, e)
    return list(items) if ok else None


def _parse_generators(chk: _Checker, kid: str, raw: Any) -> dict[str, GeneratorSpec]:
    out: dict[str, GeneratorSpec] = {}
    if not isinstance(raw, dict):
        chk.add(kid, "generators", "must be an object of generator id -> {kind: {parameters}}")
        return out
    for gid, body in raw.items():
        where = f"generators.{gid}"
        if not _NAME_RE.match(str(gid)):
            chk.add(kid, where, "not a valid generator id (an identifier)")
            continue
        if not isinstance(body, dict) or len(body) != 1:
            chk.add(kid, where, f"must be one {{kind: {{parameters}}}} with kind one of {', '.join(KINDS)}")
            continue
        (kind, params), = body.items()
        if kind not in KINDS:
            chk.add(kid, where, f"unknown generator kind {kind!r} (one of {', '.join(KINDS)})")
            continue
        if not isinstance(params, dict):
            chk.add(kid, f"{where}.{kind}", "parameters must be an object")
            continue
        gk = KINDS[kind]
        good = True
        for pname, v in params.items():
            p = gk.param(pname)
            if p is None:
                chk.add(kid, f"{where}.{pname}", f"unknown parameter of {kind} "
                        f"(allowed: {', '.join(x.name for x in gk.params)})")
                good = False
            elif p.kind in ("choice", "dtype"):
                if v not in p.choices:
                    chk.add(kid, f"{where}.{pname}", f"{v!r} is not one of {', '.join(p.choices)}")
                    good = False
            elif p.kind == "int_or_choice" and isinstance(v, str) and v in p.choices:
                continue
            elif not chk.expr(kid, f"{where}.{pname}", v):
                good = False
        for p in gk.params:
            if p.required and p.name not in params:
                chk.add(kid, f"{where}.{p.name}", f"missing required parameter of {kind}")
                good = False
        if good:
            out[gid] = GeneratorSpec(gid, kind, dict(params))
    return out


def _parse_ref(chk: _Checker, kid: str, where: str, text: Any, generators: Mapping[str, GeneratorSpec],
               want: str) -> PartRef | None:
    if not isinstance(text, str) or text.count(".") != 1:
        chk.add(kid, where, f"expected 'generator.part', got {json.dumps(text)}")
        return None
    gid, part = text.split(".")
    if gid not in generators:
        known = ", ".join(generators) or "none declared"
        chk.add(kid, where, f"unknown generator {gid!r} (generators: {known})")
        return None
    gk = KINDS[generators[gid].kind]
    parts = gk.array_parts if want == "array" else gk.scalar_parts
    if part not in parts:
        other = gk.scalar_parts if want == "array" else gk.array_parts
        hint = f" ({part!r} is a {'scalar' if want == 'array' else 'array'} part)" if part in other else ""
        chk.add(kid, where, f"unknown {want} part {part!r} of {gk.name} generator {gid!r}{hint} "
                f"(parts: {', '.join(parts)})")
        return None
    return PartRef(gid, part)


def _parse_init(chk: _Checker, kid: str, where: str, raw: Any, generators: Mapping[str, GeneratorSpec]
                ) -> InitSpec | None:
    if isinstance(raw, str):
        if raw not in INIT_NAMES:
            chk.add(kid, where, f"unknown initializer {raw!r} (one of {', '.join(INIT_NAMES)}, or an object "
                    f"with one of {', '.join(INIT_OBJECTS)})")
            return None
        return InitSpec(raw)
    if not isinstance(raw, dict) or len(raw) != 1:
        chk.add(kid, where, f"must be one of {', '.join(INIT_NAMES)} or an object with one key of "
                f"{', '.join(INIT_OBJECTS)}")
        return None
    (kind, body), = raw.items()
    if kind == "from":
        ref = _parse_ref(chk, kid, f"{where}.from", body, generators, "array")
        return InitSpec("from", ref=ref) if ref else None
    if kind == "constant":
        return InitSpec("constant", value=body) if chk.expr(kid, f"{where}.constant", body) else None
    if kind == "random":
        if not isinstance(body, dict):
            chk.add(kid, f"{where}.random", "must be an object with low / high / seed")
            return None
        chk.unknown(kid, f"{where}.random.", body, RANDOM_FIELDS)
        ok = all(chk.expr(kid, f"{where}.random.{f}", body[f]) for f in ("low", "high") if f in body)
        s = body.get("seed")
        if s is not None and (not isinstance(s, int) or isinstance(s, bool) or s < 0):
            chk.add(kid, f"{where}.random.seed", "must be a non-negative integer")
            ok = False
        return InitSpec("random", low=body.get("low"), high=body.get("high"), seed=s) if ok else None
    chk.add(kid, where, f"unknown initializer {kind!r} (objects: {', '.join(INIT_OBJECTS)})")
    return None


def _parse_args(chk: _Checker, kid: str, raw: Any, generators: Mapping[str, GeneratorSpec]) -> list[ArgSpec]:
    out: list[ArgSpec] = []
    if not isinstance(raw, list) or not raw:
        chk.add(kid, "args", "must be a non-empty list of argument bindings")
        return out
    names: set[str] = set()
    for i, a in enumerate(raw):
        where = f"args[{i}]"
        if not isinstance(a, dict):
            chk.add(kid, where, "must be an object")
            continue
        chk.unknown(kid, f"{where}.", a, ARG_FIELDS)
        name = a.get("name")
        if not isinstance(name, str) or not name:
            chk.add(kid, f"{where}.name", "missing field")
            continue
        where = f"args[{i}] ({name})"
        if name in names:
            chk.add(kid, f"{where}.name", "duplicate argument name")
        names.add(name)
        kinds = [k for k in ("buffer", "scalar", "local") if k in a]
        if len(kinds) != 1:
            chk.add(kid, where, "needs exactly one of 'buffer', 'scalar', 'local' (with the element type)")
            continue
        kind = kinds[0]
        dtype = a[kind]
        try:
            parse_type(dtype if isinstance(dtype, str) else "")
        except ValueError as e:
            chk.add(kid, f"{where}.{kind}", str(e) if isinstance(dtype, str) else "must be an OpenCL type name")
            continue
        spec = ArgSpec(name=name, kind=kind, dtype=dtype, notes=str(a.get("notes", "")), index=i)
        wrong = {"buffer": ("value",), "local": ("value", "init"), "scalar": ("count", "init")}[kind]
        for f in wrong:
            if f in a:
                chk.add(kid, f"{where}.{f}", f"not a field of a {kind} argument")
        if kind == "scalar":
            v = a.get("value")
            if "value" not in a:
                chk.add(kid, f"{where}.value", "missing field")
            elif isinstance(v, dict):
                if set(v) != {"from"}:
                    chk.add(kid, f"{where}.value", "an object value must be {\"from\": \"generator.part\"}")
                else:
                    spec.value = _parse_ref(chk, kid, f"{where}.value.from", v["from"], generators, "scalar")
            elif isinstance(v, list):
                if all(chk.expr(kid, f"{where}.value[{j}]", x) for j, x in enumerate(v)):
                    spec.value = list(v)
            elif chk.expr(kid, f"{where}.value", v):
                spec.value = v
        else:
            if kind == "buffer":
                spec.init = _parse_init(chk, kid, f"{where}.init", a.get("init", "random"), generators)
            from_gen = spec.init is not None and spec.init.kind == "from"
            if "count" in a:
                if chk.expr(kid, f"{where}.count", a["count"]):
                    spec.count = a["count"]
            elif not from_gen and not (kind == "buffer" and "init" in a and isinstance(a["init"], dict)
                                       and "from" in a["init"]):
                chk.add(kid, f"{where}.count", "missing field (element count; optional only with init 'from')")
        out.append(spec)
    return out


def _check_signature(chk: _Checker, spec: KernelSpec) -> None:
    """The arguments must match the kernel's parameters: names, kinds and element types."""
    try:
        sigs = kernel_signatures(spec.source, spec.build_options, filename=spec.file.name)
    except ParseError as e:
        chk.add(spec.id, "file", f"does not parse as OpenCL C: {e}")
        return
    except Exception as e:  # noqa: BLE001 - libclang missing or broken: say so, per kernel
        chk.add(spec.id, "file", f"cannot read kernel signatures: {type(e).__name__}: {e}")
        return
    params = sigs.get(spec.kernel)
    if params is None:
        chk.add(spec.id, "kernel", f"no kernel {spec.kernel!r} in {spec.file.name} "
                f"(kernels: {', '.join(sigs) or 'none'})")
        return
    by_name = {a.name: a for a in spec.args}
    pnames = [p.name for p in params]
    for p in params:
        a = by_name.get(p.name)
        if a is None:
            chk.add(spec.id, "args", f"kernel parameter {p.name!r} ({p.kind} {p.dtype}) has no binding")
            continue
        if a.kind != p.kind:
            chk.add(spec.id, a.field, f"bound as a {a.kind}, but the kernel parameter is a "
                    f"{p.kind} ({p.type_spelling})")
            continue
        try:
            declared = parse_type(p.dtype).name
        except ValueError:
            log.debug("%s: parameter %s has type %r; element type not checked", spec.id, p.name, p.dtype)
            continue
        if parse_type(a.dtype).name != declared:
            chk.add(spec.id, f"{a.field}.{a.kind}", f"type {a.dtype!r} does not match the kernel "
                    f"parameter's {declared!r}")
    for a in spec.args:
        if a.name not in pnames:
            chk.add(spec.id, f"{a.field}.name", f"not a parameter of {spec.kernel} "
                    f"(parameters: {', '.join(pnames)})")
    # keep the manifest's bindings in the kernel's parameter order
    order = {nm: i for i, nm in enumerate(pnames)}
    spec.args.sort(key=lambda a: order.get(a.name, len(order)))


def _check_sizes(chk: _Checker, spec: KernelSpec) -> None:
    """Evaluate every expression at every size; report each field once, at its first bad size."""
    reported: set[str] = set()

    def report(e: FieldError, n: int) -> None:
        if e.field not in reported:
            reported.add(e.field)
            chk.add(spec.id, e.field, f"at n={n}: {e.message}")

    for n in spec.sizes:
        try:
            env = spec.environment(n)
        except FieldError as e:
            report(e, n)
            continue
        for part in ("geometry", "generators", *range(len(spec.args))):
            try:
                if part == "geometry":
                    spec.geometry(env)
                elif part == "generators":
                    spec.generator_params(env)
                else:
                    spec._bind_one(spec.args[int(part)], env, n, None)
            except FieldError as e:
                report(e, n)


def _jsonschema_check(doc: Any, path: Path) -> None:
    """Validate against manifest.schema.json when the ``jsonschema`` package is installed."""
    try:
        import jsonschema
    except ImportError:
        return
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    validator = jsonschema.Draft202012Validator(schema)
    issues: list[Issue] = []
    for err in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path)):
        loc = list(err.absolute_path)
        kernel = None
        if len(loc) >= 2 and loc[0] == "kernels" and isinstance(loc[1], int):
            entry = doc["kernels"][loc[1]]
            kernel = entry.get("id", f"#{loc[1]}") if isinstance(entry, dict) else f"#{loc[1]}"
            loc = loc[2:]
        where = ".".join(f"[{x}]" if isinstance(x, int) else str(x) for x in loc).replace(".[", "[") or "manifest"
        issues.append(Issue(kernel, where, f"schema: {err.message}"))
    if issues:
        raise ManifestError(path, issues)

