"""Reading and validating benchmark-suite manifests into the classes of :mod:`bench.suite.model`.

A manifest is a JSON (or, with PyYAML, YAML) document; README.md explains it with examples.
:func:`load_manifest` checks it in two passes and raises one :class:`ManifestError` listing every
problem, each naming the kernel id and the field:

1. the JSON Schema ``manifest.schema.json`` (:mod:`bench.suite.schema`): structure, field names,
   types, required fields, enumerations, patterns, generator kinds and their parameters;
2. what a schema cannot express, for the parts that passed it: expressions parse and evaluate at
   every size, names neither shadow each other nor the reserved ``n`` and function names, ids and
   argument names are unique, files and include directories exist, the kernel's signature
   (through libclang) matches the declared arguments, generator references name declared
   generators and parts of the right kind, a buffer has a count unless a generator gives it.

:meth:`Suite.instances` then yields one :class:`BenchInstance` per (kernel, size).
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kernelcast.bench.suite.generators import KINDS
from kernelcast.bench.suite.model import (
    ArgSpec,
    Expr,
    FieldError,
    GeneratorSpec,
    InitSpec,
    Issue,
    KernelSpec,
    ManifestError,
    Number,
    PartRef,
    Suite,
)
from kernelcast.bench.suite.schema import JsonPath, schema_problems

from kernelcast.clang import ParseError, kernel_signatures
from kernelcast.cltypes import parse_type
from kernelcast.expr import FUNCTIONS, ExprError, evaluate, evaluate_int, parse_expr

log = logging.getLogger(__name__)

MANIFEST_VERSION = 1
_ID_RE = re.compile(r"^[A-Za-z0-9_.\-]+$")
_ENV_RE = re.compile(r"\$(\w+)|\$\{(\w+)\}")


class _Checker:
    """Collects issues while reading a manifest."""

    def __init__(self, path: Path):
        self.path = path
        self.issues: list[Issue] = []

    def add(self, kernel: str | None, field: str, message: str) -> None:
        self.issues.append(Issue(kernel, field, message))

    def expr(self, kernel: str | None, where: str, v: Expr) -> bool:
        """Whether ``v`` (a number or string, as the schema checked) is a valid expression."""
        if isinstance(v, str):
            try:
                parse_expr(v)
            except ExprError as e:
                self.add(kernel, where, str(e))
                return False
        return True


def _reserved(name: Any) -> bool:
    """Names an expression cannot bind: ``n`` and the function names (and non-strings, from YAML)."""
    return not isinstance(name, str) or name in FUNCTIONS or name == "n"


# -- reading ---------------------------------------------------------------------------------------

def read_document(path: str | Path) -> Any:
    """The parsed JSON/YAML document (YAML for .yaml/.yml, which needs PyYAML)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ManifestError(p, [Issue(None, "file", f"not a text file (byte {e.start} is not UTF-8)")]) from None
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
    problems = schema_problems(doc)
    for pr in problems:
        chk.add(*_locate(doc, pr.path), pr.message)
    top = {pr.path[0] for pr in problems if pr.path}
    if not isinstance(doc, dict) or "constants" in top:     # nothing (else) can be checked
        raise ManifestError(p, chk.issues)
    bad_entries = {pr.path[1] for pr in problems if len(pr.path) >= 2 and pr.path[0] == "kernels"}
    seed = int(doc.get("seed", 0)) if "seed" not in top else 0
    constants = _suite_constants(chk, doc.get("constants", {}))
    kernels: list[KernelSpec] = []
    seen: set[str] = set()
    for i, raw in enumerate(doc["kernels"] if isinstance(doc.get("kernels"), list) else []):
        if i in bad_entries:     # still counts for duplicate ids
            if isinstance(raw, dict) and isinstance(raw.get("id"), str):
                seen.add(raw["id"])
            continue
        spec = _parse_kernel(chk, raw, i, p.parent, constants, seed, seen, check_signatures)
        if spec is not None:
            kernels.append(spec)
    if chk.issues:
        raise ManifestError(p, chk.issues)
    return Suite(name=doc["name"], version=MANIFEST_VERSION, path=p, kernels=kernels,
                 description=doc.get("description", ""), constants=constants, seed=seed)


def _label(entry: Any, index: int) -> str:
    """How issues name a kernel entry: its id, or ``#index`` when it has no valid one."""
    kid = entry.get("id") if isinstance(entry, dict) else None
    return kid if isinstance(kid, str) and _ID_RE.match(kid) else f"#{index}"


def _locate(doc: Any, path: JsonPath) -> tuple[str | None, str]:
    """(kernel label, field) of a JSON path into the document."""
    kernel = None
    loc = list(path)
    if len(loc) >= 2 and loc[0] == "kernels" and isinstance(loc[1], int):
        kernel = _label(doc["kernels"][loc[1]], loc[1])
        loc = loc[2:]
        if not loc:
            return kernel, "entry"
    field = ".".join(f"[{x}]" if isinstance(x, int) else str(x) for x in loc).replace(".[", "[")
    return kernel, field or "manifest"


# -- the checks the schema cannot make -------------------------------------------------------------

def _suite_constants(chk: _Checker, raw: Mapping[str, Expr]) -> dict[str, Number]:
    out: dict[str, Number] = {}
    for k, v in raw.items():
        where = f"constants.{k}"
        if _reserved(k):
            chk.add(None, where, "not a valid constant name ('n' and function names are reserved)")
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


def _parse_kernel(chk: _Checker, raw: dict[str, Any], index: int, base: Path, suite_constants: dict[str, Number],
                  suite_seed: int, seen: set[str], check_signatures: bool) -> KernelSpec | None:
    """One kernel entry that passed the schema."""
    kid: str = raw["id"]
    if kid in seen:
        chk.add(kid, "id", f"duplicate id (kernel entry {index})")
    seen.add(kid)
    before = len(chk.issues)
    kname: str = raw["kernel"]

    # source file
    source: str | None = None
    path: Path | None = None
    try:
        path = _resolve_file(raw["file"], base).resolve()
        source = path.read_text(encoding="utf-8", errors="replace")
    except FieldError as e:
        chk.add(kid, e.field, e.message)
    except FileNotFoundError:
        chk.add(kid, "file", f"file not found: {path}")
    except OSError as e:
        chk.add(kid, "file", f"cannot read {path}: {e.strerror or e}")
    prelude = raw.get("prelude", "")
    if source is not None and prelude:
        source = prelude.rstrip("\n") + "\n" + source

    # defines and includes -> build options
    defines: dict[str, Number] = {}
    for k, v in raw.get("defines", {}).items():
        where = f"defines.{k}"
        if _reserved(k):
            chk.add(kid, where, "not a valid macro name ('n' and function names are reserved)")
        elif k in suite_constants:
            chk.add(kid, where, "shadows a suite constant of the same name")
        elif chk.expr(kid, where, v):
            try:
                defines[k] = evaluate(v, {**suite_constants, **defines})
            except ExprError as e:
                chk.add(kid, where, f"{e} (defines may use suite constants and earlier defines, not n)")
    includes: list[str] = []
    for j, inc in enumerate(raw.get("includes", [])):
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
    user_opts = raw.get("build_options", "")
    opts = [f"-D{k}={_fmt_define(v)}" for k, v in defines.items()]
    opts += [user_opts.strip()] if user_opts.strip() else []
    opts += [f"-I {d}" for d in includes]
    build_options = " ".join(opts)

    # kernel constants
    constants: dict[str, Expr] = {}
    for k, v in raw.get("constants", {}).items():
        where = f"constants.{k}"
        if _reserved(k):
            chk.add(kid, where, "not a valid constant name ('n' and function names are reserved)")
        elif k in suite_constants or k in defines:
            chk.add(kid, where, "shadows a suite constant or define of the same name")
        elif chk.expr(kid, where, v):
            constants[k] = v

    # sizes
    sizes: list[int] = []
    env0 = {**suite_constants, **defines}
    for j, s in enumerate(raw["sizes"]):
        if not chk.expr(kid, f"sizes[{j}]", s):
            continue
        try:
            n = evaluate_int(s, env0)
        except ExprError as e:
            chk.add(kid, f"sizes[{j}]", str(e))
            continue
        if n <= 0:
            chk.add(kid, f"sizes[{j}]", f"{s!r} = {n} is not a positive problem size")
        elif n in sizes:
            chk.add(kid, f"sizes[{j}]", f"duplicate size {n}")
        else:
            sizes.append(n)

    # geometry
    gsize = _geometry_list(chk, kid, "gsize", raw["gsize"])
    lsize = None
    if raw.get("lsize") is not None:
        lsize = _geometry_list(chk, kid, "lsize", raw["lsize"])
        if gsize and lsize and len(lsize) != len(gsize):
            chk.add(kid, "lsize", f"has {len(lsize)} dimensions, gsize has {len(gsize)}")
            lsize = None
    lsizes = None
    if raw.get("lsizes") is not None:
        if raw.get("lsize") is not None:
            chk.add(kid, "lsizes", "give either lsize or lsizes (a sweep of local sizes), not both")
        lsizes = []
        for j, item in enumerate(raw["lsizes"]):
            one = _geometry_list(chk, kid, f"lsizes[{j}]", item)
            if gsize and one and len(one) != len(gsize):
                chk.add(kid, f"lsizes[{j}]", f"has {len(one)} dimensions, gsize has {len(gsize)}")
            elif one:
                lsizes.append(one)

    generators = _parse_generators(chk, kid, raw.get("generators", {}))
    args = _parse_args(chk, kid, raw["args"], generators)

    if len(chk.issues) > before:
        return None
    assert path is not None and source is not None
    spec = KernelSpec(id=kid, file=path, kernel=kname, source=source, build_options=build_options, sizes=sizes,
                      gsize=gsize or [], lsize=lsize, args=args, generators=generators, defines=defines,
                      constants=constants, title=raw.get("title", ""), notes=raw.get("notes", ""),
                      seed=int(raw.get("seed", 0)), suite_constants=dict(suite_constants), suite_seed=suite_seed,
                      manifest=chk.path, lsizes=lsizes or None)
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


def _geometry_list(chk: _Checker, kid: str, name: str, raw: Expr | list[Expr]) -> list[Expr] | None:
    items = raw if isinstance(raw, list) else [raw]
    ok = True
    for j, e in enumerate(items):
        ok &= chk.expr(kid, f"{name}[{j}]" if isinstance(raw, list) else name, e)
    return list(items) if ok else None


def _parse_generators(chk: _Checker, kid: str, raw: Mapping[str, Any]) -> dict[str, GeneratorSpec]:
    out: dict[str, GeneratorSpec] = {}
    for gid, body in raw.items():
        (kind, params), = body.items()
        gk = KINDS[kind]
        good = True
        for pname, v in params.items():
            p = gk.param(pname)
            assert p is not None, f"manifest.schema.json and bench.suite.generators disagree on {kind}.{pname}"
            if p.kind in ("choice", "dtype") or (p.kind == "int_or_choice" and isinstance(v, str) and v in p.choices):
                continue
            if not chk.expr(kid, f"generators.{gid}.{pname}", v):
                good = False
        if good:
            out[gid] = GeneratorSpec(gid, kind, dict(params))
    return out


def _parse_ref(chk: _Checker, kid: str, where: str, text: str, generators: Mapping[str, GeneratorSpec],
               want: str) -> PartRef | None:
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


def _parse_init(chk: _Checker, kid: str, where: str, raw: str | dict[str, Any],
                generators: Mapping[str, GeneratorSpec]) -> InitSpec | None:
    if isinstance(raw, str):
        return InitSpec(raw)
    (kind, body), = raw.items()
    if kind == "from":
        ref = _parse_ref(chk, kid, f"{where}.from", body, generators, "array")
        return InitSpec("from", ref=ref) if ref else None
    if kind == "constant":
        return InitSpec("constant", value=body) if chk.expr(kid, f"{where}.constant", body) else None
    ok = all(chk.expr(kid, f"{where}.random.{f}", body[f]) for f in ("low", "high") if f in body)
    seed = int(body["seed"]) if "seed" in body else None
    return InitSpec("random", low=body.get("low"), high=body.get("high"), seed=seed) if ok else None


def _parse_args(chk: _Checker, kid: str, raw: list[dict[str, Any]], generators: Mapping[str, GeneratorSpec]
                ) -> list[ArgSpec]:
    out: list[ArgSpec] = []
    names: set[str] = set()
    for i, a in enumerate(raw):
        name: str = a["name"]
        where = f"args[{i}] ({name})"
        if name in names:
            chk.add(kid, f"{where}.name", "duplicate argument name")
        names.add(name)
        kind = next(k for k in ("buffer", "scalar", "local") if k in a)
        spec = ArgSpec(name=name, kind=kind, dtype=a[kind], notes=a.get("notes", ""), index=i,
                       reset_each_run=bool(a.get("reset_each_run", False)))
        if kind == "scalar":
            v = a["value"]
            if isinstance(v, dict):
                spec.value = _parse_ref(chk, kid, f"{where}.value.from", v["from"], generators, "scalar")
            elif isinstance(v, list):
                if all(chk.expr(kid, f"{where}.value[{j}]", x) for j, x in enumerate(v)):
                    spec.value = list(v)
            elif chk.expr(kid, f"{where}.value", v):
                spec.value = v
        else:
            if kind == "buffer":
                spec.init = _parse_init(chk, kid, f"{where}.init", a.get("init", "random"), generators)
            from_gen = isinstance(a.get("init"), dict) and "from" in a["init"]
            if "count" in a:
                if chk.expr(kid, f"{where}.count", a["count"]):
                    spec.count = a["count"]
            elif not from_gen:
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
                    for v in range(spec.variants):
                        spec.geometry(env, v)
                elif part == "generators":
                    spec.generator_params(env)
                else:
                    spec._bind_one(spec.args[int(part)], env, n, None)
            except FieldError as e:
                report(e, n)
