"""``ablate probe``: probe finished runs again from their checkpoints (``probe_runs``), into the store, their
``result.json`` and the MLflow run each run's training wrote to (``ProbeMirror``)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ablate import layout
from ablate.errors import AblateError
from ablate.metrics import SUMMARY
from ablate.result import RunResult
from ablate.runner.reprobe import probe_again
from ablate.store.api import Store
from ablate.store.faults import first_line
from ablate.store.mlflow_mirror import log_probes, open_client, tracking_uri

if TYPE_CHECKING:
    from mlflow import MlflowClient


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
        self._client: MlflowClient | None = None

    def log(self, result: RunResult) -> str | None:
        """Log ``result``'s probes into its MLflow run; None, or the line saying why MLflow was not
        updated."""
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
