"""The kill-and-resume benchmark's comparison (bench/resume.py): planned configurations from
hand-made rows, missing / extra / duplicated against a reference, the kill moments, the process
bookkeeping, and bad input. The timing of a real run is not tested here (tests/test_resume_plan.py
kills and resumes a real datagen)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from kernelcast.bench.resume import (
    compare,
    config_keys,
    descendants,
    kill_fractions,
    kill_moment,
    kill_window,
    main,
    survivors,
)


def _row(kernel: str, pass_: str = "sample", gsize=(256,), lsize=(64,), regime="idle", sweep=False, **kw) -> dict:
    return {"kernel_name": kernel, "selection": "simple", "pass": pass_, "gsize": np.array(gsize),
            "lsize": np.array(lsize), "regime": regime, "sweep": sweep, "remeasure_of": math.nan, **kw}


REFERENCE = [
    _row("a", "validity", regime=None),
    _row("a"), _row("a", gsize=(512,), regime="full"),
    _row("a", "sweep", gsize=(1024,), lsize=(32,), sweep=True),
    _row("b"),
]


def test_config_keys_leave_out_iqr_rows_and_remeasurements() -> None:
    rows = [*REFERENCE, _row("a", "iqr", gsize=(2048,)), _row("a", remeasure_of="k1", remeasure_reason="noise")]
    keys = config_keys(rows)
    assert sum(keys.values()) == 5 and max(keys.values()) == 1
    assert ("a", "simple", "sweep", (1024,), (32,), "idle", True) in keys
    assert ("a", "simple", "validity", (256,), (64,), None, False) in keys


def test_an_equal_resumed_dataset_compares_equal() -> None:
    c = compare(config_keys(REFERENCE), config_keys(list(reversed(REFERENCE))))
    assert c.equal and (c.reference, c.resumed) == (5, 5)
    assert c.missing == c.extra == c.duplicated == []


def test_missing_extra_and_duplicated_configurations() -> None:
    resumed = [REFERENCE[0], REFERENCE[1], REFERENCE[1], REFERENCE[3], REFERENCE[4],
               _row("a", "sweep", gsize=(1024,), lsize=(2048,), sweep=True),     # a local size never planned
               _row("b", regime="under")]                                      # same sizes, another regime
    c = compare(config_keys(REFERENCE), config_keys(resumed))
    assert not c.equal
    assert c.missing == [("a", "simple", "sample", (512,), (64,), "full", False)]
    assert sorted(c.extra) == sorted([("a", "simple", "sweep", (1024,), (2048,), "idle", True),
                                      ("b", "simple", "sample", (256,), (64,), "under", False)])
    assert c.duplicated == [("a", "simple", "sample", (256,), (64,), "idle", False)]


def test_a_reference_with_a_duplicate_is_not_equal() -> None:
    c = compare(config_keys([*REFERENCE, REFERENCE[4]]), config_keys(REFERENCE))
    assert not c.equal and c.reference_duplicated == [("b", "simple", "sample", (256,), (64,), "idle", False)]


def test_kill_moments_are_seeded_fractions_of_each_runs_expected_duration() -> None:
    f = kill_fractions(10, seed=3)
    assert f == kill_fractions(10, seed=3) and f != kill_fractions(10, seed=4)
    assert len(f) == 10 and all(0.0 <= x < 1.0 for x in f)
    assert kill_moment(0.5, 30.0) == 15.0 and kill_moment(0.001, 30.0) == 0.2     # at least 0.2 s
    # start-up 5 s, work 40 s, 30 of 120 planned rows missing, 4 kills left: 2 x 10 s / 4 after 5 s
    assert kill_window(5.0, 40.0, 30, 120, 4) == (5.0, 5.0)
    assert kill_window(5.0, 40.0, 0, 120, 4) == (5.0, 0.0) and kill_window(5.0, 40.0, 120, 0, 1) == (5.0, 80.0)


def test_descendants_and_survivors_of_a_killed_process_group() -> None:
    p = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                          "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"],
                         start_new_session=True)
    try:
        procs: dict[int, str] = {}
        t0 = time.monotonic()
        while len(procs) < 2 and time.monotonic() - t0 < 30:
            time.sleep(0.1)
            procs = descendants(p.pid)
        assert p.pid in procs and len(procs) == 2
        assert sorted(survivors(procs)) == sorted(procs)
    finally:
        os.killpg(p.pid, 9)
        p.wait()
    t0 = time.monotonic()
    while survivors(procs) and time.monotonic() - t0 < 10:
        time.sleep(0.05)
    assert survivors(procs) == []


@pytest.mark.parametrize("argv", [["--kills", "0"], ["--limit", "-1"], ["--span", "nan"], ["--kills", "x"]])
def test_bad_numbers_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and "Traceback" not in capsys.readouterr().err


def test_a_missing_corpus_or_an_existing_work_directory_exits_2(tmp_path, capsys) -> None:
    assert main(["--corpus", str(tmp_path / "nope")]) == 2
    assert main(["--work", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 2 and not any(tmp_path.iterdir())
