"""MLflow mirroring: each grid is a parent run, each finished run a nested run, logged from its ``result.json``.

Logged after a run ends, never from inside training: the nested run gets the flattened config as params, the
step curves (batched), the final summary numbers, per-layer probe values (``probe/<name>``, step = layer), tags
(``grid``, ``variant``, ``seed``, ``run_id``, ``status``) and artifacts (the resolved config, ``result.json``,
the probe values). Mirroring a run again replaces its nested run, so there is one per run.

The default tracking store is ``sqlite:///$ABLATE_HOME/mlflow.db`` with artifacts under ``$ABLATE_HOME/mlartifacts``
(never a stray ``./mlruns``); ``MLFLOW_TRACKING_URI`` points elsewhere. ``MirrorThread`` runs the logging in a
background thread so the executor's loop never waits for MLflow, and a failing MLflow never fails a grid.
"""

from __future__ import annotations

import json
import logging
import math
import os
import queue
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from ablate.result import RunResult

log = logging.getLogger(__name__)

MAX_METRICS_PER_BATCH = 1000  # MLflow's limits per log_batch call
MAX_PARAMS_PER_BATCH = 100
ROLE_TAG = "ablate.role"


def tracking_uri(home: Path) -> str:
    """``MLFLOW_TRACKING_URI`` if set, else ``sqlite:///$ABLATE_HOME/mlflow.db`` (absolute)."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path(home).resolve() / 'mlflow.db'}"


def artifact_root(home: Path) -> str:
    """Where new experiments keep their artifacts: ``$ABLATE_HOME/mlartifacts`` as a file URI."""
    return (Path(home).resolve() / "mlartifacts").as_uri()


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """A nested config as MLflow params: dotted keys; lists and empty dicts as JSON.

    >>> flatten({"train": {"lr": 0.003, "steps": 30}, "seed": 0})
    {'train.lr': '0.003', 'train.steps': '30', 'seed': '0'}
    """
    out: dict[str, str] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{name}."))
        elif isinstance(value, (dict, list)):
            out[name] = json.dumps(value, sort_keys=True)
        else:
            out[name] = str(value)
    return out


def _quiet_mlflow() -> None:
    for name in ("mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


class MlflowMirror:
    """Logs finished runs of one grid into MLflow (in the calling thread; see ``MirrorThread``)."""

    def __init__(self, *, home: Path, grid: str, uri: str | None = None):
        import mlflow
        from mlflow import MlflowClient

        _quiet_mlflow()
        self.home = Path(home)
        self.uri = uri or tracking_uri(self.home)
        self.grid = grid
        # a local store (SQLite, a folder) keeps its artifacts under home; a tracking server decides for itself
        self._local_store = not self.uri.startswith(("http://", "https://", "databricks"))
        mlflow.set_tracking_uri(self.uri)
        self.client = MlflowClient(self.uri)
        self.experiment_id = self._experiment()
        self.parent_id = self._parent()

    def _experiment(self) -> str:
        exp = self.client.get_experiment_by_name(self.grid)
        if exp is not None:
            return exp.experiment_id
        location = artifact_root(self.home) + f"/{self.grid}" if self._local_store else None
        return self.client.create_experiment(self.grid, artifact_location=location)

    def _parent(self) -> str:
        found = self.client.search_runs([self.experiment_id], filter_string=f"tags.`{ROLE_TAG}` = 'grid'",
                                        max_results=1)
        if found:
            return found[0].info.run_id
        run = self.client.create_run(self.experiment_id, run_name=self.grid,
                                     tags={ROLE_TAG: "grid", "grid": self.grid})
        return run.info.run_id

    def log_result(self, result: RunResult, *, grid_text: str | None = None) -> str:
        """Mirror one run (replacing an earlier mirror of it); return the nested MLflow run id."""
        from mlflow.entities import Metric, Param, RunTag

        for old in self.client.search_runs([self.experiment_id], filter_string=f"tags.run_id = '{result.run_id}'"):
            self.client.delete_run(old.info.run_id)
        cfg = result.config
        tags = {"grid": self.grid, "variant": str(cfg.get("variant")), "seed": str(cfg.get("seed")),
                "run_id": result.run_id, "status": result.status, ROLE_TAG: "run",
                "mlflow.parentRunId": self.parent_id}
        if result.error:
            tags["error"] = result.error[:5000]
        run = self.client.create_run(self.experiment_id, run_name=f"{cfg.get('variant')}-s{cfg.get('seed')}",
                                     start_time=_ms(result.started), tags=tags)
        rid = run.info.run_id
        params = [Param(k, v[:6000]) for k, v in flatten(cfg).items()]
        for i in range(0, len(params), MAX_PARAMS_PER_BATCH):
            self.client.log_batch(rid, params=params[i:i + MAX_PARAMS_PER_BATCH])
        metrics = self._metrics(result, Metric)
        for i in range(0, len(metrics), MAX_METRICS_PER_BATCH):
            self.client.log_batch(rid, metrics=metrics[i:i + MAX_METRICS_PER_BATCH])
        self.client.log_batch(rid, tags=[RunTag("resumed_from", str(result.resumed_from))])
        self._artifacts(rid, result)
        status = "FAILED" if result.status == "failed" else "FINISHED"
        self.client.set_terminated(rid, status=status, end_time=_ms(result.finished))
        return rid

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
            out += [Metric(name, float(v), now, int(x)) for x, v in zip(xs, values, strict=True) if _finite(v)]
        last = int(steps[-1]) if steps else 0
        out += [Metric(k, float(v), now, last) for k, v in result.summary.items() if _finite(v) and k not in curves]
        for name, per_layer in result.probes.items():
            out += [Metric(f"probe/{name}", float(v), now, layer) for layer, v in enumerate(per_layer) if _finite(v)]
        return out

    def _artifacts(self, rid: str, result: RunResult) -> None:
        with tempfile.TemporaryDirectory(prefix="ablate-mlflow-") as tmp:
            tmp_dir = Path(tmp)
            (tmp_dir / "config.json").write_text(json.dumps(result.config, indent=1, sort_keys=True))
            (tmp_dir / "result.json").write_text(result.model_dump_json(indent=1))
            if result.probes:
                probes = {"probes": result.probes, "histograms": result.histograms,
                          "histogram_edges": result.histogram_edges}
                (tmp_dir / "probes.json").write_text(json.dumps(probes, indent=1))
            self.client.log_artifacts(rid, str(tmp_dir))

    def close(self) -> None:
        """Mark the grid's parent run finished (a later ``ablate run`` of the grid nests under it again)."""
        self.client.set_terminated(self.parent_id, status="FINISHED")


def _ms(stamp: str | None) -> int | None:
    if not stamp:
        return None
    from datetime import datetime

    try:
        return int(datetime.fromisoformat(stamp).timestamp() * 1000)
    except ValueError:
        return None


class MirrorThread:
    """``MlflowMirror`` in a background thread: ``submit(run_dir)``, ``logged()`` -> done mirrors, ``close()``.

    Errors become warnings (``errors`` keeps their text): MLflow being down never fails a grid, and the store and
    ``result.json`` still hold everything.
    """

    def __init__(self, *, home: Path, grid: str, uri: str | None = None):
        self._args = dict(home=home, grid=grid, uri=uri)
        self._inbox: queue.Queue[RunResult | None] = queue.Queue()
        self._done: queue.Queue[tuple[str, str]] = queue.Queue()
        self.errors: list[str] = []
        self._thread = threading.Thread(target=self._loop, name="mlflow-mirror", daemon=True)
        self._thread.start()

    def submit(self, result: RunResult) -> None:
        """Queue one finished run for mirroring."""
        self._inbox.put(result)

    def logged(self) -> list[tuple[str, str]]:
        """``(run_id, mlflow_run_id)`` of every mirror finished since the last call."""
        out = []
        while True:
            try:
                out.append(self._done.get_nowait())
            except queue.Empty:
                return out

    def close(self, timeout: float | None = 120.0) -> None:
        """Finish what was submitted (up to ``timeout`` seconds) and stop the thread."""
        self._inbox.put(None)
        self._thread.join(timeout)
        if self._thread.is_alive():
            self.errors.append(f"MLflow mirroring did not finish within {timeout:.0f} s")

    def _loop(self) -> None:
        mirror: MlflowMirror | None = None
        try:
            mirror = MlflowMirror(**self._args)
        except Exception as exc:  # noqa: BLE001 - reported, the grid goes on
            self._fail(f"MLflow at {self._args.get('uri') or tracking_uri(self._args['home'])}: {exc}")
        while (result := self._inbox.get()) is not None:
            if mirror is None:
                continue
            try:
                self._done.put((result.run_id, mirror.log_result(result)))
            except Exception as exc:  # noqa: BLE001
                self._fail(f"MLflow mirror of run {result.run_id}: {exc}")
        if mirror is not None:
            try:
                mirror.close()
            except Exception as exc:  # noqa: BLE001
                self._fail(f"MLflow: {exc}")

    def _fail(self, message: str) -> None:
        log.warning("%s", message)
        self.errors.append(message)


def ui_command(home: Path, *, port: int = 5000) -> list[str]:
    """The ``mlflow ui`` command line over this home's tracking store, listening on 127.0.0.1 only.

    A ``MLFLOW_TRACKING_URI`` that is already a server has its own UI: that is a UserInputError naming it.
    """
    import sys

    from ablate.errors import UserInputError

    uri = tracking_uri(home)
    if uri.startswith(("http://", "https://", "databricks")):
        raise UserInputError(f"MLFLOW_TRACKING_URI is a tracking server ({uri}): open it in a browser instead")
    if uri.startswith("sqlite:///"):
        Path(uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    return [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri,
            "--default-artifact-root", artifact_root(home), "--host", "127.0.0.1", "--port", str(port)]
