"""The isolated harness: every kernel runs in a worker process the caller can lose.

A segfault or abort inside the driver kills only the worker (status ``crash``, with the signal and
the last line the worker wrote to stderr, e.g. glibc's ``free(): invalid next size``: the worker's
stderr goes to a file of its own, not to the caller's terminal);
a kernel that runs past the timeout gets its worker killed (status ``timeout``). The next
:meth:`Harness.run` starts a fresh worker, so the caller carries on. Builds are cached inside the
worker and on disk, so a replaced worker does not recompile.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import signal
import tempfile
import time
import traceback
from dataclasses import asdict
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

import numpy as np
from kernelcast.instrument.backends import Backend, DeviceInfo, backend_for, select_device
from kernelcast.instrument.lifeline import DEADLINE_GRACE_S, arm_deadline, bind_to_parent
from kernelcast.instrument.meters import make_meter
from kernelcast.instrument.runner import HARNESS_VERSION, TimingPolicy, arg_dict, run_config

from kernelcast.schema import Kernel, LaunchConfig, Measurement, MeterName, Status

log = logging.getLogger(__name__)


#: a worker's stderr file is emptied before a job once it is larger than this
STDERR_MAX_BYTES = 1 << 20


class HarnessError(RuntimeError):
    """The worker could not start at all (no device, meter that cannot open...)."""


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def _redirect_stderr(path: str) -> None:
    """Send this process's stderr (file descriptor 2: Python, the driver and glibc's fatal
    messages, which otherwise go to the terminal) to ``path``."""
    os.environ["LIBC_FATAL_STDERR_"] = "1"     # glibc writes heap-corruption aborts to /dev/tty otherwise
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)   # append: the parent may truncate it
    os.dup2(fd, 2)
    os.close(fd)


def _worker_main(conn: Connection, device: dict[str, Any], meter_spec: str, meter_options: dict[str, Any],
                 lifeline: tuple[int, float] | None = None, stderr_path: str | None = None) -> None:
    """Worker process: open the device and meter once, then serve jobs until told to stop.

    ``lifeline``: (parent pid, seconds one job may take at most): the worker dies with its parent
    and ends itself past that deadline (:mod:`instrument.lifeline`). ``stderr_path``: the file its
    stderr goes to (:func:`_redirect_stderr`)."""
    if stderr_path:
        _redirect_stderr(stderr_path)

    job_deadline_s = 0.0
    if lifeline is not None:
        bind_to_parent(lifeline[0])
        job_deadline_s = lifeline[1]
    try:
        info = DeviceInfo.from_dict(device)
        backend: Backend = backend_for(info)(info)
        meter = make_meter(meter_spec, vendor=info.vendor, device_type=info.type,
                           pci_bus_id=info.pci_bus_id, **meter_options)
    except Exception as e:  # noqa: BLE001 - report any start-up failure to the parent
        conn.send(("fatal", f"{type(e).__name__}: {e}"))
        return
    conn.send(("ready", meter.name))
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            break
        if msg is None:
            break
        kernel, config, policy, want_outputs, readback, arrays = msg
        if job_deadline_s:
            arm_deadline(job_deadline_s)
        try:
            m = run_config(backend, kernel, config, policy, meter,
                           phase=lambda p: conn.send(("phase", p)), want_outputs=want_outputs,
                           readback=readback, arrays=arrays)
            conn.send(("result", m))
        except Exception as e:  # noqa: BLE001 - an unexpected error is a row, not a dead run
            tb = traceback.format_exc(limit=5)
            log.debug("worker error: %s", tb)
            conn.send(("error", f"{type(e).__name__}: {e}"))
        if job_deadline_s:
            arm_deadline(0)
        if backend.lost:        # sticky driver error: this worker's context is unusable; the next run starts a new one
            break
    meter.close()
    backend.close()


class Harness:
    """Runs (kernel, configuration) pairs in an isolated worker process.

    >>> with Harness("auto", meter="none") as h:        # doctest: +SKIP
    ...     m = h.run(kernel, LaunchConfig((1 << 20,), (256,), args))
    """

    def __init__(self, device: DeviceInfo | str = "auto", meter: str = "auto", *,
                 timeout_s: float = 60.0, build_timeout_s: float = 300.0,
                 meter_options: dict[str, Any] | None = None, start_timeout_s: float = 120.0):
        self.device = device if isinstance(device, DeviceInfo) else select_device(device)
        self.meter_spec = meter
        self.meter_options = meter_options or {}
        self.timeout_s = timeout_s
        self.build_timeout_s = build_timeout_s
        self.start_timeout_s = start_timeout_s
        self.meter_name: MeterName | None = None
        self.restarts = 0
        self._proc: BaseProcess | None = None
        self._conn: Connection | None = None
        self._stderr_path: str | None = None
        self._ctx = mp.get_context("spawn")

    # -- worker life cycle ----------------------------------------------------------------

    def _start(self) -> None:
        parent, child = self._ctx.Pipe()
        fd, self._stderr_path = tempfile.mkstemp(prefix="kernelcast-worker-", suffix=".stderr")
        os.close(fd)
        proc = self._ctx.Process(
            target=_worker_main, args=(child, self.device.to_dict(), self.meter_spec, self.meter_options,
                                       (os.getpid(), self._job_deadline_s()), self._stderr_path),
            daemon=True, name="kernelcast-worker",
        )
        proc.start()
        child.close()
        if not parent.poll(self.start_timeout_s):
            proc.kill()
            proc.join()
            self._drop_stderr()
            raise HarnessError(f"worker did not start within {self.start_timeout_s:.0f} s")
        try:
            kind, payload = parent.recv()
        except EOFError:
            proc.join()
            why = self._crash_reason(proc)
            self._drop_stderr()
            raise HarnessError(f"worker died while starting ({why})") from None
        if kind == "fatal":
            proc.join()
            self._drop_stderr()
            raise HarnessError(f"worker could not start: {payload}")
        self.meter_name = payload
        self._proc, self._conn = proc, parent

    def _job_deadline_s(self) -> float:
        """The worker's own limit on one job: past the parent's build and run limits plus a grace."""
        return self.build_timeout_s + self.timeout_s + DEADLINE_GRACE_S

    def _lose_worker(self) -> None:
        """The worker crashed or was killed: reap it; the next run starts a new one."""
        self._stop_worker(kill=True)
        self.restarts += 1

    def _bound_stderr(self) -> None:
        """Empty the worker's stderr file once it holds more than :data:`STDERR_MAX_BYTES` (a
        long run of a chatty driver); the worker appends, so it carries on at the new end."""
        try:
            if self._stderr_path and os.path.getsize(self._stderr_path) > STDERR_MAX_BYTES:
                os.truncate(self._stderr_path, 0)
        except OSError:
            pass

    def _stderr_tail(self, max_chars: int = 200) -> str:
        """The last line the worker wrote to its stderr ("" when none)."""
        if not self._stderr_path:
            return ""
        try:
            with open(self._stderr_path, "rb") as f:
                f.seek(max(0, os.path.getsize(self._stderr_path) - 4096))
                lines = [ln.strip() for ln in f.read().decode("utf-8", "replace").splitlines() if ln.strip()]
        except OSError:
            return ""
        return lines[-1][:max_chars] if lines else ""

    def _crash_reason(self, proc: BaseProcess, doing: str = "") -> str:
        """``killed by SIGABRT (signal 6) while running: free(): invalid next size (normal)``."""
        reason = self._exit_reason(proc) + (f" while {doing}" if doing else "")
        tail = self._stderr_tail()
        return f"{reason}: {tail}" if tail else reason

    def _drop_stderr(self) -> None:
        path, self._stderr_path = self._stderr_path, None
        if not path:
            return
        try:
            if os.path.getsize(path):
                with open(path, encoding="utf-8", errors="replace") as f:
                    log.debug("worker stderr:\n%s", f.read(65536))
            os.unlink(path)
        except OSError:
            pass

    def _stop_worker(self, kill: bool) -> None:
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if proc is None or conn is None:
            self._drop_stderr()
            return
        if kill:
            proc.kill()
        else:
            try:
                conn.send(None)
            except (OSError, BrokenPipeError):
                pass
            proc.join(5)
            if proc.is_alive():
                proc.kill()
        proc.join()
        conn.close()
        self._drop_stderr()

    @staticmethod
    def _exit_reason(proc: BaseProcess) -> str:
        code = proc.exitcode
        if code is None:
            return "still running"
        if code < 0:
            return f"killed by {_signal_name(-code)} (signal {-code})"
        return f"exited with status {code}"

    def close(self) -> None:
        self._stop_worker(kill=False)

    def __enter__(self) -> Harness:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        # Ctrl-C or SIGTERM (kernelcast.errors.Terminated): stop the worker now, not after 5 s
        if isinstance(exc_type, type) and issubclass(exc_type, KeyboardInterrupt):
            self._stop_worker(kill=True)
        self.close()

    # -- running ----------------------------------------------------------------------------

    def run(self, kernel: Kernel, config: LaunchConfig, policy: TimingPolicy | None = None, *,
            want_outputs: bool = False, readback: list[str] | None = None,
            arrays: dict[str, np.ndarray] | None = None) -> Measurement:
        """Measure one configuration. Faults become statuses; only a worker that cannot start
        at all raises :class:`HarnessError`.

        ``want_outputs``: digest of every buffer after the first launch (validity checks).
        ``readback``: buffer names whose contents after the first launch come back in
        ``Measurement.readback`` as numpy arrays. ``arrays``: initial contents of buffers bound
        with ``init="array"``."""
        policy = policy or TimingPolicy()
        if self._proc is not None and not self._proc.is_alive():
            self._lose_worker()
        if self._proc is None:
            self._start()
        proc, conn = self._proc, self._conn
        assert proc is not None and conn is not None
        self._bound_stderr()
        t0 = time.perf_counter()
        try:
            conn.send((kernel, config, policy, want_outputs, readback or [], arrays or {}))
        except (OSError, BrokenPipeError):
            reason = f"worker gone before the job ({self._crash_reason(proc)})"
            self._lose_worker()
            return self._fault(kernel, config, "crash", reason, t0)
        deadline = time.perf_counter() + self.build_timeout_s
        phase = "build"
        while True:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                self._lose_worker()
                limit = self.build_timeout_s if phase == "build" else self.timeout_s
                what = "building" if phase == "build" else "running"
                return self._fault(kernel, config, "timeout",
                                   f"still {what} after {limit:g} s; worker killed", t0)
            try:
                ready = conn.poll(min(remaining, 0.5))
            except (OSError, EOFError):
                ready = False
            if not ready:
                if not proc.is_alive():
                    proc.join()
                    doing = "building" if phase == "build" else "running"
                    reason = f"worker {self._crash_reason(proc, doing)}"
                    self._lose_worker()
                    return self._fault(kernel, config, "crash", reason, t0)
                continue
            try:
                kind, payload = conn.recv()
            except (EOFError, OSError):
                proc.join(5)
                reason = f"worker {self._crash_reason(proc, 'building' if phase == 'build' else 'running')}"
                self._lose_worker()
                return self._fault(kernel, config, "crash", reason, t0)
            if kind == "phase":
                phase = "run"
                deadline = time.perf_counter() + self.timeout_s
                continue
            if kind == "result":
                m: Measurement = payload
                m.wall_s = time.perf_counter() - t0
                if m.status == "out_of_bounds":
                    # a write outside a buffer may have corrupted the driver's heap (seen on PoCL):
                    # the next job gets a fresh worker
                    self._lose_worker()
                return m
            if kind == "error":
                return self._fault(kernel, config, "runtime_error", f"harness error: {payload}", t0)

    def _fault(self, kernel: Kernel, config: LaunchConfig, status: Status, reason: str, t0: float) -> Measurement:
        log.info("%s %s: %s", kernel.name, status, reason)
        return Measurement(
            kernel_id=kernel.id, kernel_name=kernel.name, device=self.device.name,
            gsize=tuple(config.gsize), lsize=tuple(config.lsize) if config.lsize else None,
            args=[arg_dict(a) for a in config.args], status=status, reason=reason,
            meter=self.meter_name or "none", wall_s=time.perf_counter() - t0,
            harness_version=HARNESS_VERSION,
        )

    def describe(self) -> dict[str, Any]:
        return {"device": asdict(self.device), "meter": self.meter_name, "harness_version": HARNESS_VERSION}
