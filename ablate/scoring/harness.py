"""``ablate eval``: score finished runs with lm-evaluation-harness and store the scores as ``bench/<task>``
columns.

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
from importlib.metadata import version
from pathlib import Path
from typing import Any

from ablate import layout
from ablate.errors import AblateError, UserInputError
from ablate.result import RESULT_FILE, read_result, write_result
from ablate.runner.checkpoints import load_run_model
from ablate.runner.lm_eval_adapter import primary_scores, run_lm_eval, task_manager
from ablate.store.api import Store

log = logging.getLogger(__name__)

SCORES_FILE = "lm_eval.json"


@dataclass
class RunScores:
    """What ``ablate eval`` did for one run: ``scores`` (``bench/<task>`` -> value) newly measured or already
    held, the tasks it ``scored`` now, and the ``error`` that stopped it (None when it ended well)."""

    run_id: str
    scores: dict[str, float | None] = field(default_factory=dict)
    scored: list[str] = field(default_factory=list)
    error: str | None = None


def evaluate_runs(store: Store, home: str | os.PathLike[str], run_ids: Sequence[str], tasks: Sequence[str], *,
                  limit: int | None = None, include_path: Sequence[str | os.PathLike[str]] = (),
                  device: str = "cpu", batch_size: int = 8,
                  on_run: Callable[[RunScores], None] | None = None) -> list[RunScores]:
    """Score ``run_ids`` on lm-eval ``tasks`` (only the missing ones) and store every score; one run's failure
    is its own (``RunScores.error``) and the others go on. ``on_run`` is called after each run."""
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
    if not (run_dir / RESULT_FILE).is_file():
        return
    result = read_result(run_dir)
    if any(result.summary.get(k) != v for k, v in scores.items()):
        write_result(result.model_copy(update={"summary": {**result.summary, **scores}}), run_dir)
