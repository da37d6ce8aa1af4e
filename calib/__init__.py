"""Device calibration: microbenchmarks that produce a device profile.

* :mod:`calib.kernels`: the OpenCL C microbenchmarks (peak rate per operation class, streaming
  read, pointer chasing, launch / work-group / barrier overheads) and the work each one does.
* :mod:`calib.microbench`: :class:`~calib.microbench.Calibrator` runs them through the isolated
  harness (``instrument.harness.Harness``, or anything with its ``run`` method) and fills a
  profile; with an energy meter it also fits per-operation and per-access energies (Delestrac et
  al. eq. 4), the power law of busy compute units and the transient ratio (FlipFlop Alg. 3).
  The benchmarks are split by what they measure, one way: :mod:`calib.bench_runner` (options,
  shared state, one measurement) <- :mod:`calib.compute_bench` and :mod:`calib.memory_bench` <-
  :mod:`calib.energy_bench` <- :mod:`calib.microbench` (the driver).
* :mod:`calib.fits`: linear regression, the power law ``alpha n^beta + delta``, plateau
  (cache-level) detection; numpy only.
* :mod:`calib.profile`: :class:`~calib.profile.DeviceProfile` (JSON, versioned), every value with
  units, source and r^2; :func:`~calib.profile.load_profile` also loads the bundled published
  profiles in ``calib/profiles`` (``"v100"``, ``"a100"``, ``"h100"``, ``"rtx4090"``, ...).
* :mod:`calib.cli`: ``kernelcast calib --out PROFILE.json [--quick]`` (``calib.cli.add_parser``),
  also ``python -m kernelcast.calib.cli``.
"""

from kernelcast.calib.profile import DeviceProfile, ProfileError, ProfileValue, bundled_profiles, load_profile

__all__ = ["DeviceProfile", "ProfileError", "ProfileValue", "bundled_profiles", "load_profile"]
