"""MLflow mirroring: each grid is a parent run in an experiment (the grid's own, or one the user names), each
ablate run one nested run, live.

A nested run is opened when its run starts (status RUNNING, the flattened config as params, tags ``grid``,
``variant``, ``seed``, ``run_id``), its step metrics (``loss``, ``lr``, ``grad_norm``, ``tokens_per_s``,
``val_ppl``) are logged in batches while it trains, and when it ends its ``result.json`` fills in whatever is
missing (every curve point it lacks, the summary numbers (under ``mlflow_key``'s names), per-layer probe
values ``probe/<name>`` at step = layer, artifacts: the resolved config, ``result.json``, the probe values)
before it is set FINISHED (FAILED for a crash, KILLED for an interrupted run). There is one nested run per
ablate run: a resumed run, or a run mirrored again, continues the same MLflow run (found by its ``run_id``
tag) and never logs a point twice. A tuning trial nests under its study's parent run instead of the grid's.

The experiment is the grid's name, unless the user names one (``--mlflow-experiment``, else
``MLFLOW_EXPERIMENT_NAME``: ``experiment_name``), which is used as it is when it exists (its tags and its
other runs are left alone) and made only when missing. Several grids may share it: each finds its own parent
run by its name, and its nested runs by their ``run_id`` tag among the runs ablate made (``ablate.role =
run``), so the experiment's other runs are never read as, or deleted as, a duplicate of one of ours.

The default tracking store is ``sqlite:///$ABLATE_HOME/mlflow.db`` with artifacts under
``$ABLATE_HOME/mlartifacts`` (never a stray ``./mlruns``); ``MLFLOW_TRACKING_URI`` points elsewhere. Creating
a new SQLite tracking store is done under a file lock, so that processes starting together on a new home do
not race on MLflow's schema. ``MlflowMirror`` logs in the calling thread; executors drive it from a background
thread (``ablate.execute.mirror.MirrorThread``), so neither training nor the executor ever waits for MLflow. A
done run probed again (``ablate probe``) has its new and changed probe values logged into the same nested run
(``log_probes``).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ablate.errors import UserInputError
from ablate.result import RunResult
from ablate.store.mlflow_tracking import (
    KIND,
    KIND_TAG,
    MAX_PARAMS_PER_BATCH,
    PARENT_TAG,
    ROLE_TAG,
    artifact_root,
    creation_lock,
    experiment_name,
    finite,
    grid_page,
    log_batches,
    log_probes,
    log_result_artifacts,
    mlflow_key,
    mlflow_params,
    new_client,
    open_client,
    result_points,
    tracking_uri,
)

if TYPE_CHECKING:
    from mlflow.entities import Metric, Param

# kept importable from here, where they were: the CLI's commands and the executors ask for them by this module
__all__ = ["END_STATUS", "ROLE_TAG", "STEPS_EVERY_S", "MlflowMirror", "artifact_root", "experiment_name",
           "grid_page", "log_probes", "log_result_artifacts", "mlflow_params", "open_client", "tracking_uri"]

log = logging.getLogger(__name__)

STEPS_EVERY_S = 2.0  # live step metrics are logged at most this often per run
END_STATUS = {"done": "FINISHED", "diverged": "FINISHED", "pruned": "FINISHED", "failed": "FAILED",
              "interrupted": "KILLED"}


class MlflowMirror:
    """Logs one grid's runs into MLflow (in the calling thread; ``ablate.execute.mirror.MirrorThread`` drives
    it from a background thread): into the experiment ``experiment``, else the grid's own (of its name)."""

    def __init__(self, *, home: Path, grid: str, uri: str | None = None, experiment: str | None = None):
        self.home = Path(home)
        self.uri = uri or tracking_uri(self.home)
        self.grid = grid
        self.experiment = experiment or grid
        # a local store (SQLite, a folder) keeps its artifacts under home; a tracking server decides for
        # itself
        self._local_store = not self.uri.startswith(("http://", "https://", "databricks"))
        with creation_lock(self.uri):  # and the experiment made, when it is new
            self.client = new_client(self.uri)
            self.experiment_id = self._experiment()
        self.parent_id = self._parent(grid, role="grid")
        self._parents: dict[str, str] = {grid: self.parent_id}
        self._runs: dict[str, str] = {}  # ablate run id -> its nested MLflow run id
        self._last: dict[str, dict[str, int]] = {}  # nested run id -> metric -> last step logged
        # nested runs made by this mirror whose every live batch was logged: what they hold is known exactly
        self._exact: set[str] = set()
        # runs whose own process logs into them too (open_run) -> the keys this mirror logged there
        self._shared: dict[str, set[str]] = {}

    def _experiment(self) -> str:
        """The experiment's id: found by its name, else made (tagged to open on its runs). A user's experiment
        that exists is used as it is; the grid's own, made by an older ablate, gets the tag."""
        exp = self.client.get_experiment_by_name(self.experiment)
        if exp is not None and exp.lifecycle_stage == "deleted":  # MLflow keeps its name, and refuses runs
            raise UserInputError(f"the MLflow experiment {self.experiment!r} is deleted: restore it (mlflow "
                                 f"experiments restore --experiment-id {exp.experiment_id}) or name another")
        if exp is not None:
            found: str = exp.experiment_id
            if self.experiment == self.grid and KIND_TAG not in exp.tags:  # made by an older ablate
                self.client.set_experiment_tag(found, KIND_TAG, KIND)
            return found
        folder = re.sub(r"[^\w./-]", "_", self.experiment)  # a grid's name as it is; a user's made a path
        location = artifact_root(self.home) + f"/{folder}" if self._local_store else None
        made: str = self.client.create_experiment(self.experiment, artifact_location=location,
                                                  tags={KIND_TAG: KIND})
        return made

    def _parent(self, name: str, *, role: str) -> str:
        """The parent run named ``name`` (the grid's, or a tuning study's), made on first use; among the
        experiment's runs, only one ablate made for this name (another grid's, a user's own, are not it)."""
        query = f"tags.`{ROLE_TAG}` = '{role}' and tags.`{PARENT_TAG}` = '{name}'"
        found = self.client.search_runs([self.experiment_id], filter_string=query, max_results=1)
        run = found[0] if found else self.client.create_run(
            self.experiment_id, run_name=name, tags={ROLE_TAG: role, PARENT_TAG: name, "grid": self.grid})
        rid: str = run.info.run_id
        return rid

    # ------------------------------------------------------------ one run
    def start(self, run_id: str, config: Mapping[str, object], *, parent: str | None = None,
              tags: Mapping[str, str] | None = None, name: str | None = None) -> str:
        """Open (or, for a resumed run, reopen) the run's nested MLflow run: RUNNING, params, tags; a new one
        is named ``name``, else ``<variant>-s<seed>``."""
        from mlflow.entities import Param

        rid, existing = self._run(run_id, config, parent=parent, name=name)
        last: dict[str, int] = {}
        if existing is None:
            self._exact.add(rid)
        else:
            self.client.update_run(rid, status="RUNNING")
            last = {k: max(p.step for p in self.client.get_metric_history(rid,
                                                                          k)) for k in existing.data.metrics}
        self._last[rid] = last
        have = existing.data.params if existing is not None else {}
        params = [Param(k, v[:6000]) for k, v in mlflow_params(config).items() if k not in have]
        self._tags(rid, {"status": "running", **(tags or {})}, params)
        return rid

    def open_run(self, run_id: str, config: Mapping[str, object], *, parent: str | None = None,
                 tags: Mapping[str, str] | None = None, name: str | None = None) -> str:
        """``start`` now, for a run whose own process may log into its MLflow run (a training command given
        ``MLFLOW_RUN_ID``): what the run holds is then read back before its result is logged, not assumed."""
        rid = self.start(run_id, config, parent=parent, tags=tags, name=name)
        self._exact.discard(rid)
        self._shared.setdefault(rid, set())
        return rid

    def log_steps(self, run_id: str, rows: Iterable[Mapping[str, Any]]) -> None:
        """Step metrics of a running run (dicts with ``step``); steps it logged before are not logged
        again."""
        from mlflow.entities import Metric

        rid = self._runs.get(run_id)
        if rid is None:
            return
        now, last = int(time.time() * 1000), self._last.get(rid, {})
        points = ((mlflow_key(k), v, int(r["step"])) for r in rows for k, v in r.items() if k != "step")
        new = [Metric(k, float(v), now, step) for k, v, step in points
               if finite(v) and step > last.get(k, -1)]
        if (mine := self._shared.get(rid)) is not None:  # what its own process logged is not logged again
            theirs = set(self.client.get_run(rid).data.metrics) - mine
            new = [m for m in new if m.key not in theirs]
            mine.update(m.key for m in new)
        self._log(rid, new)

    def log_result(self, result: RunResult, *, parent: str | None = None,
                   tags: Mapping[str, str] | None = None, name: str | None = None
                   ) -> str:
        """Complete the run's nested run from its result (what it lacks of curves, summary, probes, artifacts)
        and end it; a run never started here is made now. Returns the nested MLflow run id."""

        rid = self._runs.get(result.run_id) or self.start(result.run_id, result.config, parent=parent,
                                                          tags=tags, name=name)
        run_tags = {"status": str(result.status), "resumed_from": str(result.resumed_from),
                    **{f"provenance.{k}": str(v) for k, v in result.provenance.items()}}
        if result.error:
            run_tags["error"] = result.error[:5000]
        self._log(rid, self._new_points(rid, result_points(result)), tags=run_tags)
        if result.config:
            log_result_artifacts(self.client, rid, result)
        self.client.set_terminated(rid, status=END_STATUS.get(str(result.status), "FINISHED"),
                                   end_time=_ms(result.finished))
        return rid

    def end(self, run_id: str, status: str, *, tags: Mapping[str, object] | None = None) -> None:
        """End a run that leaves no result (``interrupted`` -> KILLED, ``pruned`` -> FINISHED) with its
        tags."""
        rid = self._runs.get(run_id)
        if rid is None:
            return
        self._tags(rid, {"status": status, **(tags or {})})
        self.client.set_terminated(rid, status=END_STATUS.get(status, "FINISHED"))

    # ------------------------------------------------------------ helpers
    def _run(self, run_id: str, config: Mapping[str, object], *, parent: str | None,
             name: str | None = None) -> tuple[str, Any]:
        """The nested run of ``run_id`` (found by its tag, made if none) and the existing Run (None if
        new)."""
        query = f"tags.run_id = '{run_id}' and tags.`{ROLE_TAG}` = 'run'"
        found = self.client.search_runs([self.experiment_id], filter_string=query,
                                        order_by=["attributes.start_time DESC"])
        for extra in found[1:]:  # one per run: an older mirror's duplicates go (only ablate's own runs)
            self.client.delete_run(extra.info.run_id)
        if found:
            self._runs[run_id] = found[0].info.run_id
            return found[0].info.run_id, found[0]
        # the grid's parent run is made with the mirror: only a study's is new here
        parent = parent or self.grid
        parent_id = self._parents.get(parent)
        if parent_id is None:
            parent_id = self._parents[parent] = self._parent(parent, role="study")
        tags = {"grid": self.grid, "variant": str(config.get("variant")), "seed": str(config.get("seed")),
                "run_id": run_id, ROLE_TAG: "run", "mlflow.parentRunId": parent_id}
        run = self.client.create_run(self.experiment_id,
                                     run_name=name or f"{config.get('variant')}-s{config.get('seed')}",
                                     tags=tags)
        self._runs[run_id] = run.info.run_id
        return run.info.run_id, None

    def nested(self) -> dict[str, str]:
        """``{run id: its nested MLflow run id}`` of this grid's runs the experiment holds."""
        query = f"tags.`{ROLE_TAG}` = 'run' and tags.grid = '{self.grid}'"
        out: dict[str, str] = {}
        token = None
        while True:
            page = self.client.search_runs([self.experiment_id], filter_string=query, max_results=1000,
                                           page_token=token)
            out |= {r.data.tags["run_id"]: r.info.run_id for r in page if "run_id" in r.data.tags}
            token = page.token
            if not token:
                return out

    def _new_points(self, rid: str, metrics: list[Metric]) -> list[Metric]:
        """``metrics`` without the (key, step) points the run already has: for a run this mirror made and
        logged without a miss, those up to each key's last logged step; else each key's history, read once."""
        if rid in self._exact:
            last = self._last.get(rid, {})
            return [m for m in metrics if m.step > last.get(m.key, -1)]
        have = self.client.get_run(rid).data.metrics
        seen: dict[str, set[int]] = {}
        out = []
        for m in metrics:
            if m.key not in seen:
                known = m.key in have
                seen[m.key] = {p.step for p in self.client.get_metric_history(rid, m.key)} if known else set()
            if m.step not in seen[m.key]:
                seen[m.key].add(m.step)
                out.append(m)
        return out

    def _tags(self, rid: str, tags: Mapping[str, object], params: Sequence[Param] = ()) -> None:
        """Tags (and params) in as few ``log_batch`` calls as MLflow's limits allow: one transaction each."""
        from mlflow.entities import RunTag

        batch = [RunTag(k, str(v)) for k, v in tags.items()]
        params = list(params)
        for i in range(0, max(len(params), 1), MAX_PARAMS_PER_BATCH):
            self.client.log_batch(rid, params=params[i:i + MAX_PARAMS_PER_BATCH],
                                  tags=batch if i == 0 else [])

    def _log(self, rid: str, metrics: list[Metric], *, tags: Mapping[str, object] | None = None) -> None:
        """Metrics (and tags, with the first batch) in batches of MLflow's limit; each key's last logged step
        is kept. A failed batch may have lost points: the run's history is then no longer known without
        reading it."""
        from mlflow.entities import RunTag

        try:
            log_batches(self.client, rid, metrics, [RunTag(k, str(v)) for k, v in (tags or {}).items()])
        except Exception:
            self._exact.discard(rid)
            raise
        last = self._last.setdefault(rid, {})
        for m in metrics:
            last[m.key] = max(last.get(m.key, -1), m.step)

    def close(self) -> None:
        """Mark the grid's parent runs finished (a later ``ablate run`` of the grid nests under them
        again)."""
        for parent_id in self._parents.values():
            self.client.set_terminated(parent_id, status="FINISHED")


def _ms(stamp: str | None) -> int | None:
    if not stamp:
        return None
    try:
        return int(datetime.fromisoformat(stamp).timestamp() * 1000)
    except ValueError:
        return None
