"""The rules for the layers (../shared/DESIGN.md), checked by reading the imports of every module."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: pipeline order: a stage may import from the stages before it, never after
ORDER = ["kernelcast", "instrument", "datagen", "calib", "models", "train", "bench"]
#: the modules of kernelcast/ that assemble the stages (the command line, its reference page and the demo job)
APP = {"kernelcast.cli", "kernelcast.demo", "kernelcast.__main__", "kernelcast.opencl_check", "kernelcast.commands_doc"}


def _stage_name(module: str) -> str:
    """``kernelcast.models.x`` -> ``models.x``: the stages are installed under the kernelcast name."""
    head, _, rest = module.partition(".")
    if head == "kernelcast" and rest.split(".")[0] in ORDER[1:]:
        return rest
    return module


def _modules() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for pkg in ORDER:
        for path in (ROOT / pkg).rglob("*.py"):
            rel = path.relative_to(ROOT).with_suffix("")
            name = ".".join(p for p in rel.parts if p != "__init__")
            imports: set[str] = set()
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.Import):
                    imports.update(a.name for a in node.names)
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    imports.add(node.module)
            imports = {_stage_name(m) for m in imports}
            out[name] = {m for m in imports if m.split(".")[0] in ORDER}
    return out


def test_stages_import_only_earlier_stages():
    bad = []
    for mod, imports in _modules().items():
        if mod in APP:
            continue
        rank = ORDER.index(mod.split(".")[0])
        for m in imports:
            if ORDER.index(m.split(".")[0]) > rank:
                bad.append(f"{mod} imports {m}")
    assert not bad, "\n".join(sorted(bad))


def test_nothing_imports_the_command_line_assembly():
    bad = [f"{mod} imports {m}" for mod, imports in _modules().items() if mod not in APP
           for m in imports if m in APP]
    assert not bad, "\n".join(sorted(bad))


def test_no_import_cycle_between_packages():
    """With the app modules set aside, the package graph is acyclic (it follows ORDER)."""
    edges: dict[str, set[str]] = {p: set() for p in ORDER}
    for mod, imports in _modules().items():
        if mod in APP:
            continue
        edges[mod.split(".")[0]].update(m.split(".")[0] for m in imports)
    for p in ORDER:
        edges[p].discard(p)
    seen: dict[str, int] = {}

    def visit(p: str, path: list[str]) -> None:
        assert seen.get(p) != 1, f"import cycle: {' -> '.join(path + [p])}"
        if seen.get(p) == 2:
            return
        seen[p] = 1
        for q in edges[p]:
            visit(q, path + [p])
        seen[p] = 2

    for p in ORDER:
        visit(p, [])


def test_raw_pyopencl_only_in_the_backends():
    bad = []
    for pkg in ORDER:
        for path in (ROOT / pkg).rglob("*.py"):
            rel = path.relative_to(ROOT)
            if rel.parts[:2] == ("instrument", "backends"):
                continue
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                if any(n.split(".")[0] == "pyopencl" for n in names):
                    bad.append(str(rel))
    assert not bad, f"pyopencl imported outside instrument/backends: {sorted(set(bad))}"
