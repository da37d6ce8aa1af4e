"""Running kernels for real: OpenCL backend, isolated harness, timing, energy meters."""
