"""calib: profile JSON, fits, the whole calibration against a fake harness with known answers
(time and energy), and a few real microbenchmarks on the local OpenCL device."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np
import pytest
from kernelcast.calib import kernels as K
from kernelcast.calib.fits import (
    find_plateaus,
    flat_run,
    join_fit,
    join_time,
    linear_fit,
    power_law_fit,
    r_squared,
    unrolled_group_size,
)
from kernelcast.calib.microbench import WG_COUNTS, CalibOptions, Calibrator, size_ladder
from kernelcast.calib.profile import (
    Curve,
    DeviceIdentity,
    DeviceProfile,
    ProfileError,
    ProfileValue,
    bundled_profiles,
    load_profile,
)
from kernelcast.instrument.backends import DeviceInfo
from kernelcast.instrument.runner import TimingPolicy

from kernelcast.schema import ArgBinding, Kernel, LaunchConfig, Measurement, TimeStats

KiB, MiB = 1024, 1024 * 1024

# ---------------------------------------------------------------------------------------------
# profile


def _profile() -> DeviceProfile:
    p = DeviceProfile(DeviceIdentity(name="dev", vendor="v", compute_units=4, wg_multiple=32, max_clock_mhz=1000))
    p.set("dram_bw_gbs", 123.5, "GB/s", "measured: calib bandwidth on 2025-01-01", r2=None, notes="n")
    p.set("wg_overhead_us", 0.05, "us", "measured: calib wg on 2025-01-01", r2=0.999)
    p.set("compute_units", 108, "count", "NVIDIA A100 datasheet (2020)")
    p.curves["bandwidth_vs_working_set"] = Curve([1.0, 2.0], [3.0, 4.0], "B", "GB/s", "measured")
    p.notes.append("hello")
    return p


def test_profile_json_round_trip(tmp_path):
    p = _profile()
    path = p.save(tmp_path / "p.json")
    q = DeviceProfile.load(path)
    assert q.to_dict() == p.to_dict()
    assert q.get("dram_bw_gbs") == 123.5
    assert q.get("missing") is None and q.get("missing", 7.0) == 7.0
    assert q.entry("wg_overhead_us").r2 == 0.999
    assert isinstance(q.get("compute_units"), int)
    assert "dram_bw_gbs" in q and not q.has_energy
    assert q.curves["bandwidth_vs_working_set"].y == [3.0, 4.0]
    assert not list(tmp_path.glob(".p.json.tmp*"))   # atomic write leaves no temporary
    assert DeviceProfile.from_json(p.to_json()).to_dict() == p.to_dict()


@pytest.mark.parametrize("mutate,msg", [
    (lambda d: d.pop("schema_version"), "schema_version"),
    (lambda d: d.__setitem__("schema_version", 99), "newer"),
    (lambda d: d.pop("device"), "device"),
    (lambda d: d["values"]["dram_bw_gbs"].pop("units"), "units"),
    (lambda d: d["values"]["dram_bw_gbs"].__setitem__("value", "fast"), "finite number"),
    (lambda d: d["curves"]["bandwidth_vs_working_set"]["y"].append(1.0), "2 x values"),
])
def test_profile_rejects_bad_files(tmp_path, mutate, msg):
    d = _profile().to_dict()
    mutate(d)
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(d))
    with pytest.raises(ProfileError, match=msg):
        DeviceProfile.load(f)


def test_profile_errors_are_one_line(tmp_path):
    f = tmp_path / "x.json"
    f.write_text("{not json")
    with pytest.raises(ProfileError) as e:
        DeviceProfile.load(f)
    assert "\n" not in str(e.value) and "x.json" in str(e.value)
    with pytest.raises(ProfileError, match="cannot read"):
        DeviceProfile.load(tmp_path / "nope.json")
    with pytest.raises(ProfileError, match="bundled"):
        load_profile("no-such-gpu")


def test_bundled_profiles_cite_their_sources():
    names = bundled_profiles()
    for want in ("v100", "a100", "h100", "rtx4090"):
        assert want in names
    for name in names:
        p = load_profile(name)
        assert p.values, name
        for k, v in p.values.items():
            assert v.units and v.source, (name, k)
            if p.kind == "published":
                assert not v.source.startswith("measured"), (name, k)
    a100 = load_profile("a100")
    assert a100.get("compute_units") == 108
    assert a100.get("warp_size") == 32
    for level, pj in (("shared", 82.1), ("l1", 107), ("l2", 368), ("dram", 2090)):
        v = a100.entry(f"energy_per_sector_{level}_pj")
        assert v is not None and v.value == pytest.approx(pj) and "Delestrac" in v.source
    assert load_profile("h100").get("peak_fp32_gflops") > load_profile("v100").get("peak_fp32_gflops")


# ---------------------------------------------------------------------------------------------
# fits


def test_linear_fit_recovers_slope_and_intercept():
    rng = np.random.default_rng(1)
    x = np.linspace(1e6, 1e8, 12)
    y = 2.09e-9 * x + 0.35 + rng.normal(0, 1e-3, x.size)     # Delestrac-like: J per access + offset
    f = linear_fit(x, y)
    assert f.slope == pytest.approx(2.09e-9, rel=1e-3)
    assert f.intercept == pytest.approx(0.35, abs=2e-3)
    assert f.r2 > 0.9999 and f.n == 12
    assert linear_fit([0, 1, 2], [1, 1, 1]).r2 == 1.0
    with pytest.raises(ValueError):
        linear_fit([1, 1], [2, 3])


@pytest.mark.parametrize("alpha,beta,delta", [(30.0, 0.7, 60.0), (5.0, 1.4, 20.0), (80.0, 0.3, 40.0)])
def test_power_law_fit_recovers_parameters(alpha, beta, delta):
    rng = np.random.default_rng(2)
    n = np.arange(1, 41, dtype=float)
    p = alpha * n**beta + delta
    f = power_law_fit(n, p)
    assert (f.alpha, f.beta, f.delta) == pytest.approx((alpha, beta, delta), rel=1e-4)
    assert f.r2 == pytest.approx(1.0)
    noisy = p * (1 + rng.normal(0, 0.003, n.size))
    g = power_law_fit(n, noisy)
    assert g.beta == pytest.approx(beta, rel=0.06)
    assert g.r2 > 0.99
    assert float(g(10.0)) == pytest.approx(alpha * 10**beta + delta, rel=0.01)
    with pytest.raises(ValueError):
        power_law_fit([1, 2, 2], [1, 2, 2])


def test_r_squared_bounds():
    assert r_squared([1, 2, 3], [1, 2, 3]) == 1.0
    assert r_squared([1, 2, 3], [2, 2, 2]) == pytest.approx(0.0)


def _steps(sizes, levels):
    """Value of the first level whose capacity holds the size."""
    return np.array([next(v for cap, v in levels if s <= cap) for s in sizes], dtype=float)


def test_plateaus_find_cache_levels_with_noise_and_transitions():
    rng = np.random.default_rng(3)
    sizes = np.array(size_ladder(16 * KiB, 256 * MiB, fine_until=16 * MiB, fine=math.sqrt(2), coarse=2.0))
    bw = _steps(sizes, [(64 * KiB, 800.0), (4 * MiB, 300.0), (math.inf, 100.0)])
    bw[0] = 200.0                                   # too few work-items at the smallest set
    i = int(np.searchsorted(sizes, 4 * MiB)) + 1    # a transition point between two levels
    bw[i] = 180.0
    j = int(np.searchsorted(sizes, 512 * KiB))
    bw[j] *= 1.8                                    # an isolated outlier inside a level
    bw *= 1 + rng.normal(0, 0.03, bw.size)
    pl = find_plateaus(sizes, bw, min_step=1.35)
    assert [round(p.value, -1) for p in pl] == pytest.approx([800, 300, 100], rel=0.05)
    assert pl[0].x_hi == 64 * KiB and pl[1].x_hi == 4 * MiB
    assert pl[-1].x_hi == sizes[-1]


def test_plateaus_of_an_increasing_latency_curve():
    sizes = np.array([2.0**b * 64 for b in range(8, 23)])
    lat = _steps(sizes, [(32 * KiB, 1.5), (1 * MiB, 4.0), (16 * MiB, 15.0), (math.inf, 150.0)])
    lat[-2] *= 1.1
    pl = find_plateaus(sizes, lat, min_step=1.5, decreasing=False)
    assert [p.value for p in pl] == pytest.approx([1.5, 4.0, 15.0, 150.0], rel=0.06)
    assert [p.x_hi for p in pl[:-1]] == [32 * KiB, 1 * MiB, 16 * MiB]
    assert find_plateaus([], []) == []
    single = find_plateaus([1.0, 2.0, 4.0], [5.0, 5.1, 4.9])
    assert len(single) == 1 and single[0].n_points == 3


# ---------------------------------------------------------------------------------------------
# kernels


def test_kernel_names_parse_back():
    k = K.op_kernel("int32_add", 4, 8)
    assert K.parse_op_kernel_name(k.name) == ("int32_add", 4, 8)
    assert K.parse_op_kernel_name(K.busy_kernel(16, 8).name) == ("fp32_fma", 16, 8)
    assert K.parse_op_kernel_name("kc_stream_read_v4") is None
    assert K.parse_stream_kernel_name(K.stream_read_kernel(16, "blocked").name) == ("blocked", 16)
    assert K.ops_per_iter("int32_add", 4, 8) == 4 * 2 * 4    # 4 pairs x 2 adds x 4 lanes
    assert K.ops_per_iter("fp32_mul", 16, 8) == 8 * 2 * 16
    assert "cl_khr_fp64" in K.op_kernel("fp64_fma", 4, 8).source
    with pytest.raises(ValueError):
        K.op_kernel("int32_add", 4, 3)


# ---------------------------------------------------------------------------------------------
# the whole calibration against a fake harness with known parameters


#: work-groups of an empty launch after which the fake's cost per work-group drops to ``wg_bulk_us``
WG_BULK_FROM = 8192


@dataclass
class Truth:
    cu: int = 8
    launch_us: float = 3.0
    wg_us: float = 0.05
    wi_ns: float = 0.02                    # per work-item of a work-group's task, whole device
    barrier_ns: float = 40.0               # per barrier per work-group
    barrier_wi_ns: float = 1.5             # per barrier per work-item
    barrier_unrolled: int = 0              # largest group whose barriers (regions of 8 updates) are unrolled away
    barrier_flat_ns: float = 1.0           # per barrier and update in a group that unrolls them
    wi_eff: float = 0.25                   # one chain per work-item, vectorized across work-items: share of the peak
    gather_ns: float = 0.5                 # per gathered load on one compute unit
    gather_clamped_ns: float = 0.3         # the same at consecutive (clamped) addresses
    atomic_ns: float = 5.0                 # per atomic on one compute unit, own element; x (1 + 8 / bins) contended
    join_us: float = 0.0                   # the other compute units join a launch this late (calib join)
    wg_bulk_us: float | None = None        # per work-group past the first WG_BULK_FROM of an empty launch
    rates: dict[str, float] = field(default_factory=lambda: {
        c: r for c, r in zip(K.OP_CLASSES, (4e12, 4e12, 8e12, 2e12, 3e12, 1e12, 0.5e12, 0.25e12, 0.3e12, 0.35e12,
                                             1.1e12, 1.2e12, 1.3e12)
                                   + tuple(0.1e12 + 0.01e12 * i for i in range(len(K.OP_CLASSES) - 13)))})
    bw: tuple[tuple[float, float], ...] = ((64 * KiB, 800e9), (4 * MiB, 300e9), (math.inf, 100e9))
    lat: tuple[tuple[float, float], ...] = ((64 * KiB, 2e-9), (4 * MiB, 10e-9), (math.inf, 80e-9))
    local_bw: float = 2000e9
    idle_w: float = 50.0
    eps_op_pj: float = 20.0                # + 1 pJ per class index
    eps_access_pj: tuple[float, ...] = (100.0, 400.0, 2000.0)
    eps_local_pj: float = 80.0
    alpha: float = 30.0
    beta: float = 0.7
    delta: float = 60.0
    r: float = 0.83


def _level(size: float, table: tuple[tuple[float, float], ...]) -> tuple[int, float]:
    for i, (cap, v) in enumerate(table):
        if size <= cap:
            return i, v
    raise AssertionError


class FakeHarness:
    """Synthesises measurements of the calib kernels from :class:`Truth` (0.2 % noise)."""

    def __init__(self, truth: Truth, energy: bool, fp64: bool = True, seed: int = 0):
        self.t, self.energy, self.fp64 = truth, energy, fp64
        self.rng = np.random.default_rng(seed)
        self.calls: list[str] = []

    def run(self, kernel: Kernel, config: LaunchConfig, policy: TimingPolicy | None = None) -> Measurement:
        T = self.t
        self.calls.append(kernel.name)
        a = {b.name: b for b in config.args}
        g, ls = config.gsize[0], config.lsize[0]
        n_wg = g // ls
        base = dict(kernel_id=kernel.id, kernel_name=kernel.name, device="fake", gsize=config.gsize,
                    lsize=config.lsize, args=[], meter="fake" if self.energy else "none")
        launch = T.launch_us * 1e-6
        power: float | None = None
        e_dyn = 0.0
        name = kernel.name
        op = K.parse_op_kernel_name(name)
        st = K.parse_stream_kernel_name(name)
        if op is not None:
            cls, w, k = op
            if K.OP_CLASSES[cls].needs_fp64 and not self.fp64:
                return Measurement(**base, status="compile_error", reason="no fp64")
            ops = g * a["iters"].value * K.ops_per_iter(cls, w, k)
            eff = (1.0 if w == 16 or cls == "fp64_fma" and w == 8 else 0.6) * (1.0 if ls == 256 else 0.9)
            active = min(n_wg, T.cu)
            one_unit = ops / (T.rates[cls] * eff / T.cu)
            t = launch + n_wg * T.wg_us * 1e-6 + float(join_time(one_unit, T.join_us * 1e-6, T.cu, n_wg))
            if name.startswith("kc_busy"):
                power = T.alpha * active**T.beta + T.delta
                if t < 50e-6:
                    power *= T.r
                e_dyn = (power - T.idle_w) * t
            else:
                e_dyn = (T.eps_op_pj + list(K.OP_CLASSES).index(cls)) * 1e-12 * ops + 1e-4
        elif st is not None:
            layout, w = st
            size = a["n"].value * 4 * w
            nbytes = a["passes"].value * size
            lvl, bw = _level(size, T.bw)
            eff = (1.0 if layout == "blocked" else 0.7) * (1.0 if w == 16 else 0.8) * (1.0 if ls >= 32 else 0.6)
            t = launch + nbytes / (bw * eff)
            e_dyn = T.eps_access_pj[lvl] * 1e-12 * nbytes / 32 + 2e-4
        elif name.startswith("kc_local_read"):
            w = int(name.rsplit("_v", 1)[1])
            nbytes = n_wg * a["passes"].value * a["n"].value * 4 * w
            t = launch + nbytes / T.local_bw * (1.0 if ls >= 256 else 1.5)
            e_dyn = T.eps_local_pj * 1e-12 * nbytes / 32
        elif name == "kc_chase":
            bits = a["bits"].value
            size = K.chase_nodes(bits) * K.CHASE_NODE_BYTES
            t = launch + K.chase_nodes(bits) * 1e-9 + a["steps"].value * _level(size, T.lat)[1]
        elif K.parse_wi_kernel_name(name) is not None:
            cls, n = K.parse_wi_kernel_name(name)
            ops = g * n * K.OP_CLASSES[cls].ops_per_update
            t = launch + n_wg * T.wg_us * 1e-6 + ops / (T.rates[cls] * T.wi_eff)
        elif name in ("kc_gather", "kc_gather_clamped"):   # 16 loads per work-item, on all units
            per = T.gather_ns if name == "kc_gather" else T.gather_clamped_ns
            t = launch + n_wg * T.wg_us * 1e-6 + g * K.GATHER_LOADS * per * 1e-9 / T.cu
        elif name.startswith("kc_atomic_"):
            n_atomics = g * a["iters"].value
            bins = None if a["own"].value else a["mask"].value + 1
            per = T.atomic_ns * 1e-9 * (1.0 if bins is None else 1 + 8 / bins)
            t = launch + n_wg * T.wg_us * 1e-6 + n_atomics * per / min(n_wg, T.cu)
        elif name in ("kc_nop", "kc_empty"):      # launch_us is the time of one work-group of one work-item
            bulk = max(0, n_wg - WG_BULK_FROM) if T.wg_bulk_us is not None else 0
            t = (launch + (n_wg - 1 - bulk) * T.wg_us * 1e-6 + bulk * (T.wg_bulk_us or 0.0) * 1e-6
                 + (g - 1) * T.wi_ns * 1e-9)
        elif name.startswith("kc_barrier_local"):  # one work-group per compute unit: the groups run side by side
            updates = int(name.rsplit("_u", 1)[1]) if "_u" in name else 1
            # a region of one update stays unrolled in groups twice as large as one of eight
            unrolled = T.barrier_unrolled * (2 if updates == 1 else 1)
            per = (T.barrier_flat_ns * updates if ls <= unrolled
                   else T.barrier_ns + ls * T.barrier_wi_ns + (updates - 1) * 0.1 * ls)
            t = launch + n_wg * T.wg_us * 1e-6 + a["nb"].value * per * 1e-9
        else:
            raise AssertionError(f"unexpected kernel {name}")
        times = [t * 1e6 * (1 + self.rng.normal(0, 0.002)) for _ in range(5)]
        m = Measurement(**base, status="ok", time=TimeStats.from_times(times))
        if self.energy:
            tm = m.time.median_us * 1e-6
            e_dyn *= 1 + self.rng.normal(0, 0.002)
            m.dynamic_energy_j = e_dyn
            m.energy_j = e_dyn + T.idle_w * tm
            m.avg_power_w = power if power is not None else m.energy_j / tm
            m.idle_power_w = T.idle_w
            m.meter_method = "fake"
        return m


def _fake_device(truth: Truth, kind: str = "GPU") -> DeviceInfo:
    return DeviceInfo(
        platform_index=0, device_index=0, platform_name="Fake", platform_version="OpenCL 3.0 Fake",
        name=f"Fake {kind}", vendor="Fake", type=kind, driver_version="1.0", device_version="OpenCL 3.0",
        compute_units=truth.cu, max_work_group_size=1024, max_work_item_sizes=[1024, 1024, 64],
        preferred_wg_multiple=32, global_mem_bytes=1 << 30, max_alloc_bytes=1 << 30, local_mem_bytes=64 * KiB,
        max_constant_bytes=64 * KiB, max_clock_mhz=1500, mem_base_align_bytes=128,
    )


@pytest.fixture(scope="module")
def fake_calibration():
    truth = Truth()
    dev = _fake_device(truth)
    cal = Calibrator(dev, FakeHarness(truth, energy=False), FakeHarness(truth, energy=True, seed=1),
                     CalibOptions(host_overhead=False), meter="fake")
    return truth, cal, cal.run()


def test_fake_cpu_scalar_rates():
    """The fake runs a width-1 kernel at 0.6 of the class rate (work-groups of 256): the scalar
    benchmark reports that, within the 0.2 % noise plus launch and work-group overheads; a GPU
    skips it."""
    truth = Truth()
    opts = CalibOptions(host_overhead=False, benches=("launch", "peak", "scalar"), op_classes=("fp32_fma", "exp"))
    p = Calibrator(_fake_device(truth, "CPU"), FakeHarness(truth, energy=False), None, opts).run()
    for cls in ("fp32_fma", "exp"):
        assert p.get(f"scalar_{cls}_gops") == pytest.approx(0.6 * truth.rates[cls] / 1e9, rel=0.03)
        assert p.get(f"peak_{cls}_gops") == pytest.approx(truth.rates[cls] / 1e9, rel=0.03)
    g = Calibrator(_fake_device(truth, "GPU"), FakeHarness(truth, energy=False), None, opts).run()
    assert g.get("scalar_fp32_fma_gops") is None


def test_unrolled_group_size_is_the_flat_start_below_the_line():
    """Flat costs in the smallest groups, far under the line through the larger ones: unrolled up
    to the last flat size (PoCL 3.1 on a 2-core x86-64 CPU, one update per region); a line with a large per-group
    cost is flat in small groups too but on the line (a GPU); a cost growing from the smallest group,
    one flat size, or too few larger sizes for a line: 0."""
    sizes = [8, 16, 32, 64, 256, 1024]
    assert unrolled_group_size(sizes, [1.0, 1.0, 1.1, 40.0, 158.0, 619.0]) == 32
    assert unrolled_group_size(sizes, [8.1, 8.1, 40.0, 83.0, 300.0, 1000.0]) == 16
    assert unrolled_group_size(sizes, [40 + 1.5 * x for x in sizes]) == 0
    assert unrolled_group_size(sizes, [0.6 * x for x in sizes]) == 0
    assert unrolled_group_size(sizes[:4], [1.0, 1.0, 1.0, 40.0]) == 0          # one size above: no line
    assert unrolled_group_size(sizes, [1.0] * 6) == 0
    assert flat_run([8.1, 8.2, 12.0, 40.0]) == 3 and flat_run([0.0, 1.0]) == 0 and flat_run([]) == 0


def test_fake_cpu_calibration_of_unrolled_barriers():
    """A runtime that unrolls the barriers of groups up to 16 work-items with regions of 8 updates
    (32 with one): the curve is kept, ``barrier_unrolled_items`` is 16, and the per-work-item cost
    is the line over the groups above 32 alone."""
    truth = Truth(barrier_unrolled=16)
    opts = CalibOptions(host_overhead=False, benches=("launch", "barrier"))
    p = Calibrator(_fake_device(truth, "CPU"), FakeHarness(truth, energy=False), None, opts).run()
    assert p.get("barrier_unrolled_items") == 16
    assert "one-update kernel" in p.entry("barrier_unrolled_items").notes
    c = p.curves["barrier_vs_local_size"]
    assert c.x == [8.0, 16.0, 32.0, 64.0, 256.0, 1024.0]
    assert c.y[:3] == pytest.approx([truth.barrier_flat_ns] * 3, rel=0.05)
    assert p.get("barrier_wi_ns") == pytest.approx(truth.barrier_wi_ns, rel=0.02)
    assert "64, 256, 1024 (above 32" in p.entry("barrier_wi_ns").notes
    assert p.get("barrier_ns") == pytest.approx(truth.barrier_flat_ns, rel=0.05)


def test_join_time_and_its_fit():
    """A launch whose work one unit finishes before the others join runs on that unit alone; past
    the delay the rest is shared, and a work-group a late unit takes runs whole. The fit recovers
    the delay from noisy launches of the ladder calib join measures."""
    assert join_time(5.0, 8.0, 2, 8) == pytest.approx(5.0)                # done before anyone joins
    assert join_time(40.0, 8.0, 2, 8) == pytest.approx(8.0 + 32.0 / 2)    # shared after the delay
    assert join_time(40.0, 8.0, 2, 2) == pytest.approx(8.0 + 20.0)        # two groups: the second starts late
    assert join_time(40.0, 8.0, 2, 1) == pytest.approx(40.0)              # one group: one unit
    assert join_time(40.0, 0.0, 4, 16) == pytest.approx(10.0)             # no delay: the even split
    rng = np.random.default_rng(3)
    work = np.array([2.0, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 256])
    for delay in (0.0, 3.0, 8.0, 20.0):
        measured = join_time(work, delay, 2, 8) * (1 + rng.normal(0, 0.02, len(work)))
        got, rms = join_fit(work, measured, 2, 8)
        assert got == pytest.approx(delay, abs=0.1 * delay + 0.5) and rms < 0.05
    with pytest.raises(ValueError):
        join_fit([1.0], [1.0], 2, 8)


@pytest.mark.parametrize("join_us", [0.0, 10.0])
def test_fake_cpu_join_delay(join_us):
    """calib join recovers the fake CPU's join delay (none, or 10 us) from its FMA launches; a GPU
    skips it; the analytical model of the profile charges it to a short multi-group launch."""
    truth = Truth(cu=2, join_us=join_us)
    truth.rates = {c: r / 1000 for c, r in truth.rates.items()}
    opts = CalibOptions(host_overhead=False, benches=("launch", "wg", "join"))
    p = Calibrator(_fake_device(truth, "CPU"), FakeHarness(truth, energy=False), None, opts).run()
    assert p.get("cu_join_us") == pytest.approx(join_us, abs=0.1 * join_us + 0.3)
    assert "8 of 128 on 2 compute units" in p.values["cu_join_us"].notes
    g = Calibrator(_fake_device(truth, "GPU"), FakeHarness(truth, energy=False), None, opts).run()
    assert g.get("cu_join_us") is None


def test_fake_cpu_wi_rates():
    """One chain per work-item runs at 1/4 of the class peak in the fake: the wi benchmark reports
    that (a GPU skips it); the kernel really is one chain of 64 dependent updates without a loop.
    Rates of a CPU (1/100 of the fake GPU's), so the launches reach the target time."""
    truth = Truth()
    truth.rates = {c: r / 100 for c, r in truth.rates.items()}
    opts = CalibOptions(host_overhead=False, benches=("launch", "peak", "wi"),
                        op_classes=("fp32_fma", "int32_add", "exp"))
    p = Calibrator(_fake_device(truth, "CPU"), FakeHarness(truth, energy=False), None, opts).run()
    for cls in ("fp32_fma", "int32_add", "exp"):
        assert p.get(f"wi_{cls}_gops") == pytest.approx(0.25 * truth.rates[cls] / 1e9, rel=0.03), cls
    # a builtin's kernel: independent calls, one per value of the work-item
    src = K.wi_call_kernel("exp").source
    assert src.count(" = exp(-a") == K.WI_CALLS and "a0 = exp(-a0);" in src and "a1 = exp(-a1);" in src
    assert "independent calls" in p.values["wi_exp_gops"].notes
    assert "fp32_mul" not in {k[3:-5] for k in p.values if k.startswith("wi_")}
    g = Calibrator(_fake_device(truth, "GPU"), FakeHarness(truth, energy=False), None, opts).run()
    assert g.get("wi_fp32_fma_gops") is None
    src = K.wi_kernel("fp32_fma").source
    assert src.count("a0 = a0 * s + t;") == K.WI_UPDATES and "for" not in src
    assert K.wi_kernel("int32_add").source.count("a0 = a0 + a1; a1 = a1 + a0;") == K.WI_UPDATES


def test_fake_work_group_cost_is_measured_at_the_counts_of_real_launches():
    """A runtime whose cost per work-group drops in launches of more than 8,192 of them (PoCL 3.1 on
    a 2-core x86-64 CPU: 6.2-6.5 ns per empty work-group at 512-2,048, 4.3-6.1 at 8,192): calib wg reports the cost
    at the counts real launches have (:data:`calib.microbench.WG_COUNTS`), not one pulled down by
    launches of a million work-groups (it measured up to 8 x 2^17 of them before: 0.014 us here)."""
    truth = Truth(wg_bulk_us=0.01)
    opts = CalibOptions(host_overhead=False, benches=("launch", "wg"))
    p = Calibrator(_fake_device(truth, "CPU"), FakeHarness(truth, energy=False), None, opts).run()
    assert max(WG_COUNTS) <= WG_BULK_FROM
    assert p.get("wg_overhead_us") == pytest.approx(truth.wg_us, rel=0.02)
    assert p.get("wi_overhead_ns") == pytest.approx(truth.wi_ns, rel=0.05)


def test_fake_calibration_recovers_time_parameters(fake_calibration):
    truth, cal, p = fake_calibration
    assert cal.failures == []
    assert p.get("launch_overhead_us") == pytest.approx(truth.launch_us, rel=0.01)
    for cls, rate in truth.rates.items():
        assert p.get(f"peak_{cls}_gops") == pytest.approx(rate / 1e9, rel=0.01), cls
        assert "work-groups of 256" in p.entry(f"peak_{cls}_gops").notes    # best launch size kept
    assert p.get("peak_fp32_gflops") == pytest.approx(2 * truth.rates["fp32_fma"] / 1e9, rel=0.01)
    assert p.get("bw_level0_gbs") == pytest.approx(800, rel=0.02)
    assert p.get("bw_level1_gbs") == pytest.approx(300, rel=0.02)
    assert p.get("dram_bw_gbs") == pytest.approx(100, rel=0.02)
    assert p.get("cache_level0_bytes") == 64 * KiB and p.get("cache_level1_bytes") == 4 * MiB
    assert "bw_level3_gbs" not in p
    assert p.curves["bandwidth_vs_working_set"].notes.startswith("kc_stream_read_blk_v16")
    assert p.get("bw_local_gbs") == pytest.approx(2000, rel=0.02)
    assert p.get("latency_level0_ns") == pytest.approx(2.0, rel=0.02)
    assert p.get("latency_level1_ns") == pytest.approx(10.0, rel=0.02)
    assert p.get("dram_latency_ns") == pytest.approx(80.0, rel=0.02)
    assert p.get("latency_level0_bytes") == 64 * KiB and p.get("latency_level1_bytes") == 4 * MiB
    assert p.entry("dram_latency_ns").r2 > 0.999
    assert p.get("wg_overhead_us") == pytest.approx(truth.wg_us, rel=0.02)
    assert p.entry("wg_overhead_us").r2 > 0.999
    assert p.get("wi_overhead_ns") == pytest.approx(truth.wi_ns, rel=0.05)
    assert p.get("barrier_ns") == pytest.approx(truth.barrier_ns + 8 * truth.barrier_wi_ns, rel=0.02)  # group of 8
    assert p.get("barrier_wi_ns") == pytest.approx(truth.barrier_wi_ns, rel=0.02)
    assert p.get("barrier_unrolled_items") == 0          # nothing unrolled: the cost grows from the smallest group
    assert p.curves["barrier_vs_local_size"].x == [8.0, 16.0, 32.0, 64.0, 256.0, 1024.0]
    for v in p.values.values():
        assert v.source.startswith("measured: calib ")


def test_fake_calibration_recovers_energy_parameters(fake_calibration):
    truth, cal, p = fake_calibration
    assert p.meter == "fake" and p.has_energy
    assert p.get("idle_power_w") == pytest.approx(truth.idle_w)
    for i, cls in enumerate(K.OP_CLASSES):
        eps = truth.eps_op_pj + i
        assert p.get(f"energy_per_op_{cls}_pj") == pytest.approx(eps, rel=0.02), cls
        assert p.entry(f"energy_per_op_{cls}_pj").r2 > 0.99
        assert p.get(f"power_coeff_{cls}_pj") == pytest.approx(eps, rel=0.05), cls   # FlipFlop beta_u
    for i, eps in enumerate(truth.eps_access_pj):
        assert p.get(f"energy_per_access_level{i}_pj") == pytest.approx(eps, rel=0.02), i
    assert p.get("energy_per_access_dram_pj") == pytest.approx(truth.eps_access_pj[-1], rel=0.02)
    assert p.get("energy_per_access_local_pj") == pytest.approx(truth.eps_local_pj, rel=0.02)
    assert p.get("power_cu_alpha_w") == pytest.approx(truth.alpha, rel=0.05)
    assert p.get("power_cu_beta") == pytest.approx(truth.beta, rel=0.05)
    assert p.get("power_cu_delta_w") == pytest.approx(truth.delta, rel=0.05)
    assert p.entry("power_cu_beta").r2 > 0.999
    assert p.get("transient_ratio") == pytest.approx(truth.r, rel=0.01)


def test_profile_without_meter_has_no_energy_and_says_so():
    truth = Truth()
    cal = Calibrator(_fake_device(truth), FakeHarness(truth, energy=False, fp64=False), None,
                     CalibOptions(quick=True, host_overhead=False, benches=("launch", "peak", "energy"),
                                  op_classes=("fp32_fma", "fp64_fma")))
    p = cal.run()
    assert not p.has_energy and p.meter == "none"
    assert not any(k.startswith(("energy", "power", "idle")) for k in p.values)
    assert any("energy values absent" in n for n in p.notes)
    assert "peak_fp64_fma_gops" not in p and "peak_fp64_gflops" not in p
    assert any("fp64_fma" in n and "no value" in n for n in p.notes)
    assert cal.failures == []          # an unsupported fp64 is not a failure
    round_trip = DeviceProfile.from_json(p.to_json())
    assert round_trip.get("peak_fp32_fma_gops") == p.get("peak_fp32_fma_gops")


def test_profile_value_sources():
    v = ProfileValue(1.0, "us", "measured: calib launch on 2025-01-01")
    assert ProfileValue.from_dict(v.to_dict()) == v


# ---------------------------------------------------------------------------------------------
# real microbenchmarks on the local device


# Independent measurements of the same quantities, with kernels written here (not calib's) and the
# harness's plain timing, taking each kernel's fastest launch (the one least disturbed: a CPU device
# shares its cores with other work). The bounds catch a wrong unit, a wrong quantity or a broken fit,
# not noise: a median may sit far above the fastest launch when the host is busy (we saw 40x).
REAL = TimingPolicy(warmup=2, min_repeats=30, min_time_s=0.0, max_repeats=60, max_time_s=5)
READ_BLOCKED = """__kernel void rd(__global const float4* a, __global float* out, uint n, uint passes) {
  uint g = get_global_id(0), c = n / get_global_size(0);
  float4 s = (float4)(0.0f);
  for (uint p = 0; p < passes; p++) for (uint j = g * c; j < (g + 1) * c; j++) s += a[j];
  out[g] = s.x + s.y + s.z + s.w; }"""


def _fastest_us(harness, src: str, name: str, gsize: int, lsize: int, args: list[ArgBinding]) -> float:
    m = harness.run(Kernel(src, name), LaunchConfig((gsize,), (lsize,), args), REAL)
    assert m.status == "ok", m.reason
    return m.time.min_us


def test_real_quick_microbenchmarks(device, harness):
    opts = CalibOptions(quick=True, benches=("launch", "bandwidth", "wg"), max_bytes=256 * KiB,
                        host_overhead=False, target_s=0.001)
    cal = Calibrator(device, harness, None, opts)
    p = cal.run()
    assert cal.failures == []
    # launch: the median time of an empty one-work-item kernel; at least its fastest launch measured
    # again here (/4 for noise), at most 100x that (a busy host)
    empty = _fastest_us(harness, "__kernel void e(__global uint* a) { }", "e", 1, 1,
                        [ArgBinding("a", "buffer", "uint", 1)])
    assert empty / 4 < p.get("launch_overhead_us") < 100 * empty, (p.get("launch_overhead_us"), empty)
    # work-group overhead: the slope of an idle kernel's fastest time from CU to 1024 x CU
    # work-groups (calib fits fastest times too: a factor of 10 either way)
    idle = "__kernel void z(__global uint* a, uint f) { if (get_global_id(0) == f) a[0] = 1u; }"
    cu = device.compute_units

    def idle_us(n_wg: int) -> float:
        return _fastest_us(harness, idle, "z", n_wg * 8, 8, [ArgBinding("a", "buffer", "uint", 1, init="zeros"),
                                                           ArgBinding("f", "scalar", "uint", value=0xFFFFFFFF)])

    slope = (idle_us(1024 * cu) - idle_us(cu)) / (1023 * cu)
    assert slope / 10 < p.get("wg_overhead_us") < 10 * slope, (p.get("wg_overhead_us"), slope)
    # bandwidth: the sweep's points are the working sets asked for, the main-memory value is one
    # of its plateaus; a peak is not far below what a plain read loop gets at its fastest (factor 2
    # for noise), and no compute unit reads more than 256 B per clock cycle (today: 64-192 B)
    curve = p.curves["bandwidth_vs_working_set"]
    assert curve.x[0] == 16 * KiB and max(curve.x) <= 256 * KiB
    assert min(curve.y) <= p.get("dram_bw_gbs") <= max(curve.y)
    n4, passes, gs = 256 * KiB // 16, 64, cu * 64
    t = _fastest_us(harness, READ_BLOCKED, "rd", gs, 64, [
        ArgBinding("a", "buffer", "float4", n4), ArgBinding("out", "buffer", "float", gs),
        ArgBinding("n", "scalar", "uint", value=n4), ArgBinding("passes", "scalar", "uint", value=passes)])
    plain_gbs = passes * 256 * KiB / (t * 1e-6) / 1e9
    ceiling_gbs = cu * device.max_clock_mhz * 1e6 * 256 / 1e9
    assert plain_gbs / 2 < p.get("dram_bw_gbs") < ceiling_gbs, (p.get("dram_bw_gbs"), plain_gbs, ceiling_gbs)
    assert DeviceProfile.from_json(p.to_json()).to_dict() == p.to_dict()


def test_real_host_overhead(device):
    import time

    import pyopencl as cl
    from kernelcast.calib.host_bench import measure_host_overhead
    from kernelcast.instrument.backends.opencl import cl_device

    res = measure_host_overhead(device, n=50)
    assert "error" not in res, res
    # the same host wall time of enqueue + wait (a median there), measured here in this process: at
    # least the fastest here (/4 for noise), at most 100x that (a busy host); a launch that does not
    # wait for the previous one costs no more than that either
    dev = cl_device(device)
    ctx = cl.Context([dev])
    queue = cl.CommandQueue(ctx, dev)
    prg = cl.Program(ctx, "__kernel void e(__global uint* a) { }").build()
    buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 64)        # both held while the kernel runs
    knl = cl.Kernel(prg, "e")
    knl.set_args(buf)
    waits = []
    for i in range(70):
        t0 = time.perf_counter()
        cl.enqueue_nd_range_kernel(queue, knl, (1,), (1,)).wait()
        if i >= 20:
            waits.append((time.perf_counter() - t0) * 1e6)
    fastest = min(waits)
    assert fastest / 4 < res["sync_us"] < 100 * fastest, (res, fastest)
    assert 0 < res["batch_us"] < 100 * fastest, (res, fastest)


@pytest.mark.device
def test_cli_writes_profile_and_rejects_bad_input(tmp_path, capsys):
    from kernelcast.calib.cli import main

    out = tmp_path / "p.json"
    assert main(["--out", str(out), "--only", "launch", "--meter", "none", "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "launch_overhead_us" in printed and "energy values absent" in printed
    p = DeviceProfile.load(out)
    assert p.get("launch_overhead_us") > 0 and p.meter == "none"
    assert main(["--out", str(tmp_path / "x.json"), "--only", "launch,nope"]) == 2
    assert "unknown benchmark" in capsys.readouterr().err
    assert main(["--out", str(tmp_path / "no" / "x.json"), "--only", "launch"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


def test_busy_host_is_refused_or_recorded(monkeypatch):
    """A CPU device under a load above --max-load is refused before any measurement; without the
    limit the calibration runs and records the largest load it saw."""
    from kernelcast.calib import microbench
    from kernelcast.calib.microbench import HostBusyError

    monkeypatch.setattr(microbench, "_loadavg", lambda: 7.5)
    truth = Truth()
    harness = FakeHarness(truth, energy=False)
    opts = CalibOptions(host_overhead=False, benches=("launch",), max_load=2.0, load_wait_s=0.0)
    with pytest.raises(HostBusyError, match="load average 7.50 before calibration"):
        Calibrator(_fake_device(truth, "CPU"), harness, None, opts).run()
    assert harness.calls == []
    p = Calibrator(_fake_device(truth, "CPU"), harness, None,
                   CalibOptions(host_overhead=False, benches=("launch",))).run()
    assert p.get("calib_host_load") == pytest.approx(7.5)
    # a GPU is not slowed by host load: no refusal
    Calibrator(_fake_device(truth, "GPU"), FakeHarness(truth, energy=False), None, opts).run()


def test_fake_atomic_rates(fake_calibration):
    """The atomic benchmark recovers the fake's rates: own element 5 ns per atomic on one of 8
    compute units (1.6 Gop/s for the device), 1 bin 9x slower, 256 bins 1.03x (within the
    launch and work-group overheads the rate formula ignores: 1 %)."""
    truth, _cal, p = fake_calibration
    own = truth.cu / (truth.atomic_ns * 1e-9) / 1e9
    assert p.get("atomic_global_gops") == pytest.approx(own, rel=0.01)
    assert p.get("atomic_local_gops") == pytest.approx(own, rel=0.01)
    assert p.get("atomic_global_b1_gops") == pytest.approx(own / 9, rel=0.01)
    assert p.get("atomic_global_b256_gops") == pytest.approx(own / (1 + 8 / 256), rel=0.01)


def test_fake_gather_rate(fake_calibration):
    """0.5 ns per gathered load on each of 8 compute units: 16 G loads/s for the device; the slope
    of two launches cancels the launch but not the fake's large per-work-group cost (0.05 us per
    group of 256: 0.195 ns per work-item against 16 x 0.5 / 8 = 1 ns of gathers): 13.39 G/s."""
    truth, _cal, p = fake_calibration
    per_item_ns = 16 * truth.gather_ns / truth.cu + truth.wg_us * 1e3 / 256
    assert p.get("gather_gops") == pytest.approx(16 / per_item_ns, rel=0.01)
    assert p.get("gather_gops") == pytest.approx(13.39, rel=0.01)
    # the clamped kernel's loads at 0.3 ns each: 16 / (16 x 0.3 / 8 + 0.195) ns
    clamped_ns = 16 * truth.gather_clamped_ns / truth.cu + truth.wg_us * 1e3 / 256
    assert p.get("gather_clamped_gops") == pytest.approx(16 / clamped_ns, rel=0.01)
