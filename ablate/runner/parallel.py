"""Sharded training (``train.strategy: fsdp``): FSDP2 through Lightning's ``ModelParallelStrategy``,
activation checkpointing, and the sharded checkpoints that go with it.

- ``strategy_for(train, nodes)``: the Lightning strategy and precision of a run. FSDP on one device is plain
  training (nothing to shard). Over several, ``ModelParallelStrategy`` with every device data-parallel; the
  model is sharded in ``LitDecoder.configure_model`` by ``shard_model``: ``fully_shard`` on each decoder
  block, then on the root (embedding, final norm, head). ``bf16-mixed`` is FSDP2's ``MixedPrecisionPolicy``:
  bf16 parameters and compute, fp32 gradient reduction, fp32 sharded master weights and optimizer state (no
  autocast on top).
- ``checkpoint_blocks`` (``train.activation_checkpointing``, every strategy) wraps each block before sharding.
- Checkpoints: ``checkpoints/last.ckpt`` stays a plain file for every run (its step, the monitor's record, the
  run config: whatever reads a checkpoint's position reads it the same way). A sharded run's weights and
  optimizer state are a ``torch.distributed.checkpoint`` folder beside it (``sharded-<stage>-<step>``, one
  file per rank), which ``last.ckpt`` names under ``"sharded"``; a new folder is written in full before
  ``last.ckpt`` is swapped to it (atomically), and only then the old one is removed, so a kill at any moment
  leaves a complete checkpoint. ``resume_path`` gives Lightning the folder to resume from; ``decoder_state``
  reads the decoder's full weights from either kind without a process group (export, evaluation, the next
  training stage).
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Literal, cast

import torch
from torch import nn

from ablate.ablations.model import Decoder
from ablate.config import TrainConfig
from ablate.layout import atomic_path

if TYPE_CHECKING:
    import lightning as L
    from lightning.pytorch.strategies import Strategy
    from torch.distributed.device_mesh import DeviceMesh

log = logging.getLogger(__name__)

SHARDED_KEY = "sharded"  # in last.ckpt: the name of the torch.distributed.checkpoint folder beside it
# a Lightning precision: train.precision, ``auto`` resolved
TrainerPrecision = Literal["32-true", "bf16-mixed", "16-mixed"]


def is_sharded(train: TrainConfig, world: int) -> bool:
    """Does this run shard its model? ``strategy: fsdp`` over more than one process."""
    return train.strategy == "fsdp" and world > 1


def strategy_for(train: TrainConfig, *, nodes: int = 1) -> tuple[str | Strategy, TrainerPrecision]:
    """``(Lightning strategy, Lightning precision)`` for ``train`` (precision already resolved from ``auto``).

    Sharded runs take their mixed precision from FSDP2's policy (``shard_model``), so Lightning runs them in
    ``32-true`` (no autocast over bf16 parameters)."""
    world = train.devices * nodes
    precision = cast(TrainerPrecision, train.precision)  # the caller resolved ``auto``
    if train.strategy == "fsdp" and world == 1:
        return "auto", precision
    if not is_sharded(train, world):
        return train.strategy, precision
    from lightning.pytorch.strategies import ModelParallelStrategy

    return ModelParallelStrategy(data_parallel_size=world, tensor_parallel_size=1), "32-true"


def checkpoint_blocks(model: Decoder) -> None:
    """Activation checkpointing per decoder block: a block keeps only its input for the backward pass, which
    recomputes the rest. The state dict's keys do not change."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointImpl, checkpoint_wrapper

    for i, block in enumerate(model.blocks):
        model.blocks[i] = checkpoint_wrapper(block, checkpoint_impl=CheckpointImpl.NO_REENTRANT)


def shard_model(model: Decoder, mesh: DeviceMesh, *, precision: str, compile: bool) -> None:
    """FSDP2 on ``model``: each decoder block a unit (compiled first with ``compile``), then the root.

    The last block is not resharded after the forward pass: the backward pass starts with it."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    half = {"bf16-mixed": torch.bfloat16}.get(precision)
    policy = MixedPrecisionPolicy(param_dtype=half,
                                  reduce_dtype=torch.float32) if half else MixedPrecisionPolicy()
    for i, block in enumerate(model.blocks):
        if compile:
            block.compile()
        fully_shard(block, mesh=mesh, mp_policy=policy, reshard_after_forward=i < len(model.blocks) - 1)
    fully_shard(model, mesh=mesh, mp_policy=policy)


def full_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The sharded ``model``'s full state dict on rank 0's CPU (empty elsewhere); every rank must call it."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return cast(dict[str, torch.Tensor], state)  # a full state dict: tensors


# ---------------------------------------------------------------- sharded checkpoints


def save_sharded(trainer: L.Trainer, ckpt: Path, name: str) -> None:
    """Write the sharded checkpoint ``name`` beside ``ckpt`` (every rank its shard), then point ``ckpt`` at it
    and remove older sharded folders that no checkpoint file names (rank 0). Collective."""
    folder = ckpt.parent / name
    if trainer.is_global_zero and folder.exists():  # left by a run cut while writing it
        shutil.rmtree(folder)
    trainer.strategy.barrier()
    trainer.save_checkpoint(folder)
    if trainer.is_global_zero:
        meta = torch.load(folder / "meta.pt", map_location="cpu", weights_only=False)
        with atomic_path(ckpt) as tmp:
            torch.save({**meta, SHARDED_KEY: name}, tmp)
        prune_sharded(ckpt.parent)
    trainer.strategy.barrier()


def sharded_folder(ckpt: Path) -> Path | None:
    """The sharded folder a checkpoint file names, or None for a plain checkpoint."""
    meta = torch.load(ckpt, map_location="cpu", weights_only=False, mmap=True)
    name = meta.get(SHARDED_KEY)
    return ckpt.parent / name if name else None


def resume_path(ckpt: Path) -> Path:
    """What Lightning resumes from: the sharded folder ``ckpt`` names, else ``ckpt`` itself."""
    return sharded_folder(ckpt) or ckpt


def prune_sharded(folder: Path) -> None:
    """Remove the sharded folders under ``folder`` that no ``*.ckpt`` file there names."""
    keep = {sharded_folder(p) for p in folder.glob("*.ckpt") if p.is_file()}
    for path in folder.glob("sharded-*"):
        if path.is_dir() and path not in keep:
            shutil.rmtree(path, ignore_errors=True)


def copy_checkpoint(src: Path, dst: Path) -> None:
    """Copy a checkpoint file to ``dst`` atomically; a sharded one keeps its folder (hard links: no data
    copied) under a name of its own, so that pruning the source's never removes it."""
    meta = torch.load(src, map_location="cpu", weights_only=False)
    if meta.get(SHARDED_KEY):
        name = f"sharded-{dst.stem}"
        target = src.parent / name
        if not target.exists():
            shutil.copytree(src.parent / meta[SHARDED_KEY], target, copy_function=_link_or_copy)
        meta[SHARDED_KEY] = name
    with atomic_path(dst) as tmp:
        torch.save(meta, tmp)


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def decoder_state(ckpt: Path, model: nn.Module | None = None) -> dict[str, torch.Tensor]:
    """The decoder's weights (``Decoder.state_dict()`` keys) from a checkpoint file, plain or sharded.

    A sharded one is read with ``torch.distributed.checkpoint`` without a process group, into the tensors of
    ``model`` (a ``Decoder`` of the run's config, needed then)."""
    meta = torch.load(ckpt, map_location="cpu", weights_only=False)
    if not meta.get(SHARDED_KEY):
        return {k.removeprefix("model."): v for k, v in meta["state_dict"].items() if k.startswith("model.")}
    if model is None:
        raise ValueError(f"{ckpt} is sharded: reading it needs a model of the run's config to read into")
    import torch.distributed.checkpoint as dcp

    state = model.state_dict()
    stored = {f"model.{k}": v for k, v in state.items()}
    if getattr(model.cfg, "tie_embeddings", False):
        stored.pop("model.lm_head.weight", None)  # the embedding's tensor: stored once, under its name
    dcp.load({"state_dict": stored}, checkpoint_id=ckpt.parent / meta[SHARDED_KEY], no_dist=True)
    return state
