"""MLflow mirroring: one nested run per run under the grid's (or a study's) parent run, opened when the run
starts, its step metrics logged as it trains, completed from result.json; a new tracking store opened by
several processes."""

from __future__ import annotations

import json
import multiprocessing as mp
from pathlib import Path

import pytest

from ablate.config import RunConfig
from ablate.execute.mirror import MirrorThread
from ablate.result import RunResult
from ablate.store.mlflow_mirror import MlflowMirror, mlflow_params, tracking_uri


def _result(run_id: str, seed: int, status: str = "done") -> RunResult:
    cfg = RunConfig(variant="sdpa-elementwise", seed=seed).model_dump(mode="json")
    return RunResult(
        run_id=run_id, config=cfg, status=status,
        summary={"steps": 3, "train_loss": 2.5, "val_ppl": 11.0, "ppl/prose": 10.0, "gate_score": None,
                 "tokens_per_s": 100.0, "bench/niah-single@256": 50.0, "bench/niah-single@256/yarn": 25.0},
        metrics={"step": [1, 2, 3], "loss": [4.0, 3.0, 2.5], "tokens_per_s": [90.0, 100.0, 110.0],
                 "val_step": [3], "val_ppl": [11.0]},
        probes={"gate_score": [0.2, 0.3], "m_act": [5.0, float("nan")]},
        started="2026-01-01T00:00:00+00:00", finished="2026-01-01T00:01:00+00:00", resumed_from=2,
        error="RuntimeError: boom" if status == "failed" else None,
    )


def test_flatten_uses_the_configs_dotted_paths():
    flat = mlflow_params(RunConfig().model_dump(mode="json"))
    assert flat["train.lr"] == "0.003" and flat["model.n_layers"] == "2" and flat["variant"] == "baseline"
    assert json.loads(flat["data.train"])[0]["name"] == "python-docs"


def test_default_tracking_store_is_in_home(tmp_path, monkeypatch):
    assert tracking_uri(tmp_path) == f"sqlite:///{tmp_path.resolve()}/mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000")
    assert tracking_uri(tmp_path) == "http://127.0.0.1:5000"


def test_nested_runs_with_params_metrics_tags_and_artifacts(tmp_path, monkeypatch):
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
    # MLflow's UI opens the grid's experiment on its runs, not on its GenAI overview
    tags = client.get_experiment(mirror.experiment_id).tags
    assert tags["mlflow.experimentKind"] == "custom_model_development"
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
    # MLflow refuses '@' in a name: a benchmark at a length is logged as bench/<task>:<len>
    assert (
        a.data.metrics["bench/niah-single:256"] == 50.0
        and a.data.metrics["bench/niah-single:256/yarn"] == 25.0
    )
    assert [m.value for m in client.get_metric_history(a.info.run_id,
                                                       "probe/gate_score")] == pytest.approx([0.2, 0.3])
    assert a.info.status == "FINISHED" and by_id["bbb"].info.status == "FAILED"
    assert by_id["bbb"].data.tags["error"] == "RuntimeError: boom"
    assert sorted(f.path for f in client.list_artifacts(a.info.run_id)) == ["config.json", "probes.json",
                                                                            "result.json"]
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


# ---------------------------------------------------------------- live: one MLflow run per ablate run, as it
# trains


def _rows(steps) -> list[dict]:
    return [{"step": s, "loss": 5.0 - 0.01 * s, "lr": 1e-3, "grad_norm": None,
             "tokens_per_s": 100.0} for s in steps]


def _history(client, rid: str, key: str = "loss") -> list[int]:
    return [m.step for m in sorted(client.get_metric_history(rid, key), key=lambda m: (m.step, m.timestamp))]


def test_a_run_is_mirrored_live_and_resumes_into_the_same_mlflow_run(tmp_path):
    home = tmp_path / "home"
    res = _result("ccc", 0)
    res = res.model_copy(update={"metrics": {"step": list(range(8)),
                                             "loss": [5.0 - 0.01 * s for s in range(8)]}})
    mirror = MlflowMirror(home=home, grid="live")
    client = mirror.client
    rid = mirror.start("ccc", res.config)
    run = client.get_run(rid)
    assert run.info.status == "RUNNING" and run.data.tags["status"] == "running"
    assert run.data.params["train.lr"] == "0.003" and run.data.tags["mlflow.parentRunId"] == mirror.parent_id
    mirror.log_steps("ccc", _rows(range(3)))
    assert _history(client, rid) == [0, 1, 2]
    mirror.log_steps("ccc", _rows(range(3, 5)))
    assert _history(client, rid) == [0, 1, 2, 3, 4]  # the history grows while it trains
    mirror.end("ccc", "interrupted")
    assert client.get_run(rid).info.status == "KILLED"

    # a later process resumes it from step 3: the same MLflow run, RUNNING again, no step logged twice
    again = MlflowMirror(home=home, grid="live")
    assert again.start("ccc", res.config) == rid and client.get_run(rid).info.status == "RUNNING"
    again.log_steps("ccc", _rows(range(3, 6)))
    assert again.log_result(res) == rid
    finished = client.get_run(rid)
    assert finished.info.status == "FINISHED" and finished.data.tags["status"] == "done"
    assert _history(client, rid) == list(range(8))  # up to the last step, each once
    assert finished.data.metrics["train_loss"] == 2.5
    runs = client.search_runs([mirror.experiment_id], filter_string="tags.`ablate.role` = 'run'")
    assert [r.info.run_id for r in runs] == [rid]


@pytest.mark.parametrize("experiment", [None, "team"], ids=["own-experiment", "named-experiment"])
def test_trials_nest_under_their_study_and_a_pruned_one_says_where(tmp_path, experiment):
    home = tmp_path / "home"
    thread = MirrorThread(home=home, grid="g/tune", experiment=experiment)
    cfg = _result("t1", 0).config
    for rid, trial in (("t1", 0), ("t2", 1)):
        thread.start(rid, cfg, parent="g-study", tags={"study": "g-study", "trial_id": str(trial)})
        thread.steps(rid, _rows(range(5)))
    thread.end("t2", "pruned", tags={"pruned_at_step": 5, "pruned_val_ppl": 300.0})
    thread.submit(_result("t1", 0), parent="g-study")
    thread.close()
    assert thread.errors == []
    mirror = MlflowMirror(home=home, grid="g/tune", experiment=experiment)
    client = mirror.client
    assert [e.name for e in client.search_experiments() if e.name != "Default"] == [experiment or "g/tune"]
    study = client.search_runs([mirror.experiment_id], filter_string="tags.`ablate.parent` = 'g-study'")
    assert len(study) == 1 and study[0].data.tags["ablate.role"] == "study"
    runs = {r.data.tags["run_id"]: r for r in
            client.search_runs([mirror.experiment_id], filter_string="tags.`ablate.role` = 'run'")}
    assert {r.data.tags["mlflow.parentRunId"] for r in runs.values()} == {study[0].info.run_id}
    pruned = runs["t2"]
    assert pruned.info.status == "FINISHED" and pruned.data.tags["status"] == "pruned"
    assert pruned.data.tags["pruned_at_step"] == "5" and pruned.data.tags["trial_id"] == "1"
    assert _history(client, pruned.info.run_id) == list(range(5))
    assert runs["t1"].data.tags["status"] == "done"


# one of several processes opening a new home at once
def _first_mirror(home: str, grid: str, barrier) -> None:
    barrier.wait(60)
    thread = MirrorThread(home=Path(home), grid=grid)
    thread.submit(_result(f"r-{grid}", 0))
    thread.close()
    if thread.errors or len(thread.logged()) != 1:
        raise SystemExit(f"{grid}: {thread.errors}")


def test_processes_opening_a_new_tracking_store_together_all_log(tmp_path, monkeypatch):
    """MLflow's first-time schema migration raced when two `ablate run` started on a new home; a file lock now
    serializes the creation (without it, some of these processes fail: 'table _alembic_tmp_latest_metrics
    already exists', 'duplicate column name: step', 'Online migration expected to match one row')."""
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(3)
    procs = [ctx.Process(target=_first_mirror,
                         args=(str(tmp_path / "home"), f"g{i}", barrier)) for i in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(180)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    client = MlflowMirror(home=tmp_path / "home", grid="g0").client
    assert sorted(e.name for e in client.search_experiments() if e.name != "Default") == ["g0", "g1", "g2"]


# ---------------------------------------------------------------- into the user's own experiment
def _snapshot(client, run_ids: list[str]) -> dict:
    """Everything MLflow holds of these runs: status, times, name, params, tags, every metric's history."""
    out = {}
    for rid in run_ids:
        run = client.get_run(rid)
        history = {k: sorted((m.step, m.value, m.timestamp) for m in client.get_metric_history(rid, k))
                   for k in run.data.metrics}
        out[rid] = (run.info.status, run.info.start_time, run.info.end_time, run.info.lifecycle_stage,
                    run.info.run_name, dict(run.data.params), dict(run.data.tags), history)
    return out


def _ours(client, experiment_id: str, grid: str) -> dict[str, object]:
    """``{run id: its nested MLflow run}`` of a grid's runs in an experiment."""
    query = f"tags.`ablate.role` = 'run' and tags.grid = '{grid}'"
    runs = client.search_runs([experiment_id], filter_string=query)
    return {r.data.tags["run_id"]: r for r in runs}


@pytest.mark.slow
def test_a_grid_logs_into_the_users_experiment_and_leaves_its_other_runs_alone(tmp_path, monkeypatch):
    """``--mlflow-experiment team`` (and ``MLFLOW_EXPERIMENT_NAME``) on a tracking store whose experiment
    ``team`` already holds a user's runs (one carrying a ``run_id`` tag equal to one of the grid's) and
    another grid's parent run: the grid's runs are logged there under a parent run of their own, tagged, each
    once; a grid mirrored before into its own experiment is logged there too, once; nothing else in ``team``
    changes."""
    from mlflow.entities import Metric, Param, RunTag
    from tiny_grids import tiny_grid
    from typer.testing import CliRunner

    from ablate.cli import app
    from ablate.grid import expand, load_grid
    from ablate.store import Store
    from ablate.store.mlflow_mirror import grid_page, open_client

    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    home = tmp_path / "home"
    home.mkdir()
    uri = tracking_uri(home)
    g1, g2 = tmp_path / "g1.yaml", tmp_path / "g2.yaml"
    g1.write_text(tiny_grid("g1", seeds=[0], steps=10))
    g2.write_text(tiny_grid("g2", variants=["baseline"], seeds=[1], steps=10))
    g1_ids = sorted(r.run_id for r in expand(load_grid(g1)))

    # the user's experiment, as the user left it
    client = open_client(uri)
    team = client.create_experiment("team", tags={"project": "attention"})
    theirs = []
    for name, tags in (("their-baseline", {"run_id": g1_ids[0], "owner": "ana"}),
                       ("their-sweep", {"owner": "ben"})):
        run = client.create_run(team, run_name=name, tags=tags)
        client.log_batch(run.info.run_id, metrics=[Metric("loss", 5.0 - s, 1000 + s, s) for s in range(3)],
                         params=[Param("lr", "0.01")], tags=[RunTag("note", "keep me")])
        client.set_terminated(run.info.run_id, "FINISHED")
        theirs.append(run.info.run_id)
    other = client.create_run(team, run_name="other", tags={"ablate.role": "grid", "ablate.parent": "other",
                                                            "grid": "other"})
    client.set_terminated(other.info.run_id, "FINISHED")
    theirs.append(other.info.run_id)
    before = _snapshot(client, theirs)
    team_tags = client.get_experiment(team).tags

    def run(*args: str) -> None:
        out = CliRunner().invoke(app, ["run", *args, "--jobs", "2", "--home", str(home)])
        assert out.exit_code == 0, out.output
        assert "warning" not in out.output, out.output

    run(str(g1), "--mlflow-experiment", "team")  # trained, mirrored live into team
    run(str(g2))  # into its own experiment, g2
    run(str(g2), "--mlflow-experiment", "team")  # nothing trains; its run is logged into team from its result

    def check() -> None:
        assert _snapshot(client, theirs) == before  # the user's runs and the other grid's: untouched
        assert client.get_experiment(team).tags == team_tags  # no tag of ablate's on the user's experiment
        assert sorted(e.name for e in client.search_experiments()) == ["Default", "g2", "team"]
        parents = {r.data.tags["ablate.parent"]: r.info.run_id for r in client.search_runs(
            [team], filter_string="tags.`ablate.role` = 'grid'")}
        assert sorted(parents) == ["g1", "g2", "other"]  # each grid its own parent run
        with Store.open(home=home) as store:
            stored = {grid: store.runs_frame(grid=grid).set_index("run_id")["mlflow_run_id"]
                      for grid in ("g1", "g2")}
        for grid in ("g1", "g2"):
            ours = _ours(client, team, grid)
            assert sorted(ours) == sorted(stored[grid].index)  # every run, once
            for rid, r in ours.items():
                assert r.info.run_id == stored[grid][rid]  # the store points at it
                assert r.data.tags["mlflow.parentRunId"] == parents[grid]
                assert {k: r.data.tags[k] for k in ("grid", "run_id")} == {"grid": grid, "run_id": rid}
                assert r.data.tags["seed"] == r.data.params["seed"] and r.data.tags["variant"] in (
                    "baseline", "sdpa-elementwise")
                assert r.info.status == "FINISHED"
                assert _history(client, r.info.run_id) == list(range(10))  # each step once
        assert sorted(_ours(client, team, "g1")) == g1_ids
        # g2's first mirror stays where it was
        assert len(_ours(client, client.get_experiment_by_name("g2").experiment_id, "g2")) == 1

    check()
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "team")  # the same, named by MLflow's variable
    run(str(g1))
    run(str(g2))
    check()  # nothing logged twice
    assert grid_page(uri, "g1") == (f"#/experiments/{team}/runs", "g1")  # ablate ui --grid g1 opens team


def test_mlflow_experiment_bad_input_is_one_line(tmp_path):
    from tiny_grids import tiny_grid
    from typer.testing import CliRunner

    from ablate.cli import app

    path = tmp_path / "g.yaml"
    path.write_text(tiny_grid("g", seeds=[0], steps=10))
    for cmd in ("run", "tune"):
        for args, message in ((["--mlflow-experiment", " "], "--mlflow-experiment: an empty name"),
                              (["--mlflow-experiment", "team", "--no-mlflow"], "--mlflow-experiment: names "
                               "where to mirror, but --no-mlflow mirrors nothing")):
            out = CliRunner().invoke(app, [cmd, str(path), *args, "--home", str(tmp_path / "h")])
            assert out.exit_code == 2 and out.output.startswith(f"error: {message}"), out.output
            assert out.output.count("\n") == 1
    assert not (tmp_path / "h").exists()


def test_a_deleted_experiment_is_named_with_how_to_restore_it(tmp_path):
    from ablate.errors import UserInputError
    from ablate.store.mlflow_mirror import open_client

    client = open_client(tracking_uri(tmp_path))
    gone = client.create_experiment("team")
    client.delete_experiment(gone)
    with pytest.raises(UserInputError, match=rf"the MLflow experiment 'team' is deleted: restore it "
                                             rf"\(mlflow experiments restore --experiment-id {gone}\) or "
                                             "name another"):
        MlflowMirror(home=tmp_path, grid="g", experiment="team")
