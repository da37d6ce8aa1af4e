"""``python -m kernelcast.models.static FILE.cl [...]``: static features of every kernel, with timing.

Examples::

    python -m kernelcast.models.static datagen/bundled/linalg.cl --kernel la_matmul_tiled --json
    python -m kernelcast.models.static datagen/bundled/*.cl --no-ptx --env gsize0=65536 lsize0=256
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time
from pathlib import Path

from kernelcast.models.static.extract import extract
from kernelcast.models.static.features import DEFAULTS

from kernelcast.clang import ParseError, kernel_signatures
from kernelcast.schema import Kernel


def _env(items: list[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for it in items:
        k, sep, v = it.partition("=")
        if not sep:
            raise SystemExit(f"--env takes NAME=VALUE, got {it!r}")
        try:
            out[k] = float(v)
        except ValueError:
            raise SystemExit(f"--env {k}: {v!r} is not a number") from None
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kernelcast.models.static", description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", type=Path, help="OpenCL C (.cl) or CUDA (.cu) sources")
    ap.add_argument("--kernel", action="append", default=[], help="only these kernels (repeatable)")
    ap.add_argument("--build-options", default="", help="OpenCL build options (-D...)")
    ap.add_argument("--no-ptx", action="store_true", help="source features only")
    ap.add_argument("--no-ptxas", action="store_true", help="skip ptxas -v resources")
    ap.add_argument("--arch", default=None, help="PTX target, e.g. sm_75")
    ap.add_argument("--env", nargs="*", default=[], help="NAME=VALUE for evaluating the counts")
    ap.add_argument("--json", action="store_true", help="print full features as JSON lines")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    env = _env(args.env)
    times: list[float] = []
    status = 0
    for path in args.files:
        try:
            source = path.read_text()
        except OSError as e:
            print(f"error: cannot read {path}: {e.strerror}", file=sys.stderr)
            status = 1
            continue
        lang = "cuda" if path.suffix == ".cu" else "opencl"
        if lang == "opencl":
            try:
                names = list(kernel_signatures(source, args.build_options, filename=path.name))
            except ParseError as e:
                print(f"error: {path}: {e}", file=sys.stderr)
                status = 1
                continue
        else:
            names = args.kernel
            if not names:
                print(f"error: {path}: name the CUDA kernels with --kernel", file=sys.stderr)
                status = 1
                continue
        for name in names:
            if args.kernel and name not in args.kernel:
                continue
            k = Kernel(source=source, name=name, language=lang, build_options=args.build_options, origin=str(path))
            t = time.perf_counter()
            sf = extract(k, ptx=not args.no_ptx, arch=args.arch, resources=not args.no_ptxas)
            times.append(time.perf_counter() - t)
            if args.json:
                print(json.dumps(sf.to_dict()))
                continue
            line = f"{name:36s} {times[-1] * 1e3:7.1f} ms"
            if sf.source is not None:
                v = sf.source.evaluate(env)
                line += (f"  dims={sf.source.dims} loads={v['global_loads']:.3g} stores={v['global_stores']:.3g}"
                         f" flops32={v['fp32_add'] + v['fp32_mul'] + 2 * v['fp32_fma']:.3g} sfu={v['sfu']:.3g}"
                         f" eta={v['eta_coal']:.2f} barriers={v['barrier']:.3g} loops={len(sf.source.loops)}")
                unbound = sorted(s for s in sf.source.symbols() if s not in env and s not in DEFAULTS
                                 and not s.startswith(("gsize", "lsize", "ngroups", "len_"))
                                 and sf.source.symbol_map.get(s, s) not in env)
                if unbound:
                    line += f" (unbound, =1: {','.join(unbound)})"
            if sf.ptx is not None:
                line += f"  ptx: {sf.ptx.n_instructions} instr, {len(sf.ptx.loops)} loops"
            if sf.resources:
                line += f", {sf.resources.get('registers', '?')} regs"
            if sf.errors:
                line += "  [" + "; ".join(sf.errors) + "]"
            print(line)
    if times and not args.json:
        print(f"{len(times)} kernels, {sum(times):.2f} s, mean {statistics.mean(times) * 1e3:.1f} ms, "
              f"median {statistics.median(times) * 1e3:.1f} ms per kernel")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
