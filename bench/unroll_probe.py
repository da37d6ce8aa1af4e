"""How far the GPU compilers found on this machine unroll a loop they do not unroll fully.

```
python -m kernelcast.bench.unroll_probe [--ops 1,4,16,64] [--loads 0,1,4] [--trips 17,64,1000,n] [--json]
```

Each probe is one kernel with one loop: ``ops`` fp32 multiply-adds (``a = a * x + c``) per trip over four
accumulators, the first ``loads`` of them on a value loaded from global memory in that trip, and a
trip count that is a constant or, for ``n``, a kernel argument. It is compiled without a GPU by
``nvcc -ptx -arch=sm_86`` and by clang's AMDGPU back-end (``-x hip --offload-arch=gfx90a -O3 -S``,
the set-up :mod:`models.static.amdgpu` uses), and the unroll factor is read off the code: the
fp32 operations between the loop's label and its backward branch, over ``ops`` (``full``: no
loop left; ``-``: the compiler is not installed or did not compile the probe). The partial-unroll
rule of the GPU device class (:data:`models.static.loops.GPU_UNROLL_BUDGET`) is the one these
factors follow.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

from kernelcast.models.static.amdgpu import PRELUDE, find_amdgpu_clang
from kernelcast.models.static.ptx import _run

from kernelcast.options import Parser

#: fp32 arithmetic in PTX and in AMDGPU assembly (a packed ``v_pk_`` instruction does two lanes)
_PTX_FP = re.compile(r"^\s*(?:@%p\d+\s+)?(?:fma\.rn|add|sub|mul)(?:\.rn)?\.f32\b", re.M)
_AMD_FP = re.compile(r"^\s*(v_(?:pk_)?(?:fma|fmac|fmamk|fmaak|add|sub|mul|mac)_f32)(?:_e32|_e64|_sdwa|_dpp)?\b", re.M)


def probe_source(ops: int, loads: int, trip: str) -> str:
    """The CUDA source of one probe (``trip``: a constant or ``n``, the kernel's argument)."""
    bound = "n" if trip == "n" else str(int(trip))
    body = []
    for j in range(ops):
        x = f"in[(i * {max(loads, 1)} + {j}) * s + t]" if j < loads else "x"
        body.append(f"        a{j % 4} = a{j % 4} * {x} + {1.0 + j / 64:.6f}f;")
    return ("__global__ void probe(float *out, const float *in, int n, int s)\n{\n"
            "    int t = blockIdx.x * blockDim.x + threadIdx.x;\n"
            "    float x = out[t], a0 = x, a1 = x + 1.0f, a2 = x + 2.0f, a3 = x + 3.0f;\n"
            f"    for (int i = 0; i < {bound}; i++) {{\n" + "\n".join(body) + "\n    }\n"
            "    out[t] = a0 + a1 + a2 + a3;\n}\n")


def loop_factor(code: str, label: str, branch: str, fp: re.Pattern[str], per_trip: int) -> str:
    """The unroll factor of the largest loop in ``code`` (``label``: a regex of a block label with
    one group, its name; ``branch``: of a branch to a named block): its fp32 operations over
    ``per_trip``, ``full`` where no backward branch is left."""
    lines = code.splitlines()
    where: dict[str, int] = {}
    best = -1
    for i, ln in enumerate(lines):
        m = re.match(label, ln)
        if m:
            where[m.group(1)] = i
            continue
        b = re.search(branch, ln)
        if b and b.group(1) in where:
            span = "\n".join(lines[where[b.group(1)]:i + 1])
            n = sum(2 if "_pk_" in m.group(0) else 1 for m in fp.finditer(span))
            best = max(best, n)
    if best < 0:
        return "full"
    return f"{best / per_trip:g}"


def nvcc_factor(src: str, ops: int) -> str:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return "-"
    with tempfile.TemporaryDirectory(prefix="kc_unroll_") as td:
        path = os.path.join(td, "probe.cu")
        Path(path).write_text(src)
        r = _run([nvcc, "-ptx", "-arch=sm_86", path, "-o", os.path.join(td, "probe.ptx")], cwd=td)
        if r is None or r.returncode != 0:
            return "-"
        code = Path(td, "probe.ptx").read_text()
    return loop_factor(code, r"^(\$L__BB\d+_\d+):", r"\bbra(?:\.uni)?\s+(\$L__BB\d+_\d+);", _PTX_FP, ops)


def amdgpu_factor(src: str, ops: int, target: str = "gfx90a") -> str:
    clang = find_amdgpu_clang()
    if clang is None:
        return "-"
    with tempfile.TemporaryDirectory(prefix="kc_unroll_") as td:
        pre = os.path.join(td, "prelude.h")
        path = os.path.join(td, "probe.cu")
        Path(pre).write_text(PRELUDE)
        Path(path).write_text(src)
        out = os.path.join(td, "probe.s")
        r = _run([clang, "-x", "hip", f"--offload-arch={target}", "-nogpulib", "-nogpuinc", "--cuda-device-only",
                  "-O3", "-S", "-w", "-include", pre, path, "-o", out], cwd=td)
        if r is None or r.returncode != 0 or not os.path.exists(out):
            return "-"
        code = Path(out).read_text()
    return loop_factor(code, r"^(\.LBB\d+_\d+):", r"\bs_cbranch_\w+\s+(\.LBB\d+_\d+)", _AMD_FP, ops)


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="python -m kernelcast.bench.unroll_probe", description=__doc__.split("\n")[0])
    ap.add_argument("--ops", default="1,4,16,64", help="fp32 operations per trip (comma-separated)")
    ap.add_argument("--loads", default="0,1,4", help="global loads per trip, at most --ops (comma-separated)")
    ap.add_argument("--trips", default="17,64,1000,n", help="trip counts: constants, or n for a kernel argument")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    a = ap.parse_args(argv)
    try:
        ops_l, loads_l = _ints(a.ops), _ints(a.loads)
        trips = [t.strip() for t in a.trips.split(",") if t.strip()]
        if not ops_l or min(ops_l) < 1 or min(loads_l, default=0) < 0 or not trips or \
                any(t != "n" and not (t.isdigit() and int(t) > 0) for t in trips):
            raise ValueError
    except ValueError:
        ap.error("--ops takes positive integers, --loads non-negative integers, --trips positive integers or n")
    rows = []
    for ops in ops_l:
        for loads in loads_l:
            if loads > ops:
                continue
            for trip in trips:
                src = probe_source(ops, loads, trip)
                rows.append({"ops": ops, "loads": loads, "trip": trip,
                             "nvcc_sm_86": nvcc_factor(src, ops), "clang_gfx90a": amdgpu_factor(src, ops)})
    if a.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{'ops':>4} {'loads':>5} {'trip':>5}  {'nvcc sm_86':>10}  {'clang gfx90a':>12}")
    for r in rows:
        print(f"{r['ops']:>4} {r['loads']:>5} {r['trip']:>5}  {r['nvcc_sm_86']:>10}  {r['clang_gfx90a']:>12}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
