"""A small synthetic dataset with a learnable time law, for tests and smoke runs of training.

Kernel ``i`` runs a loop of ``work_i`` iterations per work item; its time is
``overhead + work_i * global_items * ns_per_op`` (x a little noise), so time grows in proportion to
the global size with a per-kernel slope the model must read from the source.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kernelcast.schema import Kernel

_TEMPLATE = """kernel void synth_{i}(global const float *a, global float *b, const int n) {{
  int g = get_global_id(0);
  if (g >= n)
    return;
  float x = a[g];
  for (int j = 0; j < {work}; ++j)
    x = x * {mul}f + {add}f;
  b[g] = x;
}}
"""


def synthetic_kernels(n_kernels: int, seed: int = 0) -> list[tuple[Kernel, int]]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n_kernels):
        work = int(2 ** rng.integers(0, 8))
        src = _TEMPLATE.format(i=i, work=work, mul=f"{1 + rng.random() / 100:.5f}", add=f"{rng.random():.4f}")
        out.append((Kernel(source=src, name=f"synth_{i}", dims=1, origin="synthetic"), work))
    return out


def synthetic_rows(n_kernels: int = 6, configs_per_kernel: int = 12, *, seed: int = 0, energy: bool = False,
                   noise: float = 0.02) -> tuple[pd.DataFrame, list[Kernel]]:
    """Dataset-like rows (the columns of ``datagen.generate.flatten`` that training reads) plus ``source``."""
    rng = np.random.default_rng(seed + 1)
    rows: list[dict[str, Any]] = []
    kernels = []
    for k, work in synthetic_kernels(n_kernels, seed):
        kernels.append(k)
        for c in range(configs_per_kernel):
            g = int(2 ** rng.integers(6, 17))
            lsz = [None, [32], [64]][c % 3]
            args = [{"name": "a", "kind": "buffer", "dtype": "float", "count": g, "value": None, "init": "random"},
                    {"name": "b", "kind": "buffer", "dtype": "float", "count": g, "value": None, "init": "random"},
                    {"name": "n", "kind": "scalar", "dtype": "int", "count": None, "value": str(g), "init": "random"}]
            t = (2.0 + work * g * 0.01) * float(np.exp(rng.normal(0, noise)))
            rows.append({
                "row_key": f"{k.id}-{c}", "kernel_id": k.id, "kernel_name": k.name, "kernel_origin": k.origin,
                "dims": 1, "pass": "sample" if c % 4 else "iqr", "status": "ok", "regime": "idle",
                "gsize": [g], "lsize": lsz, "global_items": g, "local_items": lsz[0] if lsz else None,
                "n_wg": g // lsz[0] if lsz else None, "args": json.dumps(args), "time_median_us": t,
                "energy_j": (t * 1e-6 * 50.0) if energy else None, "source": k.source,
            })
    return pd.DataFrame(rows), kernels


def write_synthetic_dataset(root: str | os.PathLike[str], n_kernels: int = 6, configs_per_kernel: int = 12, *,
                            seed: int = 0, energy: bool = False, status: str = "ok") -> Path:
    """A dataset directory readable by ``datagen.dataset.read_dataset`` with its ``kernels`` corpus."""
    from kernelcast.datagen.corpus_store import write_corpus
    from kernelcast.datagen.dataset import DatasetWriter

    frame, kernels = synthetic_rows(n_kernels, configs_per_kernel, seed=seed, energy=energy)
    root = Path(root)
    # the writer first: it refuses a non-empty directory without a manifest
    with DatasetWriter(root, {"seed": seed, "kind": "kernelcast-dataset", "synthetic": True}) as w:
        write_corpus(root / "kernels", [k.to_dict() for k in kernels], {"origin": "synthetic"})
        for r in frame.drop(columns=["source"]).to_dict("records"):
            r["args"] = json.loads(r["args"])
            r["status"] = status
            w.append(r)
    return root
