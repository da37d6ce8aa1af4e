"""Every benchmark script's usage errors are one line on stderr with exit status 2, as the
``kernelcast`` command's are (no argparse usage block, no traceback, nothing written)."""

from __future__ import annotations

import importlib
import pkgutil

import kernelcast.bench as bench_pkg
import pytest


def _scripts() -> list[str]:
    out = []
    for info in pkgutil.iter_modules(bench_pkg.__path__):
        if info.name.startswith("_"):
            continue
        src = importlib.util.find_spec(f"kernelcast.bench.{info.name}")
        if src is not None and src.origin and "def main(" in open(src.origin, encoding="utf-8").read():
            out.append(info.name)
    return sorted(out)


SCRIPTS = _scripts()


def test_the_scripts_are_found():
    assert {"tuning", "gpu_model", "noise", "resume", "validate", "cpu_tuning"} <= set(SCRIPTS)


@pytest.mark.parametrize("name", SCRIPTS)
def test_an_unknown_option_is_one_line_exit_2(name: str, capsys: pytest.CaptureFixture[str], tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    main = importlib.import_module(f"kernelcast.bench.{name}").main
    try:
        rc = main(["--no-such-option"])
    except SystemExit as e:
        rc = e.code
    err = capsys.readouterr().err
    assert rc == 2, name
    # the first problem argparse finds: the unknown option, or a required argument it lacks
    assert len(err.strip().splitlines()) == 1 and err.startswith(f"kernelcast: error: bench.{name}: "), err
    assert "Traceback" not in err and "usage:" not in err
    assert list(tmp_path.iterdir()) == []
