"""Running ``kernelcast`` commands in the test process."""

from __future__ import annotations

import contextlib
import io
import subprocess


def run_here(*args: str) -> subprocess.CompletedProcess[str]:
    """``kernelcast ARGS`` run in this process (the same parser, checks and output as the program,
    without starting an interpreter per call); what it prints comes back as a finished process's
    would. Log records go to pytest's capture, not into ``stderr``."""
    from kernelcast import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(list(args))
    return subprocess.CompletedProcess(["kernelcast", *args], rc, out.getvalue(), err.getvalue())
