"""``kernelcast train``: bad input exits 2 with one line; a tiny run prints the metrics table."""

from __future__ import annotations

from kernelcast.train.synthetic import write_synthetic_dataset

import kernelcast.cli as cli


def _error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("kernelcast: error: "), err
    return err[0]


def test_no_such_dataset(tmp_path, capsys):
    assert cli.main(["train", "--data", str(tmp_path / "nope"), "--out", str(tmp_path / "m")]) == 2
    assert "no such dataset" in _error(capsys)


def test_directory_that_is_not_a_dataset(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert cli.main(["train", "--data", str(tmp_path / "empty"), "--out", str(tmp_path / "m")]) == 2
    assert "not a dataset" in _error(capsys)


def test_dataset_without_ok_rows(tmp_path, capsys):
    ds = write_synthetic_dataset(tmp_path / "ds", n_kernels=2, configs_per_kernel=3, status="crash")
    assert cli.main(["train", "--data", str(ds), "--out", str(tmp_path / "m")]) == 2
    assert "no ok rows" in _error(capsys)
    assert not (tmp_path / "m").exists()


def test_energy_target_without_energy(tmp_path, capsys):
    ds = write_synthetic_dataset(tmp_path / "ds", n_kernels=2, configs_per_kernel=3)
    assert cli.main(["train", "--data", str(ds), "--out", str(tmp_path / "m"), "--target", "energy"]) == 2
    assert "no energy" in _error(capsys)
    assert not (tmp_path / "m").exists()


def test_bad_option_values(tmp_path, capsys):
    ds = write_synthetic_dataset(tmp_path / "ds", n_kernels=2, configs_per_kernel=3)
    assert cli.main(["train", "--data", str(ds), "--out", str(tmp_path / "m"), "--epochs", "0"]) == 2
    assert "epochs" in _error(capsys)
    base = str(tmp_path / "no/such/dir")
    assert cli.main(["train", "--data", str(ds), "--out", str(tmp_path / "m"), "--base", base]) == 2
    assert "--base" in _error(capsys)


def test_tiny_run_prints_metrics(tmp_path, capsys):
    ds = write_synthetic_dataset(tmp_path / "ds", n_kernels=3, configs_per_kernel=4)
    rc = cli.main(["train", "--data", str(ds), "--out", str(tmp_path / "m"), "--mode", "efficient", "--epochs", "1",
                   "--quiet", "--profile", "pocl-local"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "MAPE %" in out and "samples/s" in out and "Spearman" in out and "residual log2(measured/analytical)" in out
    assert (tmp_path / "m" / "metrics.json").is_file()
