"""The MLflow tracking store as ablate uses it: where it is (``tracking_uri``), a client on it, the names
ablate logs under (``mlflow_key``, ``mlflow_params``), the UI page of a grid (``grid_page``), and what is
logged of a run once it is done (its points, artifacts, probes measured again). ``ablate.store.mlflow_mirror``
mirrors runs live through these.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import sqlite3
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

from ablate.errors import UserInputError, one_of
from ablate.layout import file_lock
from ablate.metrics import SUMMARY
from ablate.result import RunResult, curve_step
from ablate.store.records import flatten

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities import Metric, RunTag

MAX_METRICS_PER_BATCH = 1000  # MLflow's limits per log_batch call
MAX_PARAMS_PER_BATCH = 100
ROLE_TAG = "ablate.role"
PARENT_TAG = "ablate.parent"
# what MLflow's UI opens an experiment on: its runs (training runs), not its GenAI overview
KIND_TAG, KIND = "mlflow.experimentKind", "custom_model_development"


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
    return {key: str(value) for key, value in flatten(config).items()}


def _quiet_mlflow() -> None:
    for name in ("mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)
    # it logs a failed write's whole traceback and SQL, then raises: the mirror reports it, in one line
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)


def finite(value: object) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@contextlib.contextmanager
def creation_lock(uri: str) -> Iterator[None]:
    """An exclusive file lock beside a SQLite tracking store while it is opened (and maybe created): MLflow's
    first-time schema migration is not safe when two processes run it at once."""
    if not uri.startswith("sqlite:///"):
        yield
        return
    db = Path(uri.removeprefix("sqlite:///"))
    with file_lock(db.with_name(db.name + ".lock")):
        yield


def log_result_artifacts(client: MlflowClient, mlflow_run_id: str, result: RunResult) -> None:
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


def new_client(uri: str) -> MlflowClient:
    """An ``MlflowClient`` on ``uri``, MLflow's own logging quietened (the caller holds ``creation_lock``)."""
    from mlflow import MlflowClient

    _quiet_mlflow()
    return MlflowClient(uri)


def open_client(uri: str) -> MlflowClient:
    """An ``MlflowClient`` on ``uri``, MLflow's own logging quietened; a new SQLite store is made under the
    file lock."""
    with creation_lock(uri):
        return new_client(uri)


def grid_page(uri: str, grid: str | None = None) -> tuple[str, str | None]:
    """``(page, grid)``: the path of MLflow's UI page of a grid's runs (``#/experiments/<id>/runs``), for
    ``grid`` or else the grid whose experiment changed last; ``("", None)`` when the store holds no grid yet,
    or is not a SQLite file (a UserInputError names the grids there are when ``grid`` is not one). A grid
    mirrored into an experiment the user named is found by its parent run there.

    Read from the SQLite file as MLflow keeps it, read-only, without importing MLflow: ``ablate ui`` stays a
    small process that stops at once. The experiments opening on their runs is the mirror's doing
    (``KIND_TAG``, set when a grid's experiment is made or next mirrored into)."""
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


def log_batches(client: MlflowClient, rid: str, metrics: Sequence[Metric], tags: Sequence[RunTag] = ()
                ) -> None:
    """``metrics`` (and ``tags``, with the first batch) in batches of MLflow's limit, one transaction each."""
    for i in range(0, max(len(metrics), 1 if tags else 0), MAX_METRICS_PER_BATCH):
        client.log_batch(rid, metrics=list(metrics[i:i + MAX_METRICS_PER_BATCH]),
                         tags=list(tags) if i == 0 else [])


def log_probes(client: MlflowClient, mlflow_run_id: str, result: RunResult) -> int:
    """A done run's probes measured again (``ablate probe``), into its nested run ``mlflow_run_id``: each
    probe point ``log_result`` would log (the probe summary at the run's last step, ``probe/<name>`` at step =
    layer) that the run lacks or holds with another value, then the artifacts again. MLflow shows a step's
    latest value, so a changed one replaces the old; the run's status is left as it is. Returns how many
    points were logged."""
    probed = {mlflow_key(m.name) for m in SUMMARY if m.source == "runner (probes)"}
    points = [m for m in result_points(result) if m.key in probed or m.key.startswith("probe/")]
    have = client.get_run(mlflow_run_id).data.metrics
    latest: dict[str, dict[int, float]] = {}  # key -> step -> the value MLflow shows there
    for key in {m.key for m in points} & set(have):
        history = sorted(client.get_metric_history(mlflow_run_id, key), key=lambda p: (p.timestamp, p.value))
        latest[key] = {p.step: p.value for p in history}
    new = [m for m in points if latest.get(m.key, {}).get(m.step) != m.value]
    log_batches(client, mlflow_run_id, new)
    log_result_artifacts(client, mlflow_run_id, result)
    return len(new)



def result_points(result: RunResult) -> list[Metric]:
    """A result's points as MLflow metrics: its curves (at their steps), its summary numbers (at its last
    step, under ``mlflow_key``'s names) and its per-layer probe values (``probe/<name>`` at step = layer)."""
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    curves = result.metrics
    steps = curves.get("step", [])
    out = []
    for name, xs, values in result.curves():
        out += [Metric(mlflow_key(name), float(v), now, curve_step(result.run_id, x))
                for x, v in zip(xs, values, strict=True) if finite(v)]
    last = curve_step(result.run_id, steps[-1]) if steps else int(result.summary.get("steps") or 0)
    out += [Metric(mlflow_key(k), float(v), now, last) for k, v in result.summary.items()
            if finite(v) and k not in curves]
    for name, per_layer in result.probes.items():
        out += [Metric(f"probe/{name}", float(v), now,
                       layer) for layer, v in enumerate(per_layer) if finite(v)]
    return out
