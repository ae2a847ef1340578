"""``ablate eval``: score finished runs with lm-evaluation-harness and store the scores as ``bench/<task>``
columns; ``ablate probe``: probe finished runs again from their checkpoints (``probe_runs``), into the store
and the MLflow run each run's training wrote to.

For each run, the tasks it has not been scored on (at this ``--limit``) go through ablate's lm-eval model
(``ablate.runner.lm_eval_adapter``) on the run's final checkpoint, at the run's context length. A task's score
is its first higher-is-better metric, accuracies in % like ablate's own benchmarks (``primary_scores``); a tag
such as ``ablate`` gives one score per task it names, a group its aggregate. Each run keeps what was measured
in its directory: lm-eval's full results in ``lm_eval.json``, and the scores in ``result.json``'s summary, so
that a re-ingest keeps them; the store gets them with ``Store.set_scores``. A rerun scores only what is
missing, and stores again what a run's ``lm_eval.json`` already holds.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ablate import layout
from ablate.errors import AblateError, UserInputError, did_you_mean

if TYPE_CHECKING:
    from ablate.result import RunResult
    from ablate.store.api import Store

log = logging.getLogger(__name__)

SCORES_FILE = "lm_eval.json"
FINISHED = ("done", "diverged")


@dataclass
class RunScores:
    """What ``ablate eval`` did for one run: ``scores`` (``bench/<task>`` -> value) newly measured or already
    held, the tasks it ``scored`` now, and the ``error`` that stopped it (None when it ended well)."""

    run_id: str
    scores: dict[str, float | None] = field(default_factory=dict)
    scored: list[str] = field(default_factory=list)
    error: str | None = None


def require_choice(run_ids: Sequence[str], grid: str | None) -> None:
    """Run ids or a grid, one of the two (a UserInputError otherwise): checked before the store is opened."""
    if bool(run_ids) == bool(grid):
        raise UserInputError("give run ids or --grid NAME (one of the two)")


def select_runs(store: Store, run_ids: Sequence[str], grid: str | None, *, finished: Sequence[str] = FINISHED,
                command: str = "`ablate eval` scores") -> list[str]:
    """The finished runs to score: ``run_ids`` (each must be known and ``finished``), else the ``finished``
    runs of ``grid``. A UserInputError says what is wrong."""
    require_choice(run_ids, grid)
    if grid:
        if grid not in store.grids():
            raise UserInputError(f"no grid {grid!r} in the store{did_you_mean(grid, store.grids())}")
        frame = store.runs_frame(grid=grid)
        return [r for r, s in zip(frame["run_id"], frame["status"], strict=True) if s in finished]
    run_ids = [store.resolve_run(ref) for ref in run_ids]  # ids or their first characters, as show takes
    statuses = store.statuses(run_ids=run_ids)
    for rid in run_ids:
        if statuses[rid] not in finished:
            raise UserInputError(f"run {rid} is {statuses[rid]}; {command} finished runs "
                                 f"({' or '.join(finished)})")
    return list(dict.fromkeys(run_ids))


def evaluate_runs(store: Store, home: str | os.PathLike[str], run_ids: Sequence[str], tasks: Sequence[str], *,
                  limit: int | None = None, include_path: Sequence[str | os.PathLike[str]] = (),
                  device: str = "cpu", batch_size: int = 8,
                  on_run: Callable[[RunScores], None] | None = None) -> list[RunScores]:
    """Score ``run_ids`` on lm-eval ``tasks`` (only the missing ones) and store every score; one run's failure
    is its own (``RunScores.error``) and the others go on. ``on_run`` is called after each run."""
    from ablate.runner.lm_eval_adapter import task_manager

    if not tasks:
        raise UserInputError("--tasks: give at least one lm-eval task (e.g. ablate_mqar,ablate_niah_single)")
    # unknown tasks and missing folders fail here, before any run loads
    task_manager(tasks, list(include_path))
    out = []
    for rid in run_ids:
        res = RunScores(rid)
        try:
            _score_run(store, layout.run_dir(home, rid), res, tasks, limit=limit, include_path=include_path,
                       device=device, batch_size=batch_size)
        except AblateError as exc:
            res.error = str(exc)
        # lm-eval's own failures (a task's data missing): this run's, not the command's
        except Exception as exc:
            log.exception("scoring run %s failed", rid)
            res.error = f"{exc.__class__.__name__}: {exc}"
        out.append(res)
        if on_run is not None:
            on_run(res)
    return out


def _score_run(store: Store, run_dir: Path, res: RunScores, tasks: Sequence[str], *, limit: int | None,
               include_path: Sequence[str | os.PathLike[str]], device: str, batch_size: int) -> None:
    held = _read_scores(run_dir)
    missing = [t for t in tasks if t not in held or held[t].get("limit") != limit]
    if missing:
        held.update(_measure(run_dir, missing, limit=limit, include_path=include_path, device=device,
                             batch_size=batch_size))
        layout.atomic_write(run_dir / SCORES_FILE, json.dumps({"tasks": held}, indent=1) + "\n")
        res.scored = missing
    res.scores = {f"bench/{name}": value for t in tasks for name, value in held[t]["scores"].items()}
    _add_to_result(run_dir, res.scores)
    store.set_scores(run_id=res.run_id, scores=res.scores)


def _measure(run_dir: Path, tasks: list[str], *, limit: int | None,
             include_path: Sequence[str | os.PathLike[str]], device: str,
             batch_size: int) -> dict[str, dict[str, Any]]:
    """Run lm-eval on ``tasks`` for the run's checkpoint: per requested task, its scores and lm-eval's
    results."""
    from importlib.metadata import version

    from ablate.runner.checkpoints import load_run_model
    from ablate.runner.lm_eval_adapter import primary_scores, run_lm_eval

    model, tokenizer, config = load_run_model(run_dir, device=device)
    log.info("scoring %s on %s", run_dir.name, ", ".join(tasks))
    res = run_lm_eval(model, tokenizer, tasks, include_path=list(include_path), limit=limit, device=device,
                      batch_size=batch_size, max_length=config.data.seq_len, seed=config.seed)
    primary = primary_scores(res)
    named = {t for t in tasks if t in primary}  # a task or a group; a tag is in no result, its tasks are
    when = datetime.now(UTC).isoformat(timespec="seconds")
    out = {}
    for task in tasks:
        mine = [task] if task in named else [k for k in primary if k not in named]
        out[task] = {
            "limit": limit, "lm_eval": version("lm_eval"), "scored": when,
            "scores": {k: primary[k][1] for k in mine}, "metric": {k: primary[k][0] for k in mine},
            "results": {k: res["results"][k] for k in mine}, "n-samples": {
                k: res.get("n-samples", {}).get(k) for k in mine},
        }
    return out


def _read_scores(run_dir: Path) -> dict[str, dict[str, Any]]:
    path = run_dir / SCORES_FILE
    if not path.is_file():
        return {}
    try:
        return dict(json.loads(path.read_text())["tasks"])
    except (ValueError, KeyError, TypeError):
        log.warning("%s is not a complete lm-eval scores file; scoring again", path)
        return {}


def _add_to_result(run_dir: Path, scores: dict[str, float | None]) -> None:
    """Put ``scores`` in the run's ``result.json`` summary (the run's record; a re-ingest keeps them)."""
    from ablate.result import RESULT_FILE, read_result, write_result

    if not (run_dir / RESULT_FILE).is_file():
        return
    result = read_result(run_dir)
    if any(result.summary.get(k) != v for k, v in scores.items()):
        write_result(result.model_copy(update={"summary": {**result.summary, **scores}}), run_dir)


@dataclass
class RunProbes:
    """What ``ablate probe`` did for one run: the probe summary it stored, or the ``error`` that stopped it; a
    ``warning`` when its MLflow run could not be updated (the store and ``result.json`` have the probes)."""

    run_id: str
    summary: dict[str, float | None] = field(default_factory=dict)
    error: str | None = None
    warning: str | None = None


def probe_runs(store: Store, home: str | os.PathLike[str], run_ids: Sequence[str], *, device: str = "cpu",
               on_run: Callable[[RunProbes], None] | None = None) -> list[RunProbes]:
    """Probe ``run_ids`` again on their checkpoints (``ablate.runner.reprobe``), rewrite their
    ``result.json``, ingest it and log what changed into the run's MLflow run (``ProbeMirror``); one run's
    failure is its own (``RunProbes.error``). ``on_run`` is called after each run."""
    from ablate.metrics import SUMMARY
    from ablate.runner.reprobe import probe_again

    probed = [m.name for m in SUMMARY if m.source == "runner (probes)"]
    mirror = ProbeMirror(Path(home), store, run_ids)
    out = []
    for rid in run_ids:
        res = RunProbes(rid)
        try:
            result = probe_again(layout.run_dir(home, rid), device=device)
            store.ingest(result)
            res.summary = {k: result.summary.get(k) for k in probed}
            res.warning = mirror.log(result)
        except AblateError as exc:
            res.error = str(exc)
        out.append(res)
        if on_run is not None:
            on_run(res)
    return out


class ProbeMirror:
    """A probed run's new and changed probe values into the nested MLflow run its training (or a later
    ``ablate run``) completed, which the store records (``runs.mlflow_run_id``), by
    ``store.mlflow_mirror.log_probes``. A run the store records none for (trained with ``--no-mlflow``, or
    mirrored only halfway: the next ``ablate run`` mirrors its result whole) is left alone, and MLflow is not
    even opened for it."""

    def __init__(self, home: Path, store: Store, run_ids: Sequence[str]):
        frame = store.runs_frame(run_ids=list(run_ids)) if run_ids else None
        pairs = [] if frame is None else zip(frame["run_id"], frame["mlflow_run_id"], strict=True)
        self.mlflow_ids = {rid: mid for rid, mid in pairs if isinstance(mid, str) and mid}
        self.home = home
        self._client: Any = None

    def log(self, result: RunResult) -> str | None:
        """Log ``result``'s probes into its MLflow run; None, or the line saying why MLflow was not
        updated."""
        from ablate.store.faults import first_line
        from ablate.store.mlflow_mirror import log_probes, open_client, tracking_uri

        mid = self.mlflow_ids.get(result.run_id)
        if mid is None:
            return None
        uri = tracking_uri(self.home)
        try:
            self._client = self._client or open_client(uri)
            log_probes(self._client, mid, result)
        except Exception as exc:  # noqa: BLE001 - MLflow down never fails a probe: the store has it
            return f"MLflow run {mid} at {uri} not updated: {first_line(exc)}"
        return None
