"""Named datagen presets: the corpora and options of a standard dataset in one word.

``standard`` is the dataset the models are evaluated on: the bundled corpus, every ingested
corpus kept in the repository (``datagen/corpora/*/kernels.jsonl``; none is kept today, so the
preset is bundled + synthetic), and :data:`STANDARD_SYNTHETIC` synthetic kernels generated
deterministically (seed ``synth_seed``) into ``DATASET/corpus-synth`` on the first run, measured
under simple and memory-analysis argument selection, with regime samples (LLMPerf's 25:60:15
work-group counts plus IQR rebalancing) and tuning sweeps. A preset gives defaults: options
given on the command line override them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelcast.datagen.synth import write_synth_corpus

from kernelcast.errors import InputError

STANDARD_SYNTHETIC = 1500
SYNTH_DIR = "corpus-synth"


class UnknownPreset(InputError, ValueError):
    """``--preset`` names no preset."""


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    bundled: bool = True
    ingested: bool = True                   # every corpus under datagen/corpora/
    synthetic: int = 0
    synth_seed: int = 0
    options: dict[str, Any] = field(default_factory=dict)   # DatagenOptions fields

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "bundled": self.bundled, "ingested": self.ingested, "synthetic": self.synthetic,
                "synth_seed": self.synth_seed, "options": dict(self.options)}


PRESETS: dict[str, Preset] = {
    "standard": Preset(
        "standard",
        "bundled + ingested corpora + 1,500 synthetic kernels; simple and memory selection; 24 regime "
        "samples over 3 local sizes with IQR rebalancing and 4 tuning sweeps of 4 local sizes per kernel",
        synthetic=STANDARD_SYNTHETIC,
        options={"configs_per_kernel": 24, "lsizes_per_kernel": 3, "sweeps_per_kernel": 4, "lsizes_per_sweep": 4,
                 "args": "both", "rebalance": "iqr"},
    ),
}


def get_preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise UnknownPreset(f"--preset {name!r}: unknown preset; available: {', '.join(PRESETS)}") from None


def ingested_corpora(repo_root: Path | None = None) -> list[Path]:
    """Corpus directories of ingested kernels kept in the repository (``datagen/corpora/*``)."""
    root = repo_root or Path(__file__).parent
    d = root / "corpora"
    return sorted(p.parent for p in d.glob("*/kernels.jsonl")) if d.is_dir() else []


def synthetic_corpus(dataset: Path, preset: Preset) -> Path:
    """The preset's synthetic corpus inside the dataset directory, generated on first use
    (deterministic: the same count and seed give the same kernels, so a rerun resumes)."""
    out = dataset / SYNTH_DIR
    mpath = out / "manifest.json"
    if mpath.is_file() and (out / "kernels.jsonl").is_file():
        m = json.loads(mpath.read_text())
        if m.get("count") == preset.synthetic and m.get("seed") == preset.synth_seed:
            return out
    write_synth_corpus(out, preset.synthetic, preset.synth_seed)
    return out
