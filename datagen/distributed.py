"""Datagen on a Ray cluster: one actor per device, kernels sharded by id, per-actor journals
merged by the driver.

Layout inside the dataset directory::

    parts/actor-00/    a dataset of its own (manifest, journal fsync'd per row, shards): what
    parts/actor-01/    actor 0 / 1 measured and the driver has not merged yet

Each actor runs the ordinary :class:`~datagen.generate.Generator` over its shard of the kernels
(``sha256(kernel id) mod actors``) into its own part, skipping every configuration the main dataset
or its part already holds. The driver merges the parts into the main dataset (append with the
row-key check, so nothing is stored twice), first the leftovers of an earlier run, then each
part as its actor finishes, and deletes a part only after its rows are in the main journal. An
actor killed mid-run (or its node) loses at most the configuration it was measuring: its part
keeps every row before it, the driver merges that part, reports the loss, and rerunning the same
command measures what is missing.

Placement: ``actors=None`` places one actor per device: on each alive node one actor per GPU the
node advertises, or one per node on a CPU-only node (the whole CPU is one OpenCL device).
``actors=N`` (testing) places N actors wherever Ray puts them; on one 2-core CPU device their
timings contend with each other and mean nothing.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pandas as pd
from kernelcast.datagen.dataset import (
    JOURNAL,
    MANIFEST,
    SHARDS,
    DatasetWriter,
    _read_journal,
    _shard_paths,
    read_dataset,
)
from kernelcast.datagen.generate import (
    STORED_COLUMNS,
    DatagenOptions,
    DatagenRun,
    Generator,
    Summary,
    dataset_manifest,
    write_kernels,
)
from kernelcast.instrument.backends import DeviceInfo, list_devices, select_device
from kernelcast.instrument.harness import Harness
from kernelcast.instrument.runner import TimingPolicy

from kernelcast.errors import InputError, KernelcastError
from kernelcast.schema import Kernel

log = logging.getLogger(__name__)

PARTS = "parts"
CONNECT_TIMEOUT_S = 10.0
PROBE_TIMEOUT_S = 20.0


class RayUnavailable(InputError, RuntimeError):
    """Ray is not installed, or the cluster address cannot be reached."""


class ActorsLost(KernelcastError):
    """Some actors died; their rows up to the configuration in flight are kept. Rerun to resume."""

    def __init__(self, lost: list[str], appended: int):
        super().__init__(f"{len(lost)} Ray actor(s) lost ({'; '.join(lost)}); {appended} rows stored this run; "
                         f"rerun the same command to resume")
        self.lost = lost
        self.appended = appended


def shard_of(kernel_id: str, actors: int) -> int:
    """The actor a kernel belongs to: stable across runs and machines."""
    return int(hashlib.sha256(kernel_id.encode()).hexdigest()[:8], 16) % actors


def check_address(address: str | None, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """:class:`RayUnavailable` unless ``address`` (``host:port`` or ``ray://host:port``) accepts a
    TCP connection within ``timeout_s``. ``None``/``local`` starts a local cluster; ``auto`` is
    left to Ray (it looks for a running cluster of this machine)."""
    if address in (None, "", "local", "auto"):
        return
    assert address is not None
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise RayUnavailable(f"--ray {address!r}: expected HOST:PORT or ray://HOST:PORT")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            pass
    except OSError as e:
        raise RayUnavailable(f"--ray {address}: cannot reach the Ray cluster ({e.strerror or e})") from None
    # something listens: is it a Ray cluster? Ask in a child process, so a wrong service costs a
    # bounded wait and its retry messages do not reach the user

    probe = ("import ray, sys; ray.init(address=sys.argv[1], include_dashboard=False, log_to_driver=False, "
             "logging_level=40); ray.shutdown()")
    try:
        r = subprocess.run([sys.executable, "-c", probe, address], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=PROBE_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise RayUnavailable(f"--ray {address}: no Ray cluster answered within {PROBE_TIMEOUT_S:.0f} s") from None
    if r.returncode != 0:
        raise RayUnavailable(f"--ray {address}: not a Ray cluster (connecting failed)")


def ray_available() -> None:
    """:class:`RayUnavailable` when Ray is not installed (without importing it)."""
    if importlib.util.find_spec("ray") is None:
        raise RayUnavailable("--ray needs Ray: pip install 'kernelcast[ray]'")


def _import_ray() -> Any:
    try:
        import ray  # deferred: ray is an optional extra
    except ImportError:
        raise RayUnavailable("--ray needs Ray: pip install 'kernelcast[ray]'") from None
    return ray


def connect(address: str | None) -> Any:
    """Check the address, then ``ray.init`` it (a local cluster for ``None``/``local``)."""
    check_address(address)
    ray = _import_ray()
    if ray.is_initialized():
        return ray
    env = {"env_vars": {"PYTHONPATH": os.pathsep.join(p for p in (os.environ.get("PYTHONPATH", ""),
                                                                    str(Path(__file__).resolve().parent.parent))
                                                      if p)}}
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "runtime_env": env,
                              "logging_level": logging.WARNING}
    try:
        if address in (None, "", "local"):
            ray.init(**kwargs)
        else:
            ray.init(address=address, **kwargs)
    except (ConnectionError, RuntimeError, TimeoutError, ValueError) as e:
        raise RayUnavailable(f"--ray {address or 'local'}: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
                             ) from None
    return ray


# ---------------------------------------------------------------------------------------------
# the actor


class DatagenWorker:
    """What one actor does (a plain class, wrapped by ``ray.remote`` in :func:`run_datagen_ray`)."""

    def __init__(self, index: int, device: str, meter: str, timeout_s: float, device_rank: int | None = None):
        self.index = index
        self.device = select_device(device)
        if device_rank is not None:       # the device_rank-th GPU of this node

            gpus = [d for d in list_devices() if "GPU" in d.type]
            if device_rank < len(gpus):
                self.device = gpus[device_rank]
        self.meter = meter
        self.timeout_s = timeout_s

    def info(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "host": socket.gethostname(), "device": self.device.to_dict()}

    def run(self, kernels: list[dict[str, Any]], part: str, manifest: dict[str, Any], options: dict[str, Any],
            known: list[dict[str, Any]]) -> dict[str, Any]:
        opts = _options_from(options)
        ks = [Kernel.from_dict(k) for k in kernels]
        root = Path(part)
        root.mkdir(parents=True, exist_ok=True)
        (root / "actor.pid").write_text(str(os.getpid()))
        with Harness(self.device, meter=self.meter, timeout_s=self.timeout_s) as h:
            man = {**manifest, "device": self.device.to_dict(), "device_identity": self.device.identity,
                   "actor": self.index}
            with DatasetWriter(root, man) as writer:
                write_kernels(root, ks)
                gen = Generator(h, writer, opts, known_rows=known)
                summary = gen.run(ks)
        return summary.to_dict()


def _options_from(d: dict[str, Any]) -> DatagenOptions:
    d = dict(d)
    d["timing"] = TimingPolicy(**d["timing"])
    d["ratio"] = tuple(d["ratio"])
    return DatagenOptions(**d)


# ---------------------------------------------------------------------------------------------
# merging


def _known_rows(root: Path) -> list[dict[str, Any]]:
    """What a generator needs to know of the main dataset's rows (plain Python values)."""
    df = read_dataset(root, resolve=False)
    if not len(df):
        return []
    cols = [c for c in STORED_COLUMNS if c in df.columns]
    return [{k: (None if _missing(v) else _plain(v)) for k, v in r.items()} for r in df[cols].to_dict("records")]


def _raw_rows(root: Path) -> list[dict[str, Any]]:
    """Every row of a part as stored (shards then journal), nested columns as JSON text."""
    rows: list[dict[str, Any]] = []
    for p in _shard_paths(root):
        df = pd.read_parquet(p)
        rows.extend({str(k): v for k, v in r.items() if not _missing(v)} for r in df.to_dict("records"))
    jrows, _ = _read_journal(root / JOURNAL)
    rows.extend(jrows)
    return rows


def _missing(v: Any) -> bool:
    try:
        return v is None or bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


def _plain(v: Any) -> Any:
    """numpy values from a Parquet shard as JSON-able Python values."""
    if hasattr(v, "tolist"):
        return v.tolist()
    return v


def merge_parts(root: Path, writer: DatasetWriter) -> int:
    """Move every part's rows into ``writer`` (skipping stored keys), then delete the parts."""
    parts = root / PARTS
    n = 0
    if not parts.is_dir():
        return 0
    for part in sorted(p for p in parts.iterdir() if p.is_dir()):
        n += merge_part(part, writer)
    return n


def merge_part(part: Path, writer: DatasetWriter) -> int:
    n = 0
    if (part / MANIFEST).is_file() or (part / JOURNAL).is_file() or (part / SHARDS).is_dir():
        for r in _raw_rows(part):
            r = {k: _plain(v) for k, v in r.items()}
            for c in ("args", "outputs", "device_state", "extra"):
                if isinstance(r.get(c), str):
                    try:
                        r[c] = json.loads(r[c])
                    except ValueError:
                        pass
            n += writer.append(r)
    shutil.rmtree(part, ignore_errors=True)
    return n


# ---------------------------------------------------------------------------------------------
# the driver


def _placements(ray: Any, actors: int | None) -> list[dict[str, Any]]:
    """Per actor: Ray options (node affinity) and the GPU rank on its node (or None)."""
    if actors is not None:
        return [{"options": {}, "rank": None} for _ in range(actors)]
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # deferred: ray is an optional extra

    out = []
    for node in ray.nodes():
        if not node.get("Alive"):
            continue
        gpus = int(node.get("Resources", {}).get("GPU", 0))
        strategy = NodeAffinitySchedulingStrategy(node_id=node["NodeID"], soft=False)
        for rank in range(gpus) if gpus else [None]:
            out.append({"options": {"scheduling_strategy": strategy}, "rank": rank})
    return out


def run_datagen_ray(kernels: list[Kernel], out: str | Path, device: str, options: DatagenOptions, *, meter: str,
                    timeout_s: float, corpus: str, address: str | None, actors: int | None = None,
                    on_actor: Any = None) -> DatagenRun:
    """Measure ``kernels`` on a Ray cluster into the dataset ``out`` (created, or resumed).

    :class:`RayUnavailable` when the cluster cannot be reached (before anything is written);
    :class:`ActorsLost` when actors died (their rows are kept; rerun to resume). ``on_actor``:
    called with each actor's ``info()`` once it started (tests use it to kill one)."""

    if actors is not None and actors < 1:
        raise InputError("--ray-actors must be at least 1")
    started = not _import_ray().is_initialized()
    ray = connect(address)
    try:
        return _drive(ray, kernels, Path(out), device, options, meter=meter, timeout_s=timeout_s, corpus=corpus,
                      address=address, actors=actors, on_actor=on_actor)
    finally:
        if started:
            ray.shutdown()


def _drive(ray: Any, kernels: list[Kernel], root: Path, device: str, options: DatagenOptions, *, meter: str,
           timeout_s: float, corpus: str, address: str | None, actors: int | None, on_actor: Any) -> DatagenRun:
    t0 = time.perf_counter()
    places = _placements(ray, actors)
    if not places:
        raise RayUnavailable("the Ray cluster has no alive node")
    remote = ray.remote(num_cpus=0, max_restarts=0)(DatagenWorker)
    handles = [remote.options(**p["options"]).remote(i, device, meter, timeout_s, p["rank"])
               for i, p in enumerate(places)]
    infos: list[dict[str, Any] | None] = []
    lost: list[str] = []
    for i, hd in enumerate(handles):
        try:
            infos.append(ray.get(hd.info.remote(), timeout=300))
        except Exception as e:  # noqa: BLE001 - an actor that cannot open its device
            infos.append(None)
            lost.append(f"actor {i}: could not start ({type(e).__name__}: {str(e).splitlines()[0][:200]})")
    first = next((x for x in infos if x is not None), None)
    if first is None:
        raise ActorsLost(lost, 0)

    class _Dev:       # what dataset_manifest needs of a harness
        def __init__(self, d: dict[str, Any]) -> None:
            self.device = DeviceInfo.from_dict(d)

    manifest = dataset_manifest(_Dev(first["device"]), options, corpus)
    manifest["ray"] = {"address": address or "local", "actors": len(handles)}
    summary = Summary()
    with DatasetWriter(root, manifest) as writer:
        write_kernels(root, kernels)
        merged_old = merge_parts(root, writer)
        if merged_old:
            log.info("merged %d rows left by an earlier run's actors", merged_old)
        known = _known_rows(root) if len(writer) else []
        opts = asdict(options)
        shards: list[list[dict[str, Any]]] = [[] for _ in handles]
        live = [i for i, x in enumerate(infos) if x is not None]
        owner: dict[str, int] = {}
        for k in kernels:
            owner[k.id] = live[shard_of(k.id, len(live))]
            shards[owner[k.id]].append(k.to_dict())
        futures = {}
        for i in live:
            if on_actor is not None:
                on_actor(i, infos[i], root / PARTS / f"actor-{i:02d}")
            mine = [r for r in known if owner.get(r["kernel_id"]) == i]
            futures[handles[i].run.remote(shards[i], str(root / PARTS / f"actor-{i:02d}"), manifest, opts, mine)] = i
        pending = list(futures)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            i = futures[done[0]]
            try:
                s = ray.get(done[0])
                _add(summary, s)
            except Exception as e:  # noqa: BLE001 - RayActorError & co: the actor is gone
                lost.append(f"actor {i}: {type(e).__name__}")
            merge_part(root / PARTS / f"actor-{i:02d}", writer)
        for hd in handles:
            try:
                ray.kill(hd)
            except Exception:  # noqa: BLE001 - already gone
                pass
        summary.wall_s = time.perf_counter() - t0
        try:
            (root / PARTS).rmdir()       # only when every part was merged
        except OSError:
            pass
        writer.update_manifest(last_summary=summary.to_dict())
        appended = writer.appended
        total = len(writer)
    if lost:
        raise ActorsLost(lost, appended)
    return DatagenRun(summary, total, appended)


def _add(summary: Summary, s: dict[str, Any]) -> None:
    summary.kernels += s.get("kernels", 0)
    summary.rows_new += s.get("rows_new", 0)
    summary.rows_resumed += s.get("rows_resumed", 0)
    summary.remeasured += s.get("remeasured", 0)
    summary.skipped += s.get("skipped", 0)
    summary.busy += s.get("busy", 0)
    summary.measure_wall_s += s.get("measure_wall_s", 0.0)
    summary.kernel_time_s += s.get("kernel_time_s", 0.0)
    summary.status.update(s.get("status", {}))
    summary.kernel_status.update(s.get("kernel_status", {}))
