"""Shared fixtures, and the rule that a test needing an OpenCL device fails without one.

A test needs a device when it uses the ``device`` fixture (directly or through ``harness``) or
carries ``@pytest.mark.device``. When such tests are selected, the session first checks that some
OpenCL device builds a kernel; if none does, the run stops before any test with
``no OpenCL device can build kernels: ...`` and a non-zero exit, so a broken install is never a
green run.

Opt-out, for working on the device-free parts only: ``KERNELCAST_TESTS_NO_DEVICE=1`` deselects the
tests that need a device and says how many in the summary. Neither the Makefile nor CI sets it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from kernelcast.instrument.backends import DeviceInfo
    from kernelcast.instrument.harness import Harness

NO_DEVICE_ENV = "KERNELCAST_TESTS_NO_DEVICE"

_DEVICE = pytest.StashKey["DeviceInfo | str"]()      # the selected device, or why there is none
_DESELECTED = pytest.StashKey[int]()                  # device tests deselected by the opt-out


def _opted_out() -> bool:
    return os.environ.get(NO_DEVICE_ENV, "") not in ("", "0")


def _needs_device(item: pytest.Item) -> bool:
    if item.get_closest_marker("device") is not None:
        return True
    if "device" not in getattr(item, "fixturenames", ()):
        return False
    # a test that parametrizes its own argument called "device" does not use the fixture
    callspec = getattr(item, "callspec", None)
    return callspec is None or "device" not in callspec.params


def _select_device() -> DeviceInfo | str:
    from kernelcast.instrument.backends import DeviceNotFound, select_device

    try:
        return select_device("auto")
    except DeviceNotFound as e:
        return str(e)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "device: needs an OpenCL device that builds kernels (fails without one; "
                                       f"{NO_DEVICE_ENV}=1 deselects)")


@pytest.hookimpl(trylast=True)          # after -m / -k have deselected what they will
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    needing = [it for it in items if _needs_device(it)]
    if not needing:
        return
    if _opted_out():
        drop = {id(it) for it in needing}
        items[:] = [it for it in items if id(it) not in drop]
        config.hook.pytest_deselected(items=needing)
        config.stash[_DESELECTED] = len(needing)
        return
    dev = _select_device()
    config.stash[_DEVICE] = dev
    if isinstance(dev, str):
        pytest.exit(f"no OpenCL device can build kernels: {dev} ({len(needing)} selected tests need one; "
                    f"{NO_DEVICE_ENV}=1 runs only the others)", returncode=1)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    n = config.stash.get(_DESELECTED, 0)
    if n:
        terminalreporter.write_line(f"{NO_DEVICE_ENV} is set: {n} tests that need an OpenCL device were deselected "
                                    "(not run)", yellow=True, bold=True)


@pytest.fixture(scope="session")
def device(pytestconfig: pytest.Config) -> DeviceInfo:
    """The OpenCL device the tests run on for real (the session check made sure there is one)."""
    dev = pytestconfig.stash.get(_DEVICE, None)
    if dev is None:
        dev = _select_device()
    if isinstance(dev, str):
        pytest.fail(f"no OpenCL device can build kernels: {dev}", pytrace=False)
    return dev


@pytest.fixture(scope="module")
def harness(device: DeviceInfo) -> Iterator[Harness]:
    from kernelcast.instrument.harness import Harness

    with Harness(device, meter="none", timeout_s=20) as h:
        yield h
