"""``result.json``: what one run leaves behind, the contract between the runner (writes) and the store
(reads).

Written atomically (a temporary file, then ``os.replace``): a reader either sees a complete file or none.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ablate.errors import StoreError
from ablate.layout import atomic_write
from ablate.metrics import metric

RESULT_FILE = "result.json"
SCHEMA_VERSION = 1



class RunStatus(StrEnum):
    """Where a run is in its lifecycle: the ``runs.status`` column of the store and ``result.json``'s
    ``status``.

    ``queued`` -> ``running`` -> one of the ends: ``done`` (trained to its last step), ``diverged`` (stopped
    by the divergence rule: a result, and a finding), ``pruned`` (stopped on purpose by tune's Optuna pruner:
    no result, not an error) or ``failed`` (crashed: ``error`` says why). A StrEnum, so ``status == "done"``
    holds.
    """

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    DIVERGED = "diverged"
    PRUNED = "pruned"
    FAILED = "failed"

    @property
    def ended(self) -> bool:
        """The run stopped for good (until ``--retry-failed`` for ``failed``)."""
        return self in ENDED

    @property
    def ok(self) -> bool:
        """An end that is not an error: exit status 0 when every run ended like this."""
        return self in ENDED_OK


ENDED = (RunStatus.DONE, RunStatus.DIVERGED, RunStatus.PRUNED, RunStatus.FAILED)
ENDED_OK = (RunStatus.DONE, RunStatus.DIVERGED, RunStatus.PRUNED)
WITH_RESULT = (RunStatus.DONE, RunStatus.DIVERGED)  # ends that measured something (what the reports read)
RESULT_STATUSES = tuple(s.value for s in WITH_RESULT)  # the same, as the runs table spells them
Status = RunStatus  # the name earlier code imported


STEP_KEY = "@step"  # metrics[name + STEP_KEY]: the steps of curve ``name``, when it has steps of its own


def _declared(summary: dict[str, float | int | None]) -> None:
    unknown = [k for k in summary if (m := metric(k)) is None or not m.in_summary]
    if unknown:
        raise ValueError(f"summary keys {unknown} are not declared summary metrics; declare them in "
                         "ablate/metrics.py (SUMMARY)")


class RunEvent(BaseModel):
    """Something that happened at a step: ``loss_spike`` (loss, trend, size), ``diverged`` (loss, reason),
    ``resumed`` (the step a restarted run continued from), ``pruned`` (metric, value: what the pruner saw)."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["loss_spike", "diverged", "resumed", "pruned"]
    step: int
    data: dict[str, float | str | None] = Field(default_factory=dict)


class RunResult(BaseModel):
    """The complete record of one finished (``done``/``diverged``) or ``failed`` run.

    - ``summary``: the summary metrics the run measured, each declared in ``ablate.metrics.SUMMARY``
      (``steps``, ``train_loss``, ``ppl/<set>``, ``bench/<task>``, ...; None where not measured). A key that
      is not declared there is refused: declare a new metric first, and every layer picks it up. A run of
      another trainer (its config names one: ``config["trainer"] == "command"``) names its own metrics: a
      command's are what it reported, under the names it reported them.
    - ``metrics``: step-indexed curves, ``{"step": [...], "loss": [...], "lr": [...], "grad_norm": [...],
      "tokens_per_s": [...], ...}``, all lists the same length as ``step`` (``val_ppl`` curves may be sparse
      and then use their own ``"val_step"`` list; any curve ``name`` may have its own steps under
      ``name@step``).
    - ``probes``: per-layer values, name -> list over layers (``gate_score``, ``f_attn``, ``m_act``,
      ``mean_abs_pre``, ``mean_abs_post``, ``frac_below_1e-2_pre``, ...).
    - ``histograms``: name -> per-layer bin counts, with ``histogram_edges`` shared by all of them.
    - ``provenance``: the software, device and grid commit that produced it (``ablate.provenance``); empty in
      files written before it was recorded.
    """

    model_config = ConfigDict(extra="forbid")
    schema_version: int = SCHEMA_VERSION
    run_id: str
    config: dict[str, Any]
    status: RunStatus
    summary: dict[str, float | int | None] = Field(default_factory=dict)
    metrics: dict[str, list[float | None]] = Field(default_factory=dict)
    probes: dict[str, list[float | None]] = Field(default_factory=dict)
    histograms: dict[str, list[list[float]]] = Field(default_factory=dict)
    histogram_edges: list[float] = Field(default_factory=list)
    events: list[RunEvent] = Field(default_factory=list)
    resumed_from: int | None = None
    started: str | None = None
    finished: str | None = None
    host: str | None = None
    device: str | None = None
    error: str | None = None
    provenance: dict[str, Any] = Field(default_factory=dict)

    def curves(self) -> Iterator[tuple[str, list[float | None], list[float | None]]]:
        """Each curve as ``(name, steps, values)``: its own steps (``name@step``), else for a ``val_`` curve
        ``val_step``, else ``step`` (the first of the same length); by position when the result has no
        steps at all. A curve whose length matches none is a StoreError (the file is inconsistent)."""
        metrics = self.metrics
        steps, val_steps = metrics.get("step"), metrics.get("val_step")
        for name, values in metrics.items():
            if name in ("step", "val_step") or name.endswith(STEP_KEY):
                continue
            candidates = [metrics.get(name + STEP_KEY)]
            candidates += [val_steps, steps] if name.startswith("val_") else [steps]
            idx = next((c for c in candidates if c is not None and len(c) == len(values)), None)
            if idx is None and steps is None and val_steps is None:
                idx = [float(i) for i in range(len(values))]
            if idx is None:
                raise StoreError(f"result of run {self.run_id}: metric {name!r} has {len(values)} values for "
                                 f"{len(steps or [])} steps")
            yield name, idx, values

    @model_validator(mode="after")
    def _summary_keys(self) -> RunResult:
        if self.config.get("trainer") is None:  # ablate's own model: another trainer's metrics are its own
            _declared(self.summary)
        return self


def curve_step(run_id: str, step: float | None) -> int:
    """A step of a run's curves (``step``, ``val_step``) as the whole number it is; a null one is refused."""
    if step is None:
        raise StoreError(f"result of run {run_id}: a step of its curves is null; steps are whole numbers")
    return int(step)


def write_result(result: RunResult, run_dir: str | os.PathLike[str]) -> Path:
    """Write ``run_dir/result.json`` atomically and return its path."""
    return atomic_write(Path(run_dir) / RESULT_FILE, result.model_dump_json(indent=1))


def read_result(path: str | os.PathLike[str]) -> RunResult:
    """Read a ``result.json`` (or a run directory holding one). A truncated or malformed file is a
    StoreError."""
    path = Path(path)
    if path.is_dir():
        path = path / RESULT_FILE
    if not path.is_file():
        raise StoreError(f"{path}: no result file (the run has not finished)")
    try:
        return RunResult.model_validate(json.loads(path.read_text()))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise StoreError(f"{path}: not a complete result file ({exc.__class__.__name__}: {exc}); it was "
                         "probably cut off while being written, rerun the run or remove the file") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise StoreError(f"{path}: invalid result file at '{loc}': {first['msg']}") from None


def result_paths(given: list[Path]) -> list[Path]:
    """What ``ablate ingest`` reads: each path that is a result file or a run directory as it is, and for any
    other directory the run directories below it that hold a result (a path with neither is kept, so that
    reading it says what is missing)."""
    out: list[Path] = []
    for path in map(Path, given):
        if path.is_file() or (path / RESULT_FILE).is_file():
            out.append(path)
        else:
            out += sorted(p.parent for p in path.glob(f"*/{RESULT_FILE}")) or [path]
    return out
