"""The memory hierarchy's traffic: how many bytes of a launch each level serves, and its hit rates.

The static features give, per work-item (:meth:`~models.static.features.SourceFeatures.evaluate_many`):

* ``global_sector_bytes``: the bytes of the segments a warp fetches at each global access, per
  active lane, lanes that share a segment counting it once (a broadcast of a 4-byte word to 32
  lanes fetches one 32-byte segment: 1 byte per lane; a scattered access one segment per lane).
  This is what the first level (L1) serves: reuse across the threads of a warp, the coalescing of
  the access under the work-group's shape (:mod:`models.static.coalescing`).
* ``global_block_bytes``: the same, a load read alike by several warps of one work-group counted
  once for them (:func:`~models.static.features.block_reuse`: ``shifts[channel]`` in every
  work-item, a row of a tile that every row of the work-group reads). The first warp's fetch misses,
  the others hit the first level: what passes on to the second level (L2). A global -> local
  (shared memory) copy is counted where the kernel makes it, once per work-group, and the
  work-items' reads of the tile are local accesses, not global traffic.
* ``arg_bytes:<name>`` / ``arg_bytes:<name>@store``: ``global_block_bytes`` of one buffer argument's
  loads / stores (each direction at most the buffer's size in DRAM).

Past the second level, each buffer's traffic is what its accesses fetch, at most the buffer's size
(``__bytes_<name>`` of the configuration): the reuse across the work-groups of a launch (the
halo rows two neighbouring tiles share, the input every output row re-reads) is taken as served by
the last-level cache, the compulsory traffic alone reaching DRAM. That assumes the reuse distance
fits in the cache; a buffer without a known size is charged its whole traffic.

Hit rates follow: ``l1_hit = 1 - l2 / l1``, ``l2_hit = 1 - dram / l2``; the average latency of a
global access weighs each level's latency by the share it serves (:func:`average_latency`).

The functions take arrays over configurations and know no device: a device class gives the sizes
and latencies (the GPU class: :mod:`.gpu`). Nothing here is specific to GPUs; a CPU's caches can
use the same traffic split with their own line size as the segment.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from kernelcast.models.static.features import ARG_BYTES_PREFIX, ARG_STORE_SUFFIX


@dataclass
class Traffic:
    """Bytes of one launch per memory level, per configuration."""

    requested: np.ndarray     # bytes the work-items ask for (loads, stores, atomics)
    l1: np.ndarray            # segment bytes the warps fetch: what the first level serves
    l2: np.ndarray            # bytes past the first level (its misses)
    dram: np.ndarray          # bytes past the last-level cache

    @property
    def l1_hit(self) -> np.ndarray:
        """Share of the first level's bytes it serves itself."""
        return np.where(self.l1 > 0, 1.0 - self.l2 / np.maximum(self.l1, 1e-30), 0.0)

    @property
    def l2_hit(self) -> np.ndarray:
        """Share of the second level's bytes it serves (the rest come from DRAM)."""
        return np.where(self.l2 > 0, 1.0 - self.dram / np.maximum(self.l2, 1e-30), 0.0)


def launch_traffic(f: Mapping[str, np.ndarray], env: Mapping[str, np.ndarray], items: np.ndarray) -> Traffic:
    """The traffic of a launch of ``items`` work-items from its evaluated features ``f`` and its
    configuration ``env`` (buffer sizes ``__bytes_<name>``; module docstring)."""
    requested = (f["global_load_bytes"] + f["global_store_bytes"] + f["global_atomic_bytes"]) * items
    l1 = f.get("global_sector_bytes", f["global_fetched_bytes"]) * items
    l2 = np.minimum(f.get("global_block_bytes", f["global_fetched_bytes"]) * items, l1)
    dram = np.zeros_like(l2)
    seen = False
    for key, per_item in f.items():
        if not key.startswith(ARG_BYTES_PREFIX):
            continue
        seen = True
        t = per_item * items
        size = env.get("__bytes_" + key[len(ARG_BYTES_PREFIX):].removesuffix(ARG_STORE_SUFFIX))
        dram = dram + (np.minimum(t, np.asarray(size, dtype=np.float64)) if size is not None else t)
    if not seen:
        dram = l2.copy()
    return Traffic(requested, l1, np.maximum(l2, dram), dram)


def average_latency(t: Traffic, l1_cycles: float, l2_cycles: float, dram_cycles: float) -> np.ndarray:
    """Average latency (cycles) of a global access: each level's latency weighed by the share of
    the bytes it serves."""
    h1, h2 = t.l1_hit, t.l2_hit
    return h1 * l1_cycles + (1.0 - h1) * (h2 * l2_cycles + (1.0 - h2) * dram_cycles)
