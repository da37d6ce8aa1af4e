from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def device():
    """The OpenCL device the tests run on for real (skips where none can build)."""
    from instrument.backends.opencl import DeviceNotFound, select_device

    try:
        return select_device("auto")
    except DeviceNotFound as e:
        pytest.skip(f"no working OpenCL device: {e}")


@pytest.fixture(scope="module")
def harness(device):
    from instrument.harness import Harness

    with Harness(device, meter="none", timeout_s=20) as h:
        yield h
