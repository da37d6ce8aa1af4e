"""Keep a harness worker from outliving its parent or its own deadline.

The parent kills a worker whose kernel runs past the timeout, but a parent that is itself killed
(``kill -9``, OOM killer) cannot: the worker would be re-parented to PID 1 and keep burning a core.
Installed from inside the worker:

* ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` (Linux, via ctypes): the kernel kills the worker the moment
  its parent dies, even while the worker is blocked inside the driver holding the GIL. Linux sends
  it when the parent *thread* that started the worker ends, so a :class:`~instrument.harness.Harness`
  must be started (its first ``run``) from a thread that outlives it (the main thread everywhere
  in kernelcast).
* a watchdog thread that polls ``os.getppid()`` (every platform; the fallback where ``prctl`` is
  missing) and kills the worker when the parent is gone.
* SIGINT is ignored: Ctrl-C is the parent's to handle; a SIGINT reaching the worker alone would
  otherwise store the configuration in flight as a permanent ``crash``.
* a per-job deadline on an interval timer whose signal keeps its default action (terminate): a
  worker still inside one job after the parent's own limits plus a grace period ends, whatever it
  is blocked in. The parent's limits always fire first, so a live parent still reports ``timeout``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import signal
import sys
import threading

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1
#: seconds the worker's own deadline runs past the parent's (build + run) limits
DEADLINE_GRACE_S = 10.0
POLL_S = 0.5
#: longest deadline the interval timer takes (a year; larger values overflow time_t on some platforms)
MAX_DEADLINE_S = 365 * 24 * 3600.0


def _set_pdeathsig() -> bool:
    """Ask the Linux kernel to SIGKILL this process when its parent dies. False if unavailable."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return int(libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _watch_parent(parent_pid: int) -> None:
    ev = threading.Event()
    while not ev.wait(POLL_S):
        if os.getppid() != parent_pid:
            log.debug("parent %d gone: worker exits", parent_pid)
            _die()


def bind_to_parent(parent_pid: int) -> None:
    """Make this (worker) process die with ``parent_pid``. Call first thing in the worker.

    The worker also ignores SIGINT: Ctrl-C is the parent's to handle (it stops the worker), and a
    SIGINT that reaches the worker alone must not turn the configuration in flight into a
    permanent ``crash`` row."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _set_pdeathsig()
    if os.getppid() != parent_pid:     # the parent died before prctl took effect
        _die()
    threading.Thread(target=_watch_parent, args=(parent_pid,), name="kernelcast-lifeline", daemon=True).start()


def arm_deadline(seconds: float) -> None:
    """End this process if the current job is still running after ``seconds`` (0 disarms).

    SIGALRM with its default disposition terminates the process in the kernel, so this works even
    while the main thread is blocked in a driver call that holds the GIL."""
    if not hasattr(signal, "setitimer"):
        return
    if seconds > 0:
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.setitimer(signal.ITIMER_REAL, min(seconds, MAX_DEADLINE_S))
    else:
        signal.setitimer(signal.ITIMER_REAL, 0)
