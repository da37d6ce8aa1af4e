"""Can a hub model name be loaded here, without the hub client's retry loop?

Offline, ``from_pretrained("Salesforce/codegen-350M-multi")`` retries for about a minute and prints
dozens of lines before it fails. :func:`hub_unavailable` answers in a few seconds: the model is in
the local cache, or the hub's endpoint answers one request; otherwise it returns the reason.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from pathlib import Path

PROBE_TIMEOUT_S = 5.0


def _cache_dir() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    return Path(home).expanduser() / "hub"


def _cached(name: str) -> bool:
    """A snapshot of ``name`` with its config.json in the local cache (the hub client's layout)."""
    repo = _cache_dir() / f"models--{name.replace('/', '--')}" / "snapshots"
    return any(repo.glob("*/config.json")) if repo.is_dir() else False


def hub_unavailable(name: str, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """None when ``name`` (``owner/repo``) is in the local Hugging Face cache or the hub answers;
    otherwise why it cannot be loaded (one line)."""
    if _cached(name):
        return None
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return "not in the local Hugging Face cache, and HF_HUB_OFFLINE is set"
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    req = urllib.request.Request(f"{endpoint}/api/models/{name}", method="HEAD")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s):    # noqa: S310 - a fixed https endpoint
            return None
    except urllib.error.HTTPError as e:     # the hub answered: it decides (404: no such model)
        if e.code in (401, 404):
            return f"the hub ({endpoint}) has no model {name!r} (HTTP {e.code})"
        return None
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        return (f"not in the local Hugging Face cache, and {endpoint} cannot be reached ({reason}); "
                f"download it where there is a network, or give a local directory")
