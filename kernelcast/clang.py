"""libclang set-up shared by every stage: parsing OpenCL C and reading kernel signatures.

The libclang wheel ships no OpenCL headers; ``opencl-c-base.h`` is found in the PoCL wheel, in
Debian's clang resource directory, or where ``KERNELCAST_OPENCL_INCLUDE`` points.
"""

from __future__ import annotations

import functools
import glob
import os
import re
from dataclasses import dataclass
from pathlib import Path

import clang.cindex as ci

from kernelcast.errors import KernelcastError


class ParseError(KernelcastError, ValueError):
    """The source could not be parsed as OpenCL C."""


@functools.lru_cache(maxsize=1)
def opencl_include_dir() -> str | None:
    """A directory holding ``opencl-c-base.h``, or ``None``."""
    env = os.environ.get("KERNELCAST_OPENCL_INCLUDE")
    candidates: list[str] = [env] if env else []
    try:
        import pocl_binary_distribution as pbd  # deferred: an optional driver package

        candidates.append(str(Path(pbd.__file__).parent / ".libs" / "share" / "pocl" / "include"))
    except ImportError:
        pass
    candidates += sorted(glob.glob("/usr/lib/llvm-*/lib/clang/*/include"), reverse=True)
    candidates += sorted(glob.glob("/usr/lib/clang/*/include"), reverse=True)
    candidates += ["/usr/include/pocl"]
    for c in candidates:
        if c and os.path.isfile(os.path.join(c, "opencl-c-base.h")):
            return c
    return None


def clang_args(extra: list[str] | None = None, std: str = "CL1.2") -> list[str]:
    args = ["-x", "cl", f"-cl-std={std}", "-Xclang", "-fdeclare-opencl-builtins"]
    inc = opencl_include_dir()
    if inc:
        args += ["-I", inc, "-include", "opencl-c-base.h"]
    return args + (extra or [])


def build_option_defines(build_options: str) -> list[str]:
    """The -D/-I options of an OpenCL build-option string, for libclang."""
    out: list[str] = []
    toks = build_options.split()
    i = 0
    while i < len(toks):
        t = toks[i]
        if t in ("-D", "-I") and i + 1 < len(toks):
            out += [t, toks[i + 1]]
            i += 2
            continue
        if t.startswith(("-D", "-I")):
            out.append(t)
        i += 1
    return out


def parse(source: str, filename: str = "kernel.cl", build_options: str = "") -> ci.TranslationUnit:
    """Parse OpenCL C source; raise :class:`ParseError` on errors."""
    index = ci.Index.create()
    # C++ for OpenCL (the translation of CUDA kernels, kernelcast.cuda) parses with its own standard
    cxx = re.search(r"(?:^|\s)-cl-std=(CLC\+\+\S*)", build_options)
    try:
        tu = index.parse(
            filename,
            args=clang_args(build_option_defines(build_options), std=cxx.group(1) if cxx else "CL1.2"),
            unsaved_files=[(filename, source)],
            options=ci.TranslationUnit.PARSE_DETAILED_PROCESSING_RECORD,
        )
    except ci.TranslationUnitLoadError as e:  # pragma: no cover - libclang internal failure
        raise ParseError(f"libclang could not parse {filename}: {e}") from e
    errors = [d for d in tu.diagnostics if d.severity >= ci.Diagnostic.Error and d.location.file
              and d.location.file.name == filename]
    if errors:
        d = errors[0]
        raise ParseError(f"{filename}:{d.location.line}:{d.location.column}: {d.spelling}")
    return tu


def is_kernel(cursor: ci.Cursor) -> bool:
    """Whether a FUNCTION_DECL is an OpenCL kernel (``__kernel``/``kernel`` before its name)."""
    if cursor.kind != ci.CursorKind.FUNCTION_DECL:
        return False
    for tok in cursor.get_tokens():
        if tok.spelling in ("__kernel", "kernel"):
            return True
        if tok.spelling == cursor.spelling:
            break
    return False


_ADDRESS_SPACES = ("__global", "__constant", "__local", "__private")


@dataclass
class KernelParam:
    """One kernel parameter as the signature declares it."""

    index: int
    name: str
    kind: str            # "buffer" (global/constant pointer), "local" (local pointer), "scalar"
    qualifier: str       # "global", "constant", "local" or "private"
    dtype: str           # element type for pointers, the type for scalars, e.g. "float4", "uint"
    is_const: bool
    type_spelling: str

    @property
    def is_pointer(self) -> bool:
        return self.kind in ("buffer", "local")


def _strip_qualifiers(spelling: str) -> str:
    s = spelling
    for word in (*_ADDRESS_SPACES, "const", "volatile", "restrict", "__restrict", "struct"):
        s = re.sub(rf"\b{re.escape(word)}\b", "", s)
    return " ".join(s.replace("*", " ").split())


_UNSIGNED = {"unsigned char": "uchar", "unsigned short": "ushort", "unsigned int": "uint",
             "unsigned long": "ulong", "unsigned": "uint"}


def _normalize_type(name: str) -> str:
    return _UNSIGNED.get(name, name)


def kernel_params(cursor: ci.Cursor) -> list[KernelParam]:
    """The parameters of a kernel cursor, classified."""
    params: list[KernelParam] = []
    for i, a in enumerate(cursor.get_arguments()):
        t = a.type
        spelling = t.spelling
        if t.kind == ci.TypeKind.POINTER:
            pointee = t.get_pointee()
            ps = pointee.spelling
            if "__local" in ps:
                kind, qual = "local", "local"
            elif "__constant" in ps:
                kind, qual = "buffer", "constant"
            elif "__global" in ps:
                kind, qual = "buffer", "global"
            else:
                kind, qual = "buffer", "private"
            dtype = _normalize_type(_strip_qualifiers(ps))
            is_const = pointee.is_const_qualified() or qual == "constant"
        else:
            kind, qual = "scalar", "private"
            dtype = _normalize_type(_strip_qualifiers(spelling))
            is_const = t.is_const_qualified()
        params.append(KernelParam(i, a.spelling, kind, qual, dtype, is_const, spelling))
    return params


def find_kernels(tu: ci.TranslationUnit, filename: str | None = None) -> dict[str, ci.Cursor]:
    """Kernel definitions in the main file of a translation unit, by name, in source order."""
    out: dict[str, ci.Cursor] = {}
    main = filename or tu.spelling
    for c in tu.cursor.get_children():
        if c.location.file is None or c.location.file.name != main:
            continue
        if is_kernel(c) and c.is_definition():
            out[c.spelling] = c
    return out


def kernel_signatures(source: str, build_options: str = "",
                      filename: str = "kernel.cl") -> dict[str, list[KernelParam]]:
    """Every kernel in ``source`` with its parameters."""
    tu = parse(source, filename, build_options)
    return {name: kernel_params(c) for name, c in find_kernels(tu, filename).items()}
