"""Training checkpoints without pickle: model and optimizer tensors in safetensors, the rest in JSON.

A checkpoint directory holds ``model.safetensors`` + ``config.json`` + tokenizer files (a loadable
model), ``optimizer.safetensors`` + ``optimizer.json`` (AdamW moments, param groups),
``scheduler.json``, ``rng.safetensors`` (torch RNG) and ``trainer_state.json`` (epoch, position in
the epoch, step, best loss, history, split). It is written to a temporary directory and renamed
into place, so a kill while saving leaves the previous checkpoint intact.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from kernelcast.models.learned.model import KernelPerfModel

log = logging.getLogger(__name__)

STATE_NAME = "trainer_state.json"


def _json_safe(v: Any) -> Any:
    if isinstance(v, torch.Tensor):
        return v.tolist()
    if isinstance(v, dict):
        return {str(k): _json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_safe(x) for x in v]
    return v


def optimizer_to_files(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    sd = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for idx, st in sd["state"].items():
        for name, v in st.items():
            if isinstance(v, torch.Tensor):
                tensors[f"{idx}.{name}"] = v.detach().cpu().contiguous()
            else:
                scalars.setdefault(str(idx), {})[name] = v
    return tensors, {"param_groups": _json_safe(sd["param_groups"]), "scalars": scalars}


def optimizer_from_files(tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> dict[str, Any]:
    state: dict[int, dict[str, Any]] = {}
    for key, v in tensors.items():
        idx, name = key.split(".", 1)
        state.setdefault(int(idx), {})[name] = v
    for idx, sc in meta.get("scalars", {}).items():
        state.setdefault(int(idx), {}).update(sc)
    return {"state": state, "param_groups": meta["param_groups"]}


def save_checkpoint(directory: str | os.PathLike[str], model: KernelPerfModel, tokenizer: Any,
                    optimizer: torch.optim.Optimizer, scheduler: Any, state: dict[str, Any]) -> Path:
    from safetensors.torch import save_file

    final = Path(directory)
    tmp = final.with_name(f".{final.name}.tmp")
    old = final.with_name(f".{final.name}.old")
    if tmp.exists():
        shutil.rmtree(tmp)
    model.save_pretrained(tmp, tokenizer=tokenizer)
    tensors, meta = optimizer_to_files(optimizer)
    save_file(tensors, str(tmp / "optimizer.safetensors"))
    (tmp / "optimizer.json").write_text(json.dumps(meta), encoding="utf-8")
    (tmp / "scheduler.json").write_text(json.dumps(_json_safe(scheduler.state_dict())), encoding="utf-8")
    save_file({"torch_cpu": torch.get_rng_state()}, str(tmp / "rng.safetensors"))
    (tmp / STATE_NAME).write_text(json.dumps(_json_safe(state), indent=1), encoding="utf-8")
    if final.exists():
        if old.exists():
            shutil.rmtree(old)
        os.replace(final, old)
    os.replace(tmp, final)
    if old.exists():
        shutil.rmtree(old)
    log.debug("checkpoint saved: %s (step %s)", final, state.get("step"))
    return final


def checkpoint_dir(directory: str | os.PathLike[str]) -> Path | None:
    """The usable checkpoint at ``directory`` (or the previous one a kill during saving left aside)."""
    final = Path(directory)
    for d in (final, final.with_name(f".{final.name}.old")):
        if (d / STATE_NAME).is_file() and (d / "model.safetensors").is_file():
            return d
    return None


def read_state(directory: str | os.PathLike[str]) -> dict[str, Any]:
    return json.loads((Path(directory) / STATE_NAME).read_text(encoding="utf-8"))


def restore_training(directory: str | os.PathLike[str], optimizer: torch.optim.Optimizer, scheduler: Any) -> None:
    """Load optimizer, scheduler and RNG state saved by :func:`save_checkpoint` (the model is loaded
    with ``KernelPerfModel.from_pretrained``)."""
    from safetensors.torch import load_file

    d = Path(directory)
    meta = json.loads((d / "optimizer.json").read_text(encoding="utf-8"))
    optimizer.load_state_dict(optimizer_from_files(load_file(str(d / "optimizer.safetensors")), meta))
    scheduler.load_state_dict(json.loads((d / "scheduler.json").read_text(encoding="utf-8")))
    torch.set_rng_state(load_file(str(d / "rng.safetensors"))["torch_cpu"])
