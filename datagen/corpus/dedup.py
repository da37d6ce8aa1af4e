"""Stage 6 of corpus ingest: near-duplicate detection with MinHash signatures over token shingles
(user identifiers mapped to a placeholder) and LSH banding for candidates.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np
from kernelcast.datagen.corpus.preprocess import LEX

SHINGLE_SIZE = 5


_KEYWORDS = frozenset("""
auto break case char const continue default do double else enum extern float for goto if inline int
long register restrict return short signed sizeof static struct switch typedef union unsigned void
volatile while bool half uchar ushort uint ulong size_t ptrdiff_t intptr_t uintptr_t
kernel global local constant private read_only write_only read_write __attribute__ __restrict
image1d_t image2d_t image3d_t image1d_array_t image1d_buffer_t image2d_array_t sampler_t event_t
true false NULL
""".split())

_VECTOR_TYPE = re.compile(
    r"^(?:char|uchar|short|ushort|int|uint|long|ulong|float|double|half)(?:2|3|4|8|16)$")

_BUILTINS = frozenset("""
get_global_id get_local_id get_group_id get_global_size get_local_size get_num_groups get_work_dim
get_global_offset barrier mem_fence read_mem_fence write_mem_fence
acos acosh acospi asin asinh asinpi atan atan2 atanh atanpi atan2pi cbrt ceil copysign cos cosh cospi
erfc erf exp exp2 exp10 expm1 fabs fdim floor fma fmax fmin fmod fract frexp hypot ilogb ldexp
lgamma log log2 log10 log1p logb mad maxmag minmag modf nan nextafter pow pown powr remainder remquo
rint rootn round rsqrt sin sincos sinh sinpi sqrt tan tanh tanpi tgamma trunc
native_cos native_divide native_exp native_exp2 native_exp10 native_log native_log2 native_log10
native_powr native_recip native_rsqrt native_sin native_sqrt native_tan
half_cos half_divide half_exp half_log half_powr half_recip half_rsqrt half_sin half_sqrt half_tan
abs abs_diff add_sat hadd rhadd clamp clz mad_hi mad_sat max min mul_hi rotate sub_sat upsample
popcount mad24 mul24 degrees radians mix step smoothstep sign cross dot distance length normalize
fast_distance fast_length fast_normalize isequal isnotequal isgreater isgreaterequal isless
islessequal isfinite isinf isnan isnormal signbit any all bitselect select shuffle shuffle2
async_work_group_copy async_work_group_strided_copy wait_group_events prefetch printf
""".split())

_BUILTIN_PREFIXES = ("convert_", "as_", "vload", "vstore", "atomic_", "atom_", "read_image",
                     "write_image", "get_image")


def dedup_tokens(text: str) -> list[str]:
    """Tokens for near-duplicate detection: user identifiers become ``ID``."""
    toks: list[str] = []
    for m in LEX.finditer(text):
        kind = m.lastgroup
        if kind in ("ws", "comment"):
            continue
        tok = m.group()
        if kind == "ident" and not (tok in _KEYWORDS or tok in _BUILTINS or _VECTOR_TYPE.match(tok)
                                    or tok.startswith(_BUILTIN_PREFIXES)):
            tok = "ID"
        toks.append(tok)
    return toks


def shingle_hashes(tokens: Sequence[str], k: int = SHINGLE_SIZE) -> np.ndarray:
    """Distinct 64-bit hashes of the k-token shingles (the whole sequence if shorter)."""
    if not tokens:
        return np.zeros(0, dtype=np.uint64)
    n = max(1, len(tokens) - k + 1)
    seen = set()
    for i in range(n):
        s = "\x1f".join(tokens[i:i + k]).encode("utf-8")
        seen.add(int.from_bytes(hashlib.blake2b(s, digest_size=8).digest(), "little"))
    return np.fromiter(seen, dtype=np.uint64, count=len(seen))


_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _mix64(z: np.ndarray) -> np.ndarray:
    """The splitmix64 finalizer, elementwise on uint64 (wrapping arithmetic)."""
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


class MinHasher:
    """MinHash signatures with ``num_perm`` seeded hash functions ``h_i(x) = mix64(x ^ seed_i)``."""

    def __init__(self, num_perm: int = 128, seed: int = 1) -> None:
        rng = np.random.default_rng(seed)
        self.num_perm = num_perm
        self.seeds = rng.integers(0, np.iinfo(np.uint64).max, size=num_perm, dtype=np.uint64,
                                  endpoint=True)

    def signature(self, hashes: np.ndarray, block: int = 4096) -> np.ndarray:
        sig = np.full(self.num_perm, np.iinfo(np.uint64).max, dtype=np.uint64)
        for s in range(0, len(hashes), block):
            x = _mix64(hashes[None, s:s + block] ^ self.seeds[:, None])
            sig = np.minimum(sig, x.min(axis=1))
        return sig

    @staticmethod
    def similarity(a: np.ndarray, b: np.ndarray) -> float:
        """Estimated Jaccard similarity of the sets behind two signatures."""
        return float(np.mean(a == b))


def lsh_params(num_perm: int, threshold: float, min_recall: float = 0.995) -> tuple[int, int]:
    """(bands, rows): the most rows per band that still makes a pair at ``threshold`` a candidate
    with probability at least ``min_recall``."""
    for rows in sorted((r for r in range(1, num_perm + 1) if num_perm % r == 0), reverse=True):
        bands = num_perm // rows
        if 1.0 - (1.0 - threshold ** rows) ** bands >= min_recall:
            return bands, rows
    return num_perm, 1


class NearDuplicateIndex:
    """Kept signatures in LSH buckets; :meth:`query` returns the most similar kept item."""

    def __init__(self, num_perm: int, threshold: float) -> None:
        self.threshold = threshold
        self.bands, self.rows = lsh_params(num_perm, threshold)
        self.buckets: dict[tuple[int, bytes], list[int]] = {}
        self.signatures: list[np.ndarray] = []

    def _keys(self, sig: np.ndarray) -> list[tuple[int, bytes]]:
        return [(b, sig[b * self.rows:(b + 1) * self.rows].tobytes()) for b in range(self.bands)]

    def query(self, sig: np.ndarray) -> tuple[int, float] | None:
        best: tuple[int, float] | None = None
        seen: set[int] = set()
        for key in self._keys(sig):
            for idx in self.buckets.get(key, ()):
                if idx in seen:
                    continue
                seen.add(idx)
                sim = MinHasher.similarity(sig, self.signatures[idx])
                if sim >= self.threshold and (best is None or sim > best[1]):
                    best = (idx, sim)
        return best

    def add(self, sig: np.ndarray) -> int:
        idx = len(self.signatures)
        self.signatures.append(sig)
        for key in self._keys(sig):
            self.buckets.setdefault(key, []).append(idx)
        return idx
