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

import contextlib
import json
import logging
import math
import os
import re
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeGuard

from ablate.result import RunResult, curve_step

log = logging.getLogger(__name__)

MAX_METRICS_PER_BATCH = 1000  # MLflow's limits per log_batch call
MAX_PARAMS_PER_BATCH = 100
ROLE_TAG = "ablate.role"
PARENT_TAG = "ablate.parent"
# what MLflow's UI opens an experiment on: its runs (training runs), not its GenAI overview
KIND_TAG, KIND = "mlflow.experimentKind", "custom_model_development"
STEPS_EVERY_S = 2.0  # live step metrics are logged at most this often per run
END_STATUS = {"done": "FINISHED", "diverged": "FINISHED", "pruned": "FINISHED", "failed": "FAILED",
              "interrupted": "KILLED"}


_MLFLOW_REFUSES = re.compile(r"[^\w\-. :/]")


def mlflow_key(name: str) -> str:
    """A metric's name as MLflow accepts it: each character it refuses becomes ':' (``bench/mqar@256`` is
    ``bench/mqar:256`` in MLflow; MLflow allows letters, digits, ``_ - . : /`` and spaces)."""
    return _MLFLOW_REFUSES.sub(":", name)


def experiment_name(named: str | None = None) -> str | None:
    """The MLflow experiment the user names for a grid: ``named`` (``--mlflow-experiment``), else
    ``MLFLOW_EXPERIMENT_NAME``; None: each grid its own experiment, of its name."""
    return named or os.environ.get("MLFLOW_EXPERIMENT_NAME") or None


def tracking_uri(home: Path) -> str:
    """``MLFLOW_TRACKING_URI`` if set, else ``sqlite:///$ABLATE_HOME/mlflow.db`` (absolute)."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path(home).resolve() / 'mlflow.db'}"


def artifact_root(home: Path) -> str:
    """Where new experiments keep their artifacts: ``$ABLATE_HOME/mlartifacts`` as a file URI."""
    return (Path(home).resolve() / "mlartifacts").as_uri()


def mlflow_params(config: Mapping[str, Any]) -> dict[str, str]:
    """A config as MLflow params: the store's dotted paths and values (``ablate.store.records.flatten``: a
    list is its compact JSON), as text.

    >>> mlflow_params({"train": {"lr": 0.003, "steps": 30}, "seed": 0, "data": {"train": [{"weight": 1}]}})
    {'train.lr': '0.003', 'train.steps': '30', 'seed': '0', 'data.train': '[{"weight":1}]'}
    """
    from ablate.store.records import flatten

    return {key: str(value) for key, value in flatten(config).items()}


def _quiet_mlflow() -> None:
    for name in ("mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)
    # it logs a failed write's whole traceback and SQL, then raises: the mirror reports it, in one line
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)


def _finite(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@contextlib.contextmanager
def _creation_lock(uri: str) -> Iterator[None]:
    """An exclusive file lock beside a SQLite tracking store while it is opened (and maybe created): MLflow's
    first-time schema migration is not safe when two processes run it at once."""
    if not uri.startswith("sqlite:///"):
        yield
        return
    from ablate.layout import file_lock

    db = Path(uri.removeprefix("sqlite:///"))
    with file_lock(db.with_name(db.name + ".lock")):
        yield


def log_result_artifacts(client: Any, mlflow_run_id: str, result: RunResult) -> None:
    """A run's artifacts: its resolved config, its ``result.json`` and its probe values (logged again, they
    replace the earlier copies)."""
    with tempfile.TemporaryDirectory(prefix="ablate-mlflow-") as tmp:
        tmp_dir = Path(tmp)
        (tmp_dir / "config.json").write_text(json.dumps(result.config, indent=1, sort_keys=True))
        (tmp_dir / "result.json").write_text(result.model_dump_json(indent=1))
        if result.probes:
            probes = {"probes": result.probes, "histograms": result.histograms,
                      "histogram_edges": result.histogram_edges}
            (tmp_dir / "probes.json").write_text(json.dumps(probes, indent=1))
        client.log_artifacts(mlflow_run_id, str(tmp_dir))


def _client(uri: str) -> Any:
    from mlflow import MlflowClient

    _quiet_mlflow()
    return MlflowClient(uri)


def open_client(uri: str) -> Any:
    """An ``MlflowClient`` on ``uri``, MLflow's own logging quietened; a new SQLite store is made under the
    file lock."""
    with _creation_lock(uri):
        return _client(uri)


def grid_page(uri: str, grid: str | None = None) -> tuple[str, str | None]:
    """``(page, grid)``: the path of MLflow's UI page of a grid's runs (``#/experiments/<id>/runs``), for
    ``grid`` or else the grid whose experiment changed last; ``("", None)`` when the store holds no grid yet,
    or is not a SQLite file (a UserInputError names the grids there are when ``grid`` is not one). A grid
    mirrored into an experiment the user named is found by its parent run there.

    Read from the SQLite file as MLflow keeps it, read-only, without importing MLflow: ``ablate ui`` stays a
    small process that stops at once. The experiments opening on their runs is the mirror's doing
    (``KIND_TAG``, set when a grid's experiment is made or next mirrored into)."""
    import sqlite3

    from ablate.errors import UserInputError, one_of

    if not uri.startswith("sqlite:///"):
        return "", None
    read_only = f"file:{uri.removeprefix('sqlite:///')}?mode=ro"
    try:
        with contextlib.closing(sqlite3.connect(read_only, uri=True)) as db:
            grids = db.execute("SELECT experiment_id, name FROM experiments WHERE lifecycle_stage = 'active' "
                               "AND name != 'Default' ORDER BY last_update_time DESC").fetchall()
            # (experiment, grid) of each grid's parent run: a grid in a named experiment is found by it
            parents = db.execute(
                "SELECT r.experiment_id, p.value FROM runs r JOIN tags p ON p.run_uuid = r.run_uuid "
                "JOIN tags g ON g.run_uuid = r.run_uuid WHERE r.lifecycle_stage = 'active' AND "
                f"p.key = '{PARENT_TAG}' AND g.key = '{ROLE_TAG}' AND g.value = 'grid'").fetchall()
    except sqlite3.Error:  # not MLflow's schema (another version's): the UI's own home page
        return "", None
    if not grids and grid is None:
        return "", None
    named = {name: eid for eid, name in grids}
    found = {name: eid for eid, name in parents} | named  # a grid's own experiment first
    if grid is None:
        return f"#/experiments/{grids[0][0]}/runs", str(grids[0][1])
    if grid not in found:
        raise UserInputError(f"--grid: {one_of(grid, sorted(found), what='grid')}")
    return f"#/experiments/{found[grid]}/runs", grid


def _log_batches(client: Any, rid: str, metrics: Sequence[Any], tags: Sequence[Any] = ()) -> None:
    """``metrics`` (and ``tags``, with the first batch) in batches of MLflow's limit, one transaction each."""
    for i in range(0, max(len(metrics), 1 if tags else 0), MAX_METRICS_PER_BATCH):
        client.log_batch(rid, metrics=list(metrics[i:i + MAX_METRICS_PER_BATCH]),
                         tags=list(tags) if i == 0 else [])


def log_probes(client: Any, mlflow_run_id: str, result: RunResult) -> int:
    """A done run's probes measured again (``ablate probe``), into its nested run ``mlflow_run_id``: each
    probe point ``log_result`` would log (the probe summary at the run's last step, ``probe/<name>`` at step =
    layer) that the run lacks or holds with another value, then the artifacts again. MLflow shows a step's
    latest value, so a changed one replaces the old; the run's status is left as it is. Returns how many
    points were logged."""
    from mlflow.entities import Metric

    from ablate.metrics import SUMMARY

    probed = {mlflow_key(m.name) for m in SUMMARY if m.source == "runner (probes)"}
    points = [m for m in MlflowMirror._metrics(result,
                                               Metric) if m.key in probed or m.key.startswith("probe/")]
    have = client.get_run(mlflow_run_id).data.metrics
    latest: dict[str, dict[int, float]] = {}  # key -> step -> the value MLflow shows there
    for key in {m.key for m in points} & set(have):
        history = sorted(client.get_metric_history(mlflow_run_id, key), key=lambda p: (p.timestamp, p.value))
        latest[key] = {p.step: p.value for p in history}
    new = [m for m in points if latest.get(m.key, {}).get(m.step) != m.value]
    _log_batches(client, mlflow_run_id, new)
    log_result_artifacts(client, mlflow_run_id, result)
    return len(new)


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
        with _creation_lock(self.uri):
            self.client = _client(self.uri)
            self.experiment_id = self._experiment()
        self.parent_id = self._parent(grid, role="grid")
        self._parents: dict[str, str] = {grid: self.parent_id}
        self._runs: dict[str, str] = {}  # ablate run id -> its nested MLflow run id
        self._last: dict[str, dict[str, int]] = {}  # nested run id -> metric -> last step logged
        # nested runs made by this mirror whose every live batch was logged: what they hold is known exactly
        self._exact: set[str] = set()

    def _experiment(self) -> str:
        """The experiment's id: found by its name, else made (tagged to open on its runs). A user's experiment
        that exists is used as it is; the grid's own, made by an older ablate, gets the tag."""
        from ablate.errors import UserInputError

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
    def start(self, run_id: str, config: Mapping[str, Any], *, parent: str | None = None,
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

    def log_steps(self, run_id: str, rows: Iterable[Mapping[str, Any]]) -> None:
        """Step metrics of a running run (dicts with ``step``); steps it logged before are not logged
        again."""
        from mlflow.entities import Metric

        rid = self._runs.get(run_id)
        if rid is None:
            return
        now, last = int(time.time() * 1000), self._last.get(rid, {})
        points = ((mlflow_key(k), v, int(r["step"])) for r in rows for k, v in r.items() if k != "step")
        self._log(rid, [Metric(k, float(v), now, step) for k, v, step in points
                        if _finite(v) and step > last.get(k, -1)])

    def log_result(self, result: RunResult, *, parent: str | None = None,
                   tags: Mapping[str, str] | None = None, name: str | None = None
                   ) -> str:
        """Complete the run's nested run from its result (what it lacks of curves, summary, probes, artifacts)
        and end it; a run never started here is made now. Returns the nested MLflow run id."""
        from mlflow.entities import Metric

        rid = self._runs.get(result.run_id) or self.start(result.run_id, result.config, parent=parent,
                                                          tags=tags, name=name)
        run_tags = {"status": str(result.status), "resumed_from": str(result.resumed_from),
                    **{f"provenance.{k}": str(v) for k, v in result.provenance.items()}}
        if result.error:
            run_tags["error"] = result.error[:5000]
        self._log(rid, self._new_points(rid, self._metrics(result, Metric)), tags=run_tags)
        if result.config:
            log_result_artifacts(self.client, rid, result)
        self.client.set_terminated(rid, status=END_STATUS.get(str(result.status), "FINISHED"),
                                   end_time=_ms(result.finished))
        return rid

    def end(self, run_id: str, status: str, *, tags: Mapping[str, Any] | None = None) -> None:
        """End a run that leaves no result (``interrupted`` -> KILLED, ``pruned`` -> FINISHED) with its
        tags."""
        rid = self._runs.get(run_id)
        if rid is None:
            return
        self._tags(rid, {"status": status, **(tags or {})})
        self.client.set_terminated(rid, status=END_STATUS.get(status, "FINISHED"))

    # ------------------------------------------------------------ helpers
    def _run(self, run_id: str, config: Mapping[str, Any], *, parent: str | None,
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

    def _new_points(self, rid: str, metrics: list[Any]) -> list[Any]:
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

    def _tags(self, rid: str, tags: Mapping[str, Any], params: Sequence[Any] = ()) -> None:
        """Tags (and params) in as few ``log_batch`` calls as MLflow's limits allow: one transaction each."""
        from mlflow.entities import RunTag

        batch = [RunTag(k, str(v)) for k, v in tags.items()]
        params = list(params)
        for i in range(0, max(len(params), 1), MAX_PARAMS_PER_BATCH):
            self.client.log_batch(rid, params=params[i:i + MAX_PARAMS_PER_BATCH],
                                  tags=batch if i == 0 else [])

    def _log(self, rid: str, metrics: list[Any], *, tags: Mapping[str, Any] | None = None) -> None:
        """Metrics (and tags, with the first batch) in batches of MLflow's limit; each key's last logged step
        is kept. A failed batch may have lost points: the run's history is then no longer known without
        reading it."""
        from mlflow.entities import RunTag

        try:
            _log_batches(self.client, rid, metrics, [RunTag(k, str(v)) for k, v in (tags or {}).items()])
        except Exception:
            self._exact.discard(rid)
            raise
        last = self._last.setdefault(rid, {})
        for m in metrics:
            last[m.key] = max(last.get(m.key, -1), m.step)

    @staticmethod
    def _metrics(result: RunResult, Metric: Any) -> list[Any]:
        now = int(time.time() * 1000)
        curves = result.metrics
        steps, val_steps = curves.get("step", []), curves.get("val_step", [])
        out = []
        for name, values in curves.items():
            if name in ("step", "val_step"):
                continue
            xs = steps if len(values) == len(steps) else val_steps if len(values) == len(val_steps) else None
            xs = xs if xs is not None else list(range(len(values)))
            out += [Metric(mlflow_key(name), float(v), now, curve_step(result.run_id, x))
                    for x, v in zip(xs, values, strict=True) if _finite(v)]
        last = curve_step(result.run_id, steps[-1]) if steps else 0
        out += [Metric(mlflow_key(k), float(v), now, last) for k, v in result.summary.items()
                if _finite(v) and k not in curves]
        for name, per_layer in result.probes.items():
            out += [Metric(f"probe/{name}", float(v), now,
                           layer) for layer, v in enumerate(per_layer) if _finite(v)]
        return out

    def close(self) -> None:
        """Mark the grid's parent runs finished (a later ``ablate run`` of the grid nests under them
        again)."""
        for parent_id in self._parents.values():
            self.client.set_terminated(parent_id, status="FINISHED")


def _ms(stamp: str | None) -> int | None:
    if not stamp:
        return None
    from datetime import datetime

    try:
        return int(datetime.fromisoformat(stamp).timestamp() * 1000)
    except ValueError:
        return None
