"""Context extension (paper Table 5): a run's training stages, the hand-over between them, and retrieval
scored past the training length, with and without YaRN.

Stages (``RunConfig.stages``, resolved by ``ablate.config.stage_configs``): stage 0 is the run's own config;
stage k starts from the final weights of stage k-1 (a fresh optimizer, warm-up and schedule over its own
``train.steps``) with its own sequence length, RoPE base, mixture, learning rate.

- Steps are numbered globally: stage k's steps are ``first_step .. first_step + steps - 1`` where
  ``first_step`` is the sum of the earlier stages' steps. Curves, events, ``on_step`` rows and
  ``resumed_from`` use these numbers; the batch at global step t is a function of (seed, t) and the stage's
  data config.
- ``checkpoints/last.ckpt`` is always the latest checkpoint of the stage in progress; its ``stage`` key names
  the stage and Lightning's ``global_step`` counts that stage's steps. Resuming continues that stage from it.
- ``checkpoints/stage<k>-final.ckpt``: a copy of ``last.ckpt`` at the end of stage k (every stage but the
  last): stage k+1 starts from its weights and from the run's record so far (the monitor's state).

After the last stage, ``benchmark_scores`` scores ``eval.benchmarks`` (at ``eval.bench_multiples`` of the
final training length for specs without their own lengths) as ``bench/<task>@<len>``; with
``eval.yarn_factor`` it scores them again with the model's RoPE swapped for YaRN's (weights unchanged,
``rope_yarn_original_len`` = the final training length), as ``bench/<task>@<len>/yarn``, and per task the
means ``bench/<task>`` and ``bench/<task>/yarn``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ablate.ablations.layers import Rotary
from ablate.config import RunConfig, stage_configs
from ablate.errors import RunError
from ablate.layout import CHECKPOINT
from ablate.runner.parallel import copy_checkpoint, decoder_state
from ablate.runner.tasks import benchmark_plan, evaluate_tasks

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Stage:
    """One training stage: its index, effective config (no ``stages``) and the global number of its first
    step."""

    index: int
    config: RunConfig
    first_step: int

    @property
    def steps(self) -> int:
        return self.config.train.steps

    @property
    def end(self) -> int:
        """The global step count once this stage is done."""
        return self.first_step + self.steps


def plan_stages(config: RunConfig) -> list[Stage]:
    """The stages of ``config`` in order (one when it has no ``stages``).

    >>> [(s.index, s.first_step, s.end) for s in plan_stages(RunConfig(stages=[{"train.steps": 50}]))]
    [(0, 0, 300), (1, 300, 350)]
    """
    out: list[Stage] = []
    first = 0
    for i, cfg in enumerate(stage_configs(config)):
        out.append(Stage(i, cfg, first))
        first += cfg.train.steps
    return out


def final_checkpoint(run_dir: Path, stage: int) -> Path:
    """Where stage ``stage``'s final checkpoint is kept (the start of the next stage)."""
    return run_dir / "checkpoints" / f"stage{stage}-final.ckpt"


def checkpoint_position(path: Path) -> tuple[int, int]:
    """``(stage, steps done within it)`` of a checkpoint (stage 0 for one written before stages existed)."""
    ckpt = torch.load(path, map_location="cpu", weights_only=False, mmap=True)
    return int(ckpt.get("stage", 0)), int(ckpt["global_step"])


def start_point(run_dir: Path, stages: list[Stage]) -> tuple[int, bool]:
    """``(stage to train next, resume it from last.ckpt?)`` for what ``run_dir`` holds.

    A ``last.ckpt`` of a stage that is done hands over to the next stage (writing that stage's final
    checkpoint if a cut came between the two); with no ``last.ckpt``, the latest final checkpoint does.
    """
    last = run_dir / CHECKPOINT
    if last.is_file():
        k, done = checkpoint_position(last)
        if k >= len(stages):
            raise RunError(f"{last} is of stage {k}, but the run has {len(stages)} stage(s)")
        if done < stages[k].steps or k == len(stages) - 1:
            return k, True
        finish_stage(run_dir, k)
        return k + 1, False
    for k in reversed(range(len(stages) - 1)):
        if final_checkpoint(run_dir, k).is_file():
            return k + 1, False
    return 0, False


def finish_stage(run_dir: Path, stage: int) -> Path:
    """Keep ``last.ckpt`` (stage ``stage`` at its end) as the stage's final checkpoint, atomically (a sharded
    checkpoint keeps its shards too); idempotent."""
    final = final_checkpoint(run_dir, stage)
    if not final.is_file():
        copy_checkpoint(run_dir / CHECKPOINT, final)
    return final


def stage_start(path: Path, monitor_key: str, model: Any = None) -> tuple[dict[str, Any],
                                                                          dict[str, Any] | None]:
    """``(decoder state dict, the run monitor's state)`` saved in a stage's final checkpoint (a sharded one is
    read into ``model``'s tensors)."""
    ckpt = torch.load(path, map_location="cpu", weights_only=False, mmap=True)
    return decoder_state(path, model), (ckpt.get("callbacks") or {}).get(monitor_key)


# ---------------------------------------------------------------- retrieval past the training length


@contextlib.contextmanager
def yarn_rope(model: Any, factor: float, original_len: int) -> Iterator[Any]:
    """``model`` (a Decoder) with its RoPE replaced by YaRN's for ``factor`` over ``original_len``, then
    restored.

    RoPE holds no weights, so the swap changes nothing else; ``factor <= 1`` leaves the model as it is.
    """
    if factor <= 1:
        yield model
        return
    cfg = model.cfg.model_copy(update={"rope_yarn_factor": float(factor),
                                       "rope_yarn_original_len": original_len})
    original = model.rotary
    model.rotary = Rotary(cfg)
    try:
        yield model
    finally:
        model.rotary = original


def benchmark_scores(model: Any, tokenizer: Any, config: RunConfig, *, seed: int, device: Any) -> dict[str,
                                                                                                       float]:
    """Accuracy in % on ``config.eval.benchmarks`` (``config`` = the last stage's): ``bench/<task>@<len>`` and
    the mean ``bench/<task>``; with ``eval.yarn_factor`` also the same keys suffixed ``/yarn``.

    ``eval.yarn_factor`` ``"auto"`` scales each length L by ``max(1, L / seq_len)`` (at or below the training
    length that is no scaling: the plain score is the YaRN one); a number scales every length by it, as the
    paper extends one model to 4x its training length.
    """
    ev, train_len = config.eval, config.data.seq_len
    lengths = sorted({max(1, round(m * train_len)) for m in ev.bench_multiples}) or None
    names = list(ev.benchmarks)
    scores = evaluate_tasks(model, tokenizer, names, seed=seed, device=device, lengths=lengths)
    if ev.yarn_factor is None:
        return scores
    plan = benchmark_plan(names, lengths)
    by_factor: dict[float, list[str]] = {}
    for name, task_lengths in plan.items():
        for length in task_lengths:
            factor = max(1.0, length / train_len) if ev.yarn_factor == "auto" else float(ev.yarn_factor)
            by_factor.setdefault(factor, []).append(f"{name}@{length}")
    yarn: dict[str, float] = {}
    for factor, specs in sorted(by_factor.items()):
        if factor <= 1:
            yarn.update({f"bench/{s}": scores[f"bench/{s}"] for s in specs})
            continue
        with yarn_rope(model, factor, train_len):
            got = evaluate_tasks(model, tokenizer, specs, seed=seed, device=device)
        yarn.update({f"bench/{s}": got[f"bench/{s}"] for s in specs})
        log.info("YaRN x%g over %d: %s", factor, train_len, {s: got[f"bench/{s}"] for s in specs})
    out = dict(scores)
    for name, task_lengths in plan.items():
        accs = [yarn[f"bench/{name}@{length}"] for length in task_lengths]
        out.update({f"bench/{name}@{length}/yarn": acc for length, acc in zip(task_lengths, accs,
                                                                              strict=True)})
        out[f"bench/{name}/yarn"] = sum(accs) / len(accs)
    return out
