"""Compute backends the harness runs kernels on. OpenCL is the one implemented here."""
