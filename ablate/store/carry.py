"""``ablate db rehash`` end to end: each outdated run's directory moved under ABLATE_HOME, its rows re-keyed
through the ``Store`` (``rehash.move_rows``, one transaction per run), and its MLflow runs retagged; what
``rehash.py`` says a rehash is, this module does. It sits above ``store/api.py``, which imports the
session-level half (``rehash.py``) and never this one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ablate import layout
from ablate.result import RESULT_FILE, read_result, write_result
from ablate.runner.fingerprints import Fingerprints
from ablate.store.api import Store
from ablate.store.engine import sqlite_path
from ablate.store.mlflow_mirror import ROLE_TAG, log_result_artifacts
from ablate.store.rehash import Move, RehashPlan, conflict


@dataclass
class RehashReport:
    """What a rehash did."""

    moved: list[Move] = field(default_factory=list)
    dirs: int = 0
    mlflow_tags: int = 0
    conflicts: list[tuple[str, str, str]] = field(default_factory=list)  # (old, new, why left)
    unreadable: list[tuple[str, str]] = field(default_factory=list)
    current: int = 0

    def lines(self) -> list[str]:
        """One line per outcome, for the CLI."""
        out = [f"{len(self.moved)} run(s) carried over to today's ids ({self.dirs} run directories moved, "
               f"{self.mlflow_tags} MLflow runs retagged); {self.current} already current"]
        out += [f"left {old}: {why}" for old, _new, why in self.conflicts]
        out += [f"cannot carry {rid}: {why}" for rid, why in self.unreadable]
        return out


def move_dir(home: Path, move: Move) -> bool:
    """``runs/<old>`` -> ``runs/<new>`` and its ``result.json``'s ``run_id``; True if anything changed.

    Idempotent: a directory already moved is only checked. Both present: left alone (the store decides)."""
    old, new = layout.run_dir(home, move.old), layout.run_dir(home, move.new)
    changed = False
    if old.is_dir() and not new.exists():
        old.rename(new)
        changed = True
    if new.is_dir() and (new / RESULT_FILE).is_file():
        result = read_result(new)
        if result.run_id == move.old:
            write_result(result.model_copy(update={"run_id": move.new, "config": move.config}), new)
            changed = True
    return changed


def retag_mlflow(uri: str, moves: list[Move], home: Path) -> int:
    """Set the ``run_id`` tag of each moved run's MLflow runs to its new id, and log its rewritten
    ``result.json`` (and config) over the old artifacts; how many runs were retagged."""
    from mlflow import MlflowClient  # only when a tracking store exists: a rehash without one skips mlflow

    client = MlflowClient(uri)
    new_of = {m.old: m.new for m in moves}
    experiments = [e.experiment_id for e in client.search_experiments()]
    count = 0
    for start in range(0, len(experiments), 100):
        token = None
        while True:
            page = client.search_runs(experiments[start:start + 100],
                                      filter_string=f"tags.`{ROLE_TAG}` = 'run'", max_results=1000,
                                      page_token=token)
            for run in page:
                new = new_of.get(run.data.tags.get("run_id", ""))
                if new is not None:
                    client.set_tag(run.info.run_id, "run_id", new)
                    if (layout.run_dir(home, new) / RESULT_FILE).is_file():  # rewritten by move_dir
                        log_result_artifacts(client, run.info.run_id, read_result(layout.run_dir(home, new)))
                    count += 1
            token = page.token
            if not token:
                break
    return count


def rehash(store: Store, home: Path, *, mlflow_uri: str | None = None, dry_run: bool = False
           ) -> tuple[RehashPlan, RehashReport]:
    """Carry every outdated run of ``store`` (and its directory under ``home``, and its MLflow runs at
    ``mlflow_uri``) over to today's id. ``dry_run``: only the plan."""
    todo = store.rehash_plan(fingerprints=Fingerprints.for_home(home))
    report = RehashReport(unreadable=list(todo.unreadable), current=len(todo.current))
    if dry_run:
        return todo, report
    taken = store.statuses(run_ids=[m.new for m in todo.moves])
    for move in todo.moves:
        if taken.get(move.new, "queued") != "queued":  # checked before the directory moves
            report.conflicts.append((move.old, move.new, conflict(move, taken[move.new])))
            continue
        if move_dir(home, move):
            report.dirs += 1
        why = store.move_run(move)
        if why is None:
            report.moved.append(move)
        else:
            report.conflicts.append((move.old, move.new, why))
    if report.moved and mlflow_uri and _tracking_store_exists(mlflow_uri):
        report.mlflow_tags = retag_mlflow(mlflow_uri, report.moved, home)
    store.mark_ids_current(todo.stems)
    return todo, report


def _tracking_store_exists(uri: str) -> bool:
    """A local SQLite tracking store that was never created is not created by a rehash."""
    path = sqlite_path(uri) if uri.startswith("sqlite") else None
    return path is None or path.is_file()
