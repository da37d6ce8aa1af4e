"""Configuration shared by every stage: cache locations and defaults, from the environment."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """Where kernelcast caches builds and device probes (``KERNELCAST_CACHE`` or ~/.cache/kernelcast)."""
    base = os.environ.get("KERNELCAST_CACHE")
    if base:
        p = Path(base)
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        p = (Path(xdg) if xdg else Path.home() / ".cache") / "kernelcast"
    p.mkdir(parents=True, exist_ok=True)
    return p


def default_device_spec() -> str:
    """The device used when none is given: ``KERNELCAST_DEVICE`` or ``auto``."""
    return os.environ.get("KERNELCAST_DEVICE", "auto")


def device_spec(spec: str | None) -> str:
    """The device a command uses: the one it was given, else :func:`default_device_spec`."""
    return spec or default_device_spec()
