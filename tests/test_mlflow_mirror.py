"""MLflow mirroring of finished runs: one nested run per run under the grid's parent run, from result.json."""

from __future__ import annotations

import json

import pytest

from ablate.config import RunConfig
from ablate.result import RunResult
from ablate.store.mlflow_mirror import MirrorThread, MlflowMirror, flatten, tracking_uri


def _result(run_id: str, seed: int, status: str = "done") -> RunResult:
    cfg = RunConfig(variant="sdpa-elementwise", seed=seed).model_dump(mode="json")
    return RunResult(
        run_id=run_id, config=cfg, status=status,
        summary={"steps": 3, "train_loss": 2.5, "val_ppl": 11.0, "ppl/prose": 10.0, "gate_score": None,
                 "tokens_per_s": 100.0},
        metrics={"step": [1, 2, 3], "loss": [4.0, 3.0, 2.5], "tokens_per_s": [90.0, 100.0, 110.0],
                 "val_step": [3], "val_ppl": [11.0]},
        probes={"gate_score": [0.2, 0.3], "m_act": [5.0, float("nan")]},
        started="2026-01-01T00:00:00+00:00", finished="2026-01-01T00:01:00+00:00", resumed_from=2,
        error="RuntimeError: boom" if status == "failed" else None,
    )


def test_flatten_uses_the_configs_dotted_paths():
    flat = flatten(RunConfig().model_dump(mode="json"))
    assert flat["train.lr"] == "0.003" and flat["model.n_layers"] == "2" and flat["variant"] == "baseline"
    assert json.loads(flat["data.train"])[0]["name"] == "python-docs"


def test_default_tracking_store_is_in_home(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert tracking_uri(tmp_path) == f"sqlite:///{tmp_path.resolve()}/mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000")
    assert tracking_uri(tmp_path) == "http://127.0.0.1:5000"


def test_nested_runs_with_params_metrics_tags_and_artifacts(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    home = tmp_path / "home"
    thread = MirrorThread(home=home, grid="g1")
    for r in (_result("aaa", 0), _result("bbb", 1, "failed"), _result("aaa", 0)):  # "aaa" mirrored twice
        thread.submit(r)
    thread.close()
    assert thread.errors == []
    logged = thread.logged()
    assert [r for r, _ in logged] == ["aaa", "bbb", "aaa"]

    mirror = MlflowMirror(home=home, grid="g1")
    client = mirror.client
    runs = client.search_runs([mirror.experiment_id], filter_string="tags.`ablate.role` = 'run'")
    assert sorted(r.data.tags["run_id"] for r in runs) == ["aaa", "bbb"]  # one nested run per run
    by_id = {r.data.tags["run_id"]: r for r in runs}
    a = by_id["aaa"]
    assert a.info.run_id == logged[-1][1]
    assert a.data.tags["mlflow.parentRunId"] == mirror.parent_id
    assert {k: a.data.tags[k] for k in ("grid", "variant", "seed", "status", "resumed_from")} == {
        "grid": "g1", "variant": "sdpa-elementwise", "seed": "0", "status": "done", "resumed_from": "2"}
    assert a.data.params["train.lr"] == "0.003" and a.data.params["seed"] == "0"
    assert [(m.step, m.value) for m in client.get_metric_history(a.info.run_id, "loss")] == [
        (1, 4.0), (2, 3.0), (3, 2.5)]
    assert [(m.step, m.value) for m in client.get_metric_history(a.info.run_id, "val_ppl")] == [(3, 11.0)]
    assert a.data.metrics["ppl/prose"] == 10.0 and a.data.metrics["train_loss"] == 2.5
    assert "gate_score" not in a.data.metrics  # None is not a number
    assert [m.value for m in client.get_metric_history(a.info.run_id, "probe/gate_score")] == pytest.approx([0.2, 0.3])
    assert a.info.status == "FINISHED" and by_id["bbb"].info.status == "FAILED"
    assert by_id["bbb"].data.tags["error"] == "RuntimeError: boom"
    assert sorted(f.path for f in client.list_artifacts(a.info.run_id)) == ["config.json", "probes.json", "result.json"]
    assert a.info.artifact_uri.startswith((home.resolve() / "mlartifacts").as_uri())
    assert (home / "mlflow.db").is_file() and not (tmp_path / "mlruns").exists()


def test_an_unreachable_tracking_store_is_a_warning_not_a_failure(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a-file").write_text("not a directory")
    thread = MirrorThread(home=tmp_path, grid="g", uri=f"sqlite:///{tmp_path}/a-file/mlflow.db")
    thread.submit(_result("aaa", 0))
    thread.close()
    assert thread.logged() == []
    assert len(thread.errors) == 1 and thread.errors[0].startswith("MLflow at sqlite:///")
