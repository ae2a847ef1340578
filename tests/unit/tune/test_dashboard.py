"""The two UIs over one home, as real servers on 127.0.0.1: ``ablate tune --dashboard`` (optuna-dashboard over
the store's studies, installed by the ``ablate[dashboard]`` extra) and ``ablate ui`` (MLflow's) while a run is
live (RUNNING, its loss history still growing). Each server is a child process, stopped by its own id."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ABLATE = [sys.executable, "-c", "from ablate.cli import main; main()"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, body: dict | None = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


class Server:
    """A command serving HTTP on 127.0.0.1:port; ``wait(path)`` polls until it answers."""

    def __init__(self, args: list[str], port: int, env: dict[str, str]):
        self.port = port
        self.proc = subprocess.Popen([*ABLATE, *args], env=env, start_new_session=True,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def wait(self, path: str, body: dict | None = None, timeout: float = 180.0) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"the server exited with {self.proc.returncode}: "
                            f"{self.proc.stderr.read()[-2000:]}")
            try:
                return _get(f"http://127.0.0.1:{self.port}{path}", body)
            except OSError:
                time.sleep(0.5)
        pytest.fail(f"nothing answered on 127.0.0.1:{self.port}{path} in {timeout:.0f} s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            # the server and its workers: the group this test started
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc.stderr.close()


def _env(home: Path) -> dict[str, str]:
    return {**os.environ, "ABLATE_HOME": str(home)}


def test_tune_dashboard_serves_the_stores_studies(tmp_path):
    pytest.importorskip("optuna_dashboard", reason="the ablate[dashboard] extra is not installed")
    import optuna

    from ablate.store import Store
    from ablate.tune.storage import optuna_storage

    url = f"sqlite:///{tmp_path / 'ablate.db'}"
    with Store.open(url) as store:  # ablate's schema first, then Optuna's tables beside it
        study = optuna.create_study(storage=optuna_storage(store.url), study_name="g/sdpa-elementwise")
        study.set_user_attr("grid", "g")
        study.add_trial(optuna.trial.create_trial(params={"train.lr": 3e-3}, value=4.2, distributions={
            "train.lr": optuna.distributions.FloatDistribution(1e-4, 3e-2, log=True)}))
    port = _free_port()
    server = Server(["tune", "--dashboard", "--port", str(port), "--store", url], port, _env(tmp_path))
    try:
        studies = server.wait("/api/studies")["study_summaries"]
        assert [s["study_name"] for s in studies] == ["g/sdpa-elementwise"]
        detail = _get(f"http://127.0.0.1:{port}/api/studies/{studies[0]['study_id']}")
        assert [t["values"] for t in detail["trials"]] == [[4.2]]
    finally:
        server.stop()


@pytest.mark.slow
def test_ui_shows_a_live_run_and_its_growing_history(tmp_path, monkeypatch):
    from mlflow import MlflowClient

    from ablate.store.mlflow_mirror import tracking_uri

    home = tmp_path / "home"
    home.mkdir()
    client = MlflowClient(tracking_uri(home))
    client.create_experiment("older")
    experiment = client.create_experiment("live")
    run = client.create_run(experiment).info.run_id  # RUNNING until it is ended
    for step in range(3):
        client.log_metric(run, "loss", 5.0 - step, step=step)
    port = _free_port()
    server = Server(["ui", "--port", str(port), "--home", str(home)], port, _env(home))
    try:
        # it opens on the runs of the grid that changed last, which MLflow shows as training runs
        assert server.proc.stderr.readline() == (f"MLflow UI on http://127.0.0.1:{port}/#/experiments/"
                                                 f"{experiment}/runs (grid live's runs; Ctrl-C stops it)\n")
        found = server.wait("/api/2.0/mlflow/runs/search", {"experiment_ids": [experiment]})["runs"]
        assert [(r["info"]["run_id"], r["info"]["status"]) for r in found] == [(run, "RUNNING")]
        client.log_metric(run, "loss", 1.5, step=3)  # the run goes on while the UI reads
        history = _get(f"http://127.0.0.1:{port}/api/2.0/mlflow/metrics/get-history?run_id={run}&metric_key=loss")
        assert [m["step"] for m in history["metrics"]] == [0, 1, 2, 3]
    finally:
        server.stop()
