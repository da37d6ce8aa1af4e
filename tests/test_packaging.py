"""Packaging: the stages install under the kernelcast name and never collide with a user's own
``models/`` or ``train/`` folder."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import kernelcast

try:
    import tomllib
except ImportError:          # Python 3.10
    from pip._vendor import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[1]


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


#: folders of data alone (no ``__init__.py``), listed as packages so that setuptools installs them
DATA_PACKAGES = {"kernelcast.datagen.bundled", "kernelcast.models.bundled.gpu"}


def test_every_package_folder_is_listed():
    listed = set(_pyproject()["tool"]["setuptools"]["packages"])
    found = set(DATA_PACKAGES)
    for top in ("kernelcast", *kernelcast.STAGES):
        for init in (ROOT / top).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT).parts
            found.add(".".join(rel) if top == "kernelcast" else ".".join(("kernelcast", *rel)))
    assert found == listed


def test_stages_map_to_their_folders():
    dirs = _pyproject()["tool"]["setuptools"]["package-dir"]
    assert dirs == {f"kernelcast.{s}": s for s in kernelcast.STAGES}


def test_dependencies_are_ranges():
    deps = _pyproject()["project"]["dependencies"]
    assert deps and not [d for d in deps if "==" in d]


def test_version_flag():
    r = subprocess.run([sys.executable, "-m", "kernelcast", "--version"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == f"kernelcast {kernelcast.__version__}"


@pytest.fixture(scope="module")
def wheel_site(tmp_path_factory) -> Path:
    """kernelcast installed from a wheel built from this checkout, without dependencies, into a folder."""
    site = tmp_path_factory.mktemp("site")
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                        "--no-compile", "--target", str(site), str(ROOT)], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    return site


def test_installed_wheel_holds_the_stages_inside_kernelcast(wheel_site: Path):
    for stage in kernelcast.STAGES:
        assert (wheel_site / "kernelcast" / stage / "__init__.py").is_file(), stage
        assert not (wheel_site / stage).exists(), f"{stage} installed as a top-level package"
    assert (wheel_site / "kernelcast" / "calib" / "profiles" / "a100.json").is_file()
    assert list((wheel_site / "kernelcast" / "datagen" / "bundled").glob("*.cl"))
    assert sorted(p.name for p in (wheel_site / "kernelcast" / "models" / "bundled" / "gpu").iterdir()) == \
        sorted(p.name for p in (ROOT / "models" / "bundled" / "gpu").glob("*.json"))


def test_user_models_folder_does_not_collide(wheel_site: Path, tmp_path: Path):
    """From a working directory with its own models/ and train/, both the user's and kernelcast's load."""
    for own in ("models", "train"):
        (tmp_path / own).mkdir()
        (tmp_path / own / "__init__.py").write_text(f"MINE = {own!r}\n")
    code = ("import models, train, kernelcast.models.analytical as a, kernelcast.train.evaluate as e; "
            "print(models.MINE, train.MINE, a.__name__, e.__name__); "
            "import kernelcast, pathlib; "
            "print(pathlib.Path(a.__file__).is_relative_to(pathlib.Path(kernelcast.__file__).parent))")
    # the working directory first (as `python -c` puts it), then the wheel's folder, then the venv's dependencies
    r = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(1, {str(wheel_site)!r}); " + code],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300,
                       env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.split("\n")
    assert lines[0] == "models train kernelcast.models.analytical kernelcast.train.evaluate"
    assert lines[1] == "True"
