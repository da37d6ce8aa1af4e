"""The documentation: README.md stays a user's page, every relative link resolves, no file points
outside the repository, and the README's quickstart runs as written.

The quickstart test extracts the first ``sh`` block of the README's "Quickstart" section and runs
each command, with ``kernelcast`` replaced by ``sys.executable -m kernelcast`` and the repository
root put first on ``PYTHONPATH`` (so it runs this checkout whether or not it is installed), in a
temporary directory that links the repository folders the commands name (``suites/...``), as a user
runs them from the repository root. The build cache lives in pytest's cache directory, so reruns
reuse builds. ``predict`` and ``evaluate`` run without ``--profile``: on a CPU device with no bundled
profile, the profile they would calibrate on first use is put in place beforehand (a copy of the
bundled ``pocl-local`` profile at the device's cache path), so the test does not spend a calibration;
the commands still resolve and load it as they would their own.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = REPO / "docs"

#: docs pages other branches write; links to them are accepted while they are missing (the list is
#: emptied when those branches are merged)
EXPECTED_MISSING: frozenset[str] = frozenset()

#: code files that still name a path outside the repository, cleaned by their owners (emptied at merge)
PENDING_CLEANUP: frozenset[str] = frozenset()

#: what no file of the project may contain: paths outside the repository (built so that this file
#: does not contain them itself)
OUTSIDE = ("../" + "shared", "/work" + "/")

#: folders that are not part of the project's files (environments, caches, build and run outputs)
SKIP_DIRS = frozenset({".git", ".venv", "venv", "build", "dist", "out", "__pycache__", ".pytest_cache",
                       ".mypy_cache", ".ruff_cache"})

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _markdown_files() -> list[Path]:
    """README.md, CHANGELOG.md, docs/*.md and every other Markdown file of the project."""
    return sorted(p for p in _project_files() if p.suffix == ".md")


def _project_files() -> list[Path]:
    out: list[Path] = []
    for root, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        out.extend(Path(root) / f for f in files if f not in SKIP_DIRS)      # a worktree's .git is a file
    return out


def relative_links(text: str) -> list[str]:
    """The link targets of a Markdown text that point into the repository (no scheme, no bare anchor),
    without their ``#anchor``."""
    targets = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("#"):
            continue
        targets.append(target.split("#", 1)[0])
    return targets


def test_relative_links_finds_only_paths_into_the_repository() -> None:
    text = ("see [a](docs/a.md#x), [b](https://example.org/b.md), [c](#anchor), [d](mailto:x@y.z), "
            "[e](../README.md) and `[f](not a link)`")
    assert relative_links(text) == ["docs/a.md", "../README.md"]


def test_readme_is_at_most_200_lines() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; move detail into docs/"


def test_every_relative_link_resolves() -> None:
    missing = []
    for md in _markdown_files():
        if not md.is_file():
            continue
        for target in relative_links(md.read_text(encoding="utf-8")):
            path = (md.parent / target).resolve()
            rel = path.relative_to(REPO).as_posix() if path.is_relative_to(REPO) else str(path)
            if not path.exists() and rel not in EXPECTED_MISSING:
                missing.append(f"{md.relative_to(REPO)}: {target}")
    assert not missing, "links to files that do not exist: " + "; ".join(missing)


def test_docs_index_lists_every_page() -> None:
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    listed = set(relative_links(index))
    pages = {p.name for p in DOCS.glob("*.md")} - {"README.md"}
    assert pages <= listed, f"docs/README.md does not list {sorted(pages - listed)}"


def test_no_file_points_outside_the_repository() -> None:
    found = []
    for path in _project_files():
        rel = path.relative_to(REPO).as_posix()
        if rel in PENDING_CLEANUP or path.stat().st_size > 4_000_000:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for needle in OUTSIDE:
            if needle in text:
                line = text[:text.index(needle)].count("\n") + 1
                found.append(f"{rel}:{line}: {needle}")
    assert not found, "files that point outside the repository: " + "; ".join(found)


def quickstart_commands(readme: str) -> list[str]:
    """The commands of the first ``sh`` block under the README's "## Quickstart" heading, continuation
    lines joined, comments and blank lines left out."""
    m = re.search(r"^## Quickstart\n(.*?)(?=^## )", readme, re.S | re.M)
    assert m, "README.md has no '## Quickstart' section"
    block = re.search(r"```sh\n(.*?)```", m.group(1), re.S)
    assert block, "the Quickstart section has no ```sh block"
    commands, current = [], ""
    for raw in block.group(1).splitlines():
        line = raw.split(" #", 1)[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        current += line
        if current.strip():
            commands.append(current.strip())
        current = ""
    return commands


def test_quickstart_commands_are_extracted() -> None:
    text = ("## Quickstart\n\n```sh\n# a comment\nkernelcast a --x 1  # why\n"
            "kernelcast b \\\n    --y 2\n```\n\n## Next\n")
    assert quickstart_commands(text) == ["kernelcast a --x 1", "kernelcast b      --y 2"]


def _seed_profile(cache: Path) -> None:
    """Put a profile where a first ``predict`` would cache its quick calibration of a CPU device that
    has no bundled profile (nothing to do for a device with a bundled profile, or a GPU)."""
    from kernelcast.calib.local import cached_profile_path
    from kernelcast.calib.profile import bundled_profile_for, profiles_dir
    from kernelcast.instrument.backends import select_device

    info = select_device("auto")
    if info.type.upper() != "CPU" or bundled_profile_for(info) is not None:
        return
    path = cached_profile_path(info)
    if not path.is_file():
        shutil.copyfile(profiles_dir() / "pocl-local.json", path)
    assert path.parent.is_relative_to(cache)


@pytest.mark.device
def test_quickstart_runs_as_written(tmp_path: Path, request: pytest.FixtureRequest,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    commands = quickstart_commands(README.read_text(encoding="utf-8"))
    assert 1 <= len(commands) <= 5, f"the quickstart has {len(commands)} commands; at most five"
    assert all(c.startswith("kernelcast ") for c in commands), commands

    # pytest's cache keeps the builds between runs; without the cache plugin, a fresh directory
    store = getattr(request.config, "cache", None)
    cache = Path(store.mkdir("kernelcast-quickstart")) if store is not None else tmp_path / "cache"
    monkeypatch.setenv("KERNELCAST_CACHE", str(cache))
    _seed_profile(cache)

    env = dict(os.environ, KERNELCAST_CACHE=str(cache),
               PYTHONPATH=os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]))
    for command in commands:
        argv = shlex.split(command)[1:]
        for arg in argv:                     # repository paths the command names, linked as a checkout has them
            top = arg.split("=", 1)[-1].split("/", 1)[0]
            if "/" in arg and top and (REPO / top).exists() and not (tmp_path / top).exists():
                (tmp_path / top).symlink_to(REPO / top)
        proc = subprocess.run([sys.executable, "-m", "kernelcast", *argv], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, f"{command}\nexit {proc.returncode}\n{proc.stderr[-3000:]}"

    # what the README says the last two commands leave behind
    assert (tmp_path / "qs-data" / "manifest.json").is_file()
    assert (tmp_path / "qs-eval" / "REPORT.md").is_file()
    assert (tmp_path / "qs-eval" / "metrics.json").is_file()
