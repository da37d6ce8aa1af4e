"""The bundled corpus of hand-written OpenCL C kernels (datagen/bundled/*.cl).

Every file must build on a working OpenCL device as OpenCL C 1.2, the files together must hold at
least 110 kernels, and kernel names must be unique across files. Each file is built once.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

BUNDLED_DIR = Path(__file__).resolve().parent.parent / "datagen" / "bundled"
CL_FILES = sorted(BUNDLED_DIR.glob("*.cl"))
MIN_KERNELS = 110
BUILD_OPTIONS = "-cl-std=CL1.2"


@pytest.fixture(scope="module")
def built(device):
    """{file name: list of kernel names, or the build log}, every file built once on the
    device the project's own selection picks (conftest fails the run when there is none)."""
    from kernelcast.instrument.backends.opencl import trial_build

    out: dict[str, list[str] | str] = {}
    for path in CL_FILES:
        tb = trial_build(device, path.read_text(), BUILD_OPTIONS)
        out[path.name] = [k for k in tb.program.kernel_names.split(";") if k] if tb.ok else tb.log
    return out


def test_bundled_dir_has_files():
    assert CL_FILES, f"no .cl files in {BUNDLED_DIR}"


@pytest.mark.parametrize("path", CL_FILES, ids=lambda p: p.name)
def test_file_header_and_restrictions(path):
    src = path.read_text()
    first = src.splitlines()[0] if src else ""
    assert first.startswith("//") and "kernelcast" in first, f"{path.name}: missing header comment"
    assert not re.search(r"^\s*#\s*include\b", src, re.M), f"{path.name}: uses #include"
    assert not re.search(r"\bprintf\s*\(", src), f"{path.name}: uses printf"
    assert not re.search(r"\bimage[123]d\w*_t\b|\bsampler_t\b", src), f"{path.name}: uses images"


@pytest.mark.parametrize("path", CL_FILES, ids=lambda p: p.name)
def test_file_compiles(built, path):
    result = built[path.name]
    assert isinstance(result, list), f"{path.name} failed to build:\n{result}"
    assert result, f"{path.name} defines no kernels"


def test_kernel_count_and_unique_names(built):
    failed = [name for name, r in built.items() if not isinstance(r, list)]
    assert not failed, f"files failed to build: {failed}"
    owners: dict[str, list[str]] = {}
    for fname, names in built.items():
        for k in names:
            owners.setdefault(k, []).append(fname)
    dups = {k: v for k, v in owners.items() if len(v) > 1}
    assert not dups, f"kernel names defined more than once: {dups}"
    assert len(owners) >= MIN_KERNELS, f"only {len(owners)} distinct kernels (need >= {MIN_KERNELS})"
