"""``dataset check|repair``: damaged shards, manifest, journal lines and kernel sources are named,
quarantined (never deleted), every good row is kept, and a rerun re-adds exactly what was lost."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kernelcast.datagen.dataset import DatasetDamaged, DatasetWriter, read_dataset, row_key
from kernelcast.datagen.integrity import check_dataset, repair_dataset

from kernelcast import cli


def _rows(n: int) -> list[dict]:
    return [{"row_key": row_key(f"k{i // 4}", (64 * (i % 4 + 1),), (16,), []), "kernel_id": f"k{i // 4}",
             "gsize": [64 * (i % 4 + 1)], "status": "ok", "time_median_us": float(i + 1), "seed": 0} for i in range(n)]


def _dataset(root: Path, rows: list[dict], shard_rows: int = 5) -> Path:
    with DatasetWriter(root, {"kind": "kernelcast-dataset", "seed": 0}, shard_rows=shard_rows) as w:
        for r in rows:
            w.append(r)
    return root


def test_healthy_dataset_checks_clean(tmp_path: Path) -> None:
    ds = _dataset(tmp_path / "ds", _rows(12))
    rep = check_dataset(ds)
    assert rep.ok and rep.rows == 12 and rep.shards == 3      # 5 + 5 + 2 (the close compacts the rest)
    assert repair_dataset(ds).rows_kept == 12
    assert not (ds / "quarantine").exists()


def test_damaged_shard_is_quarantined_and_a_rerun_restores_it(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rows = _rows(12)
    ds = _dataset(tmp_path / "ds", rows)
    shard = ds / "shards" / "part-00001.parquet"
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 2])                 # truncated, as by a full disk
    with pytest.raises(DatasetDamaged, match="part-00001.parquet"):
        read_dataset(ds)
    # the summary and datagen's writer refuse it with one line pointing to repair, writing nothing
    manifest_before = (ds / "manifest.json").read_bytes()
    assert cli.main(["dataset", str(ds)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "dataset repair" in err[0] and "part-00001.parquet" in err[0]
    with pytest.raises(DatasetDamaged):
        DatasetWriter(ds, {"kind": "kernelcast-dataset", "seed": 0})
    assert (ds / "manifest.json").read_bytes() == manifest_before

    assert cli.main(["dataset", "check", str(ds)]) == 1
    out = capsys.readouterr().out
    assert "shards/part-00001.parquet" in out and "2 readable shard(s) with 7 rows" in out     # 5 + 2

    rep = repair_dataset(ds)
    assert rep.rows_kept == 7                                  # rows 0-4 and 10-11
    assert rep.moved == ["shards/part-00001.parquet"]
    moved = Path(rep.quarantine) / "shards" / "part-00001.parquet"
    assert moved.read_bytes() == data[: len(data) // 2]        # moved, not deleted
    assert check_dataset(ds).ok
    kept = read_dataset(ds)
    assert sorted(kept["time_median_us"]) == [1.0, 2.0, 3.0, 4.0, 5.0, 11.0, 12.0]

    # a rerun appends every row: exactly the 5 lost ones are new
    with DatasetWriter(ds, {"kind": "kernelcast-dataset", "seed": 0}, shard_rows=5) as w:
        added = [r["time_median_us"] for r in rows if w.append(r)]
    assert added == [6.0, 7.0, 8.0, 9.0, 10.0]
    assert len(read_dataset(ds)) == 12


def test_damaged_journal_lines_and_manifest(tmp_path: Path) -> None:
    ds = _dataset(tmp_path / "ds", _rows(5), shard_rows=100)   # all 5 rows end in one shard on close
    journal = ds / "journal.jsonl"
    good = [json.dumps(r) for r in _rows(8)[5:]]
    journal.write_text(good[0] + "\n" + "{torn line\n" + good[1] + "\n\x00\x01garbage\n" + good[2][:20])
    (ds / "manifest.json").write_text("{ not json")
    rep = check_dataset(ds)
    kinds = {d.what: d for d in rep.damage}
    assert set(kinds) == {"manifest", "journal"}
    assert kinds["journal"].lines == [2, 4, 5]
    assert rep.rows == 5 + 2
    fixed = repair_dataset(ds)
    assert fixed.manifest_rebuilt and fixed.journal_lines_dropped == 3 and fixed.rows_kept == 7
    q = Path(fixed.quarantine)
    assert (q / "manifest.json").read_text() == "{ not json"
    assert "{torn line" in (q / "journal.jsonl").read_text()
    m = json.loads((ds / "manifest.json").read_text())
    assert m["kind"] == "kernelcast-dataset" and m["seed"] == 0
    assert check_dataset(ds).ok


def test_damaged_kernel_sources_are_quarantined(tmp_path: Path) -> None:
    ds = _dataset(tmp_path / "ds", _rows(3))
    (ds / "kernels").mkdir()
    (ds / "kernels" / "kernels.jsonl").write_bytes(b'{"name": "k", "source": "x"}\n{broken\n')
    rep = check_dataset(ds)
    assert [d.what for d in rep.damage] == ["kernels"] and "line 2" in rep.damage[0].detail
    fixed = repair_dataset(ds)
    assert (Path(fixed.quarantine) / "kernels" / "kernels.jsonl").is_file()
    assert not (ds / "kernels" / "kernels.jsonl").exists()
    assert fixed.rows_kept == 3


def test_rows_without_a_manifest_are_damage_not_a_new_dataset(tmp_path: Path) -> None:
    ds = _dataset(tmp_path / "ds", _rows(3))
    (ds / "manifest.json").unlink()
    with pytest.raises(DatasetDamaged, match="rows but no manifest"):
        DatasetWriter(ds, {"kind": "kernelcast-dataset", "seed": 0})
    assert not (ds / "manifest.json").exists()
    assert repair_dataset(ds).manifest_rebuilt
    assert len(read_dataset(ds)) == 3
