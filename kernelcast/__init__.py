"""kernelcast: GPU kernel performance/energy datasets, analytical and learned models, benchmarks.

The pipeline's stages are subpackages: ``kernelcast.datagen``, ``kernelcast.instrument``,
``kernelcast.models``, ``kernelcast.calib``, ``kernelcast.train`` and ``kernelcast.bench``. In the
repository they are folders beside this one; an installed wheel holds them inside this package
(setuptools' ``package-dir`` in pyproject.toml), so a user's own ``models/`` or ``train/`` never
collides with them.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

__version__ = "0.1.0"

STAGES = ("datagen", "instrument", "models", "calib", "train", "bench")


class _CheckoutStages(importlib.abc.MetaPathFinder):
    """Finds ``kernelcast.<stage>`` in the stage folders of a source checkout (run without an install,
    with PYTHONPATH at the checkout, as the harness's worker processes are)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        head, _, stage = fullname.partition(".")
        if head != __name__ or stage not in STAGES:
            return None
        init = self.root / stage / "__init__.py"
        if not init.is_file():
            return None
        return importlib.util.spec_from_file_location(fullname, init,
                                                      submodule_search_locations=[str(init.parent)])


def _map_checkout() -> None:
    here = Path(__file__).resolve().parent
    root = here.parent
    if (here / "models").is_dir() or not (root / "pyproject.toml").is_file():
        return            # installed: the stages are subfolders of this package
    if not any(isinstance(f, _CheckoutStages) and f.root == root for f in sys.meta_path):
        sys.meta_path.insert(0, _CheckoutStages(root))


_map_checkout()
