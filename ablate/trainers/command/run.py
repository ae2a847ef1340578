"""One command run, from its config to its ``result.json``: what ``ablate.runner.run_one`` is for ablate's own
model.

``run_command`` renders the run's command line and environment (``render``), starts it in a process group of
its own (``process``), reads its metrics as they come (``parse``) and hands each new record to ``on_records``
(the live status, the MLflow curves, tune's pruner), stops the whole group when ``stop`` is set, and writes
the run's result:

- ``summary``: each metric's value for the run (its last, or ``trainer.summary``'s min or max), ``steps``
  (the last step reported) and ``wall_s``;
- ``metrics``: each metric's whole stream by step (``<metric>@step`` holds its steps: the metrics of one
  command are reported at steps of their own);
- ``events``: the objective's loss spikes and its divergence (``ablate.stats.stability``'s rules, at the
  train section's defaults), as for ablate's own runs;
- ``status``: ``done``; ``diverged`` when the objective's stream meets the divergence rule (a value that is
  not finite, or one that stays far above its best); ``failed`` when the command did not exit 0, or exited 0
  without ever reporting its objective (``error`` says why, with the last lines of stderr).

Everything the command prints goes to the run directory's ``train.log`` as it comes.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from ablate.result import STEP_KEY, RunEvent, RunResult, RunStatus, write_result
from ablate.stats.stability import DivergenceDetector, SpikeDetector
from ablate.trainers.command.config import CommandConfig
from ablate.trainers.command.mlflow_source import MlflowTail
from ablate.trainers.command.parse import MetricsReader, Record
from ablate.trainers.command.process import CommandOutcome, CommandProcess
from ablate.trainers.command.render import RunValues, render, write_params

log = logging.getLogger(__name__)

LOG_FILE = "train.log"
POLL_S = 0.2  # how often the JSONL file is read and new records are handed on
MLFLOW_POLL_S = 5.0  # how often what the command logged to MLflow is read back (metrics.mlflow)
TAIL_IN_ERROR = 5  # stderr lines a failed run's error quotes
# the stability rules' settings: the train section's defaults (ablate.config.sections.TrainConfig)
SPIKE_WINDOW, SPIKE_SIGMA, DIVERGE_FACTOR, DIVERGE_PATIENCE = 50, 6.0, 2.0, 50

StepRow = dict[str, float | int | None]


class MlflowNeeded(Exception):
    """A command that reports to MLflow (``metrics.mlflow``) has no MLflow run to report to."""


class CommandInterrupted(Exception):
    """The run was stopped on purpose (``stop`` set): its process group is gone; it starts (or resumes)
    again on the next ``ablate run``."""


def run_command(config: CommandConfig, run_dir: Path, *, run_id: str, stop: threading.Event | None = None,
                on_records: Callable[[list[StepRow]], None] | None = None,
                on_start: Callable[[bool], None] | None = None, devices: str | None = None,
                threads: int | None = None, mlflow: tuple[str, str] | None = None,
                grace_s: float = 10.0) -> RunResult:
    """Run ``config``'s command into ``run_dir`` and write its ``result.json`` (see the module docstring).

    ``devices``: the GPUs the executor gives it (``CUDA_VISIBLE_DEVICES`` and ``{devices}``); ``threads``:
    its share of the cores (``OMP_NUM_THREADS`` unless ``trainer.env`` sets it); ``mlflow``: ``(tracking
    URI, run id)`` of the MLflow run it may log into; ``on_start(resuming)`` is called as the command starts
    (``resuming``: ``trainer.resume``'s file is there). Raises ``CommandInterrupted`` when stopped by
    ``stop``."""
    run_dir.mkdir(parents=True, exist_ok=True)
    spec = config.spec
    mlflow_uri, mlflow_run = mlflow if mlflow is not None else (None, None)
    inv = render(spec, Path(config.grid_dir), RunValues(run_id, run_dir, config.seed, config.params,
                                                         devices=devices, mlflow_tracking_uri=mlflow_uri,
                                                         mlflow_run_id=mlflow_run))
    write_params(inv)
    env = dict(inv.env)
    if threads is not None and "OMP_NUM_THREADS" not in spec.env:
        env["OMP_NUM_THREADS"] = str(threads)
    reader = MetricsReader(spec, inv.metrics_file)
    started = datetime.now(UTC)
    tail = None
    if spec.metrics.mlflow:
        if mlflow is None:
            raise MlflowNeeded("trainer.metrics.mlflow reads the MLflow run ablate opens for the command; "
                               "this run has none (--no-mlflow, or MLflow did not answer)")
        tail = MlflowTail(*mlflow)
    with _log(run_dir / LOG_FILE) as out:
        out.write(f"# ablate: {' '.join(inv.argv)}\n# in {inv.cwd}\n")

        def stdout(line: str) -> None:
            out.write(line + "\n")
            reader.stdout_line(line)

        def stderr(line: str) -> None:
            out.write(line + "\n")

        if on_start is not None:
            on_start(inv.resumed)
        proc = CommandProcess(inv.argv, cwd=inv.cwd, env=env, on_stdout=stdout, on_stderr=stderr,
                              grace_s=grace_s).start()
        outcome = _follow(proc, reader, stop, on_records, tail, out.flush)
        if reader.jsonl is not None and reader.jsonl.bad:  # said once in the log, with where it began
            bad = reader.jsonl.bad
            out.write(f"# ablate: warning: {len(bad)} line(s) of {reader.jsonl.path} were not JSON objects "
                      f"and were skipped, the first at line {bad[0]}\n")
    if stop is not None and stop.is_set() and not outcome.ok:
        raise CommandInterrupted(f"stopped: its process group is gone ({outcome.reason})")
    result = _result(config, run_id, reader, outcome, started, resumed=inv.resumed)
    write_result(result, run_dir)
    return result


def resumes(config: CommandConfig, run_dir: Path, run_id: str) -> bool:
    """Would the run resume if it started now: it has ``trainer.resume`` and its ``when`` file is there?"""
    if config.spec.resume is None:
        return False
    return render(config.spec, Path(config.grid_dir), RunValues(run_id, run_dir, config.seed,
                                                                config.params)).resumed


@contextlib.contextmanager
def _log(path: Path) -> Iterator[IO[str]]:
    """The run's log, appended to (a resumed run's output follows the cut one's); buffered, and flushed by
    ``_follow`` every ``POLL_S`` (line buffering halved how fast a command's output is read)."""
    with path.open("a", encoding="utf-8") as out:
        yield out


def _follow(proc: CommandProcess, reader: MetricsReader, stop: threading.Event | None,
            on_records: Callable[[list[StepRow]], None] | None, tail: MlflowTail | None,
            flush: Callable[[], None]) -> CommandOutcome:
    """Wait for the command, handing new records on every ``POLL_S`` (what it logged to MLflow, every
    ``MLFLOW_POLL_S`` and once it has ended); stop its group once ``stop`` is set."""
    sent, polled = 0, time.monotonic()
    own: set[str] = set()  # the metrics read from MLflow
    while True:
        outcome = proc.wait(POLL_S)
        flush()  # the log as far as the command has written: what `tail -f train.log` shows
        reader.poll()
        if tail is not None and (outcome is not None or time.monotonic() - polled >= MLFLOW_POLL_S):
            records = tail.poll(skip=set(reader.stream.series) - own)
            own.update(k for _, values in records for k in values)
            reader.stream.extend(records)
            polled = time.monotonic()
        records = reader.stream.records
        if on_records is not None and len(records) > sent:
            upto = len(records)
            on_records([_row(r, i) for i, r in enumerate(records[sent:upto], start=sent)])
            sent = upto
        if outcome is not None:
            return outcome
        if stop is not None and stop.is_set():
            proc.stop("stopped by ablate")


def _row(record: Record, index: int) -> StepRow:
    """A record as a step row; one without a step is placed by its position (as its curve will be)."""
    step, values = record
    return {"step": index if step is None else step, **values}


def _result(config: CommandConfig, run_id: str, reader: MetricsReader, outcome: CommandOutcome,
            started: datetime, *, resumed: bool) -> RunResult:
    spec = config.spec
    objective = spec.objective.metric
    summary: dict[str, float | int | None] = {
        name: value if math.isfinite(value) else None for name, value in reader.summary().items()}
    summary["steps"] = reader.stream.last_step
    summary["wall_s"] = outcome.wall_s
    events = _events(list(_points(reader.stream.records, objective)))
    error = None
    if not outcome.ok:
        tail = " | ".join(outcome.stderr_tail[-TAIL_IN_ERROR:])
        error = f"{outcome.reason}" + (f"; its stderr ended: {tail}" if tail else "; its stderr was empty")
        status = RunStatus.FAILED
    elif (missing := reader.failure()) is not None:
        error, status = missing, RunStatus.FAILED
    elif any(e.kind == "diverged" for e in events):
        status = RunStatus.DIVERGED
    else:
        status = RunStatus.DONE
    return RunResult(run_id=run_id, config=config.model_dump(mode="json"), status=status, summary=summary,
                     metrics=_curves(reader), events=events, started=started.isoformat(),
                     finished=datetime.now(UTC).isoformat(), host=socket.gethostname(),
                     device=os.environ.get("CUDA_VISIBLE_DEVICES") and "cuda" or "cpu", error=error,
                     resumed_from=None if not resumed else reader.stream.records[0][0]
                     if reader.stream.records else 0)


def _points(records: list[Record], name: str) -> Iterator[tuple[int, float]]:
    """``(step, value)`` of each record of metric ``name``; a record without a step is placed by its
    position among the records (as the live rows place it: ``_row``)."""
    for i, (step, values) in enumerate(records):
        if name in values:
            yield (i if step is None else step), values[name]


def _curves(reader: MetricsReader) -> dict[str, list[float | None]]:
    """Each metric's stream and its steps (``name@step``)."""
    out: dict[str, list[float | None]] = {}
    for name in reader.stream.series:
        points = list(_points(reader.stream.records, name))
        out[name] = [v if math.isfinite(v) else None for _, v in points]
        out[name + STEP_KEY] = [float(s) for s, _ in points]
    return out


def _events(points: list[tuple[int, float]]) -> list[RunEvent]:
    """The objective's loss spikes and its divergence, by ablate's rules at their default settings."""
    spikes, diverge = SpikeDetector(SPIKE_WINDOW, SPIKE_SIGMA), DivergenceDetector(DIVERGE_FACTOR,
                                                                                   DIVERGE_PATIENCE)
    events: list[RunEvent] = []
    for at, value in points:
        if (spike := spikes.update(at, value)) is not None:
            events.append(RunEvent(kind="loss_spike", step=at, data={"loss": spike.loss, "trend": spike.trend,
                                                                     "size": spike.size}))
        if (why := diverge.update(value)) is not None:
            events.append(RunEvent(kind="diverged", step=at, data={"loss": _finite(value), "reason": why}))
            break
    return events


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None
