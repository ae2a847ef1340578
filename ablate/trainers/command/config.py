"""A command run's config: what the store keeps of it and what its job is handed, everything its process
needs (the trainer spec, the grid's folder, the parameters, the seed) and what the reports group it by.

It answers the few questions every executor asks of a planned run's config as ablate's own ``RunConfig``
does: its arm (``variant``), its ``seed`` and the devices a run takes (``train.devices``: ``trainer.gpus``,
one slot on a CPU), so the executors run it without knowing which trainer it is. The store reads
``trainer: command`` (``ablate.trainers.registry.trainer_of``) and takes its columns from ``columns``.

``cell`` holds the values of the grid's parameter axes (dotted name -> value): the reports pair two arms'
runs that share a cell and a seed, as they pair ablate's runs that share a configuration.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from ablate.trainers.command.identity import Identifier
from ablate.trainers.command.params import Params, canonical, flatten
from ablate.trainers.command.spec import CommandSpec

LR_NAMES = ("lr", "learning_rate")  # a parameter so named (at any depth) fills the runs' lr column


@dataclass(frozen=True)
class Devices:
    """What an executor reads of a run's ``train`` section: how many devices one run takes."""

    devices: int


class CommandConfig(BaseModel):
    """One command run: its arm, seed, parameters (the seed left out), the values of the grid's axes, the
    trainer spec, the folder ``trainer.cwd`` is relative to and the code's identity when it was planned."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    trainer: Literal["command"] = "command"
    variant: str  # the arm: the word every report and the store use for an arm
    seed: int
    params: dict[str, Any]
    cell: dict[str, Any] = {}
    spec: CommandSpec
    grid_dir: str
    code: str = ""

    @property
    def train(self) -> Devices:
        """The devices one run takes (``trainer.gpus``; one CPU slot without)."""
        return Devices(max(1, self.spec.gpus))

    @property
    def arm(self) -> str:
        return self.variant


def lr_of(params: Params) -> float | None:
    """The run's learning rate for the runs table's ``lr`` column: the parameter named ``lr`` or
    ``learning_rate`` (at any depth, when exactly one is), else None.

    >>> lr_of({"optim": {"lr": 3e-4}, "n_layer": 4}), lr_of({"a": {"lr": 1}, "b": {"lr": 2}})
    (0.0003, None)
    """
    found = [v for k, v in flatten(params).items() if k.rsplit(".", 1)[-1] in LR_NAMES]
    if len(found) != 1 or isinstance(found[0], bool) or not isinstance(found[0], int | float):
        return None
    return float(found[0])


def columns(config: dict[str, Any]) -> dict[str, Any]:
    """The ``runs`` columns of a stored command config: the arm as ``variant``, the seed, the learning rate,
    the trainer's name and the parameters; the model's columns empty."""
    params = config.get("params") or {}
    return {"variant": str(config.get("variant", "")), "seed": int(config.get("seed", 0)),
            "lr": lr_of(params), "trainer": "command", "trainer_params": params, "model_preset": None,
            "n_layers": None, "d_model": None, "train_steps": None, "batch_size": None, "seq_len": None}


def command_ids(config: CommandConfig) -> tuple[str, str]:
    """``(run id, stem id)`` of a command run, from its config (``identity``: the trainer spec, the
    parameters, the seed and the code)."""
    return Identifier(config.spec, config.code).ids(canonical(config.params), config.seed)
