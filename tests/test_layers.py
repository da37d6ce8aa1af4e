"""The rules for the layers (a stage imports only from the stages before it; no import cycle), checked by
reading the imports of every module."""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
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


# ---------------------------------------------------------------------------------------------
# the module graph: no import cycle between modules, imports inside functions only for heavy dependencies

#: third-party packages whose import is slow or loads a driver: a function may import them where it needs
#: them, so that the command line and the stages that do not use them start without them
HEAVY = frozenset({
    "torch", "transformers", "tokenizers", "safetensors", "huggingface_hub",   # the learned model
    "lightgbm", "scipy", "matplotlib",
    "pyopencl", "pycuda", "pynvml", "pocl_binary_distribution",               # drivers (and their fakes in tests)
    "kernel_tuner", "ray",                                                     # optional extras
})
#: cycles between modules that are being removed; each entry names the modules of one cycle (a strongly
#: connected component of the graph below). The test fails on any other cycle, on a known one that grew, and
#: on an entry whose cycle is gone (delete the entry then)
KNOWN_CYCLES: frozenset[frozenset[str]] = frozenset()
#: files (path prefixes) whose imports inside functions are not yet checked: each is being reworked
UNCHECKED_FUNCTION_IMPORTS = ("train/", "bench/", "models/analytical", "models/static/", "datagen/ktcache.py",
                              "kernelcast/cli.py", "kernelcast/demo.py", "kernelcast/cuda.py")


@dataclass(frozen=True)
class _Import:
    target: str            # a module of the project (stage name, e.g. ``models.tune``) or a third-party name
    line: int
    in_function: bool
    type_checking: bool    # under ``if TYPE_CHECKING:``
    commented: bool        # a comment on its line or the line above


def _module_files() -> dict[str, Path]:
    out = {}
    for pkg in ORDER:
        for path in (ROOT / pkg).rglob("*.py"):
            rel = path.relative_to(ROOT).with_suffix("")
            out[".".join(p for p in rel.parts if p != "__init__")] = path
    return out


def _project_module(name: str, mods: dict[str, Path]) -> str | None:
    """The longest prefix of ``name`` that is a module of the project."""
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def _imports(mod: str, path: Path, mods: dict[str, Path]) -> list[_Import]:
    text = path.read_text()
    lines = text.splitlines()
    tree = ast.parse(text, filename=str(path))
    out: list[_Import] = []

    def add(name: str, node: ast.stmt, in_function: bool, type_checking: bool) -> None:
        name = _stage_name(name)
        target = _project_module(name, mods) if name.split(".")[0] in ORDER else name
        if target is None or target == mod:
            return
        here = lines[node.lineno - 1]
        above = lines[node.lineno - 2].strip() if node.lineno >= 2 else ""
        out.append(_Import(target, node.lineno, in_function, type_checking, "#" in here or above.startswith("#")))

    def visit(node: ast.AST, in_function: bool, type_checking: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                for a in child.names:
                    add(a.name, child, in_function, type_checking)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
                    parts = parts[:len(parts) - (child.level - 1)]
                    base = ".".join(parts + ([child.module] if child.module else []))
                for a in child.names:       # ``from pkg import module`` imports the module
                    sub = _stage_name(f"{base}.{a.name}")
                    add(f"{base}.{a.name}" if sub in mods else base, child, in_function, type_checking)
            else:
                tc = type_checking or (isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test))
                visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)),
                      tc)

    visit(tree, False, False)
    return out


@functools.lru_cache(maxsize=1)
def _graph() -> tuple[dict[str, Path], dict[str, list[_Import]]]:
    mods = _module_files()
    return mods, {m: _imports(m, p, mods) for m, p in mods.items()}


def _cycles(edges: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[frozenset[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(frozenset(comp))
    return out


def test_cycles_finder_finds_a_known_cycle():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert _cycles(edges) == [frozenset({"a", "b", "c"})]


def test_no_import_cycle_between_modules():
    """Over every import, at module level, inside functions and under TYPE_CHECKING alike: no two modules
    import each other, directly or through others (except the :data:`KNOWN_CYCLES` being removed)."""
    mods, imports = _graph()
    edges = {m: {i.target for i in imps if i.target in mods} for m, imps in imports.items()}
    found = _cycles(edges)
    new = [c for c in found if c not in KNOWN_CYCLES]
    gone = [c for c in KNOWN_CYCLES if c not in found]
    assert not new, "import cycles:\n" + "\n".join(" <-> ".join(sorted(c)) for c in new)
    assert not gone, "no longer a cycle, remove from KNOWN_CYCLES: " + "; ".join(" <-> ".join(sorted(c)) for c in gone)


def _heavy_modules(mods: dict[str, Path], imports: dict[str, list[_Import]]) -> dict[str, str]:
    """The project modules whose import loads a heavy package (through their module-level imports or those
    of the packages that contain them), each with the heavy package."""
    top = {m: [i.target for i in imps if not i.in_function and not i.type_checking] for m, imps in imports.items()}
    for m in mods:                      # importing a.b.c runs a/__init__ and a/b/__init__
        parts = m.split(".")
        top[m] += [p for p in (".".join(parts[:k]) for k in range(1, len(parts))) if p in mods]
    heavy: dict[str, str] = {}
    changed = True
    while changed:
        changed = False
        for m, targets in top.items():
            if m in heavy:
                continue
            for t in targets:
                why = heavy.get(t) if t in mods else (t.split(".")[0] if t.split(".")[0] in HEAVY else None)
                if why:
                    heavy[m] = why
                    changed = True
                    break
    return heavy


def test_function_imports_only_defer_heavy_dependencies():
    """An import inside a function defers a heavy package (:data:`HEAVY`) or a project module that loads one
    at its import, and says so in a comment; every other import is at module level."""
    mods, imports = _graph()
    heavy = _heavy_modules(mods, imports)
    bad = []
    for m, imps in imports.items():
        rel = str(mods[m].relative_to(ROOT))
        if rel.startswith(UNCHECKED_FUNCTION_IMPORTS):
            continue
        for i in imps:
            if not i.in_function:
                continue
            why = heavy.get(i.target) if i.target in mods else (i.target.split(".")[0]
                                                                if i.target.split(".")[0] in HEAVY else None)
            if why is None:
                bad.append(f"{rel}:{i.line}: {i.target} imported inside a function (not a heavy dependency)")
            elif not i.commented:
                bad.append(f"{rel}:{i.line}: {i.target} deferred without a comment saying why ({why})")
    assert not bad, "\n".join(sorted(bad))


def test_heavy_modules_are_found():
    """The learned model loads torch at its import; the analytical model's modules do not."""
    mods, imports = _graph()
    heavy = _heavy_modules(mods, imports)
    assert heavy.get("models.learned.model") == "torch"
    assert heavy.get("models.learned.config") == "torch"       # through models/learned/__init__
    assert "models.tune" not in heavy and "instrument.harness" not in heavy
