"""The shared analysis cache keys its entries by the static analysis's version: an entry an older
analysis wrote is analysed again, never read back as current features."""

from __future__ import annotations

import json
from pathlib import Path

from kernelcast.models.static import batch

SRC = "__kernel void k(__global float* o) { o[get_global_id(0)] = 1.0f; }"


def test_an_entry_of_another_analysis_version_is_stale(tmp_path: Path):
    key, entry = batch._analyze(("ab12", SRC, "k", "opencl", ""))
    assert entry["analysis_version"] == batch.ANALYSIS_VERSION and entry["features"] is not None
    batch._write_entry(tmp_path, key, entry)
    assert batch._cached(tmp_path, key)
    assert key in batch.load_analyses(tmp_path, [key])
    old = dict(entry, analysis_version=batch.ANALYSIS_VERSION - 1)
    batch._write_entry(tmp_path, key, old)
    assert not batch._cached(tmp_path, key)
    assert batch.load_analyses(tmp_path, [key]) == {}
    del old["analysis_version"]          # written before the analysis had a version
    (tmp_path / key[:2] / f"{key}.json").write_text(json.dumps(old), encoding="utf-8")
    assert not batch._cached(tmp_path, key)
    assert batch.load_analyses(tmp_path, [key]) == {}
