"""A run is visible while it trains: ``ablate runs`` and ``ablate status`` show its steps, loss, tokens/s and
ETA from the store, and MLflow has one RUNNING run whose loss history grows, then ends FINISHED with every
step.

Real processes: ``ablate run`` in a subprocess (its worker trains the tiny preset on the arithmetic stream),
read meanwhile through the CLI and MLflow's client, as a user watching it would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tiny_grids import tiny_grid
from typer.testing import CliRunner

from ablate.cli import app

pytestmark = pytest.mark.slow

ABLATE = str(Path(sys.executable).parent / "ablate")
STEPS = 300  # ~30 s on a quiet machine (0.1 s a step): 3x what the looks below need, more when busy


@pytest.fixture
def env(tmp_path, module_cache):
    return {**os.environ, "ABLATE_CACHE": str(module_cache)}


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def _nested(client, experiment: str) -> list:
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return []
    return client.search_runs([exp.experiment_id], filter_string="tags.`ablate.role` = 'run'")


def test_a_300_step_run_is_watched_live_in_the_store_and_in_mlflow(tmp_path, env, monkeypatch):
    from ablate.store.mlflow_mirror import open_client

    path, home = tmp_path / "g.yaml", tmp_path / "home"
    # 16 x 128 tokens a step: long enough (tens of seconds) to be seen training by several looks 1 s apart
    path.write_text(tiny_grid("watched", variants=["baseline"], steps=STEPS, checkpoint_every=10_000)
                    .replace("seq_len: 32", "seq_len: 128").replace("batch_size: 4", "batch_size: 16"))
    # --jobs 2 for one run: one worker with one torch thread (steady pace on a busy machine)
    proc = subprocess.Popen([ABLATE, "run", str(path), "--home", str(home), "--jobs", "2"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # MLflow's client is opened once the run's mirror has made the tracking store, and under its creation
    # lock: a client opened sooner would make the store itself, racing the mirror on MLflow's schema
    client = None
    rows, status_rows, histories = [], [], []
    try:
        deadline = time.monotonic() + 600
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(1.0)
            if not (home / "ablate.db").is_file():
                continue
            out = invoke("runs", "--home", str(home), "--format", "json")
            listed = json.loads(out.stdout) if out.exit_code == 0 and out.stdout.strip() else []
            run = listed[0] if listed else None  # the store can exist a moment before its first run row
            if run is not None and run["status"] == "running" and run["steps"]:
                rows.append((run["steps"], run["train_loss"]))
                status = json.loads(invoke("status", "--home", str(home), "--format", "json").stdout)
                status_rows += status["running"]
            if (home / "mlflow.db").is_file():
                client = client or open_client(f"sqlite:///{home.resolve()}/mlflow.db")
                nested = _nested(client, "watched")
                if nested and nested[0].info.status == "RUNNING":
                    histories.append(len(client.get_metric_history(nested[0].info.run_id, "loss")))
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    # the store, while it trained: steps rising, a loss at each look, status with step / total, tokens/s, ETA
    steps = [s for s, _ in rows]
    assert len(set(steps)) >= 3 and steps == sorted(steps) and steps[-1] <= STEPS, rows
    assert all(loss is not None and 0 < loss < 10 for _, loss in rows)
    assert len({loss for _, loss in rows}) >= 3
    # never stale nor gone, even between the worker's end (which frees the run's lock) and the ingest that
    # ends its `running` row: then it has ended (its result.json is complete), it was not cut off
    live = [r for r in status_rows if r["step"] is not None]
    wrong = [r for r in live if not (r["total_steps"] == STEPS and r["tokens_per_s"] > 0 and not r["stale"]
                                     and not r["gone"])]
    assert live and not wrong, wrong
    assert any(r["eta_s"] is not None and r["eta_s"] > 0 for r in live)
    # MLflow, while it trained: a RUNNING run whose loss history grew
    grown = [n for n in histories if n > 0]
    assert len(set(grown)) >= 2 and grown == sorted(grown) and grown[0] < STEPS, histories
    # at the end: exactly one FINISHED run, loss at every step once
    (run,) = _nested(client, "watched")
    assert run.info.status == "FINISHED" and run.data.tags["status"] == "done"
    loss = client.get_metric_history(run.info.run_id, "loss")
    assert sorted(m.step for m in loss) == list(range(STEPS))
    final = json.loads(invoke("runs", "--home", str(home), "--format", "json").stdout)[0]
    assert final["status"] == "done" and final["steps"] == STEPS and final["mlflow_run_id"] == run.info.run_id
    with_curves = invoke("runs", "--home", str(home), "--format", "json")
    assert with_curves.exit_code == 0
    from ablate.store import Store

    with Store.open(home=home) as store:
        curve = store.curves(run_ids=[final["run_id"]], metrics=["loss"])
    assert list(curve["step"]) == list(range(STEPS))  # the live points and the ingest: one point per step
