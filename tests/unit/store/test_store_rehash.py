"""``ablate db rehash``: a store whose runs have ids from an older ablate (the full-config hash that ids were
before issue 13) is carried over to today's ids without retraining: run directories, rows, tune trials, MLflow
tags and MLflow's result.json artifacts follow, and a grid run afterwards finds its runs done."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from ablate.cli import app
from ablate.config import RunConfig
from ablate.errors import UserInputError
from ablate.grid import expand, parse_grid
from ablate.grid.ids import canonical
from ablate.result import RunResult, read_result, write_result
from ablate.store import Store
from ablate.store.carry import rehash

GRID = "name: g\nbase: {train: {steps: 40}}\ngrid: {variant: [baseline, sdpa-elementwise], seed: [0, 1]}\n"


def legacy_id(config: RunConfig) -> str:
    """Run ids before issue 13: the sha256 of the whole resolved config, defaults included (a frozen copy)."""
    text = json.dumps(canonical(config.model_dump(mode="json")), sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _result(run_id: str, config: RunConfig, i: int) -> RunResult:
    loss = [4.0 * math.exp(-s / 20) + 1.0 for s in range(40)]
    return RunResult(run_id=run_id, config=config.model_dump(mode="json"), status="done",
                     summary={"steps": 40, "train_loss": loss[-1], "ppl/code": 8.0 + i},
                     metrics={"step": list(range(40)), "loss": loss},
                     events=[{"kind": "loss_spike", "step": 7, "data": {"loss": 3.5}}],
                     started="2025-01-01T10:00:00+00:00", finished="2025-01-01T10:05:00+00:00")


@pytest.fixture
def old_store(store_url: str, tmp_path):  # noqa: ANN001, ANN201
    """A store and home as an older ablate left them: 4 finished runs under legacy ids (rows, run directories
    with result.json), the grid registered under those ids."""
    home = tmp_path / "home"
    planned = expand(parse_grid(GRID))
    with Store.open(store_url) as store:
        legacy = [{"run_id": legacy_id(p.config), "config": p.config, "params": p.params,
                   "added_params": p.added_params, "axes": p.axes} for p in planned]
        store.register_grid(name="g", text=GRID, runs=legacy)
        for i, (p, row) in enumerate(zip(planned, legacy, strict=True)):
            result = _result(row["run_id"], p.config, i)
            write_result(result, home / "runs" / row["run_id"])
            store.ingest(result)
        with store.engine.begin() as conn:  # as migration 0004 leaves the rows of an older ablate
            conn.execute(text("UPDATE runs SET config_version = NULL"))
    return store_url, home, planned, [r["run_id"] for r in legacy]


def _mirrored(store: Store, home, old_ids: list[str]) -> str:  # noqa: ANN001
    """MLflow runs tagged with the legacy ids, as the mirror left them; the tracking URI."""
    from mlflow import MlflowClient

    from ablate.store.mlflow_mirror import ROLE_TAG

    uri = f"sqlite:///{home / 'mlflow.db'}"
    client = MlflowClient(uri)
    exp = client.create_experiment("g", artifact_location=(home / "mlartifacts").as_uri())
    for rid in old_ids:
        run = client.create_run(exp, tags={"run_id": rid, ROLE_TAG: "run"})
        store.set_mlflow_run_id(run_id=rid, mlflow_run_id=run.info.run_id)
    return uri


def test_rehash_carries_every_run_over_without_retraining(old_store) -> None:  # noqa: ANN001
    from mlflow import MlflowClient

    url, home, planned, old_ids = old_store
    new_ids = [p.run_id for p in planned]
    assert not set(new_ids) & set(old_ids)
    with Store.open(url) as store:
        # before: a grid run would not find its runs, and says so instead of retraining them
        assert set(store.outdated(new_ids)) == set(new_ids)
        with pytest.raises(UserInputError, match=r"4 run\(s\) of this grid are in the store .* older ablate "
                                                 r".*`ablate db rehash`.*nothing retrains"):
            store.require_current_ids(new_ids)
        uri = _mirrored(store, home, old_ids)
        todo, report = rehash(store, home, mlflow_uri=uri)
        assert [(m.old, m.new) for m in todo.moves] == sorted(zip(old_ids, new_ids, strict=True))
        assert (len(report.moved), report.dirs, report.mlflow_tags, report.conflicts) == (4, 4, 4, [])
        # after: every run is done under its new id, with all of its rows
        assert store.statuses(run_ids=new_ids + old_ids) == dict.fromkeys(new_ids, "done")
        assert store.outdated(new_ids) == {} and store.rehash_plan().moves == []
        store.require_current_ids(new_ids)
        frame = store.runs_frame(grid="g").set_index("run_id")
        assert sorted(frame.index) == sorted(new_ids) and list(frame.loc[new_ids, "ppl/code"]) == [8, 9, 10,
                                                                                                   11]
        assert len(store.curves(run_ids=new_ids)) == 4 * 40 and len(store.events(run_ids=new_ids)) == 4
        mlflow_ids = list(frame.loc[new_ids, "mlflow_run_id"])
    for new, old, mlflow_id in zip(new_ids, old_ids, mlflow_ids, strict=True):
        assert not (home / "runs" / old).exists()
        assert read_result(home / "runs" / new).run_id == new
        assert MlflowClient(uri).get_run(mlflow_id).data.tags["run_id"] == new
        logged = MlflowClient(uri).download_artifacts(mlflow_id, "result.json", str(home / "download" / new))
        # the artifact follows too
        assert RunResult.model_validate_json(Path(logged).read_text()).run_id == new
    with Store.open(url) as store:  # again: nothing to do
        _, again = rehash(store, home, mlflow_uri=uri)
        assert (len(again.moved), again.dirs, again.current) == (0, 0, 0)


def test_an_interrupted_rehash_is_finished_by_running_it_again(old_store) -> None:  # noqa: ANN001
    from ablate.store.carry import move_dir

    url, home, planned, old_ids = old_store
    with Store.open(url) as store:
        first = store.rehash_plan().moves[0]
        assert move_dir(home, first)  # the directory moved, then the process died before the rows did
        _, report = rehash(store, home)
        assert len(report.moved) == 4 and report.dirs == 3
        assert read_result(home / "runs" / first.new).run_id == first.new


def test_a_started_run_at_the_new_id_is_a_conflict_left_as_it_is(old_store) -> None:  # noqa: ANN001
    url, home, planned, old_ids = old_store
    with Store.open(url) as store:
        store.register_grid(name="g2", text="g2", runs=planned[:2])  # registered anew after the upgrade...
        store.mark_running(run_id=planned[0].run_id, host="h", device="cpu")  # ...and one of them started
        _, report = rehash(store, home)
        assert [c[:2] for c in report.conflicts] == [(old_ids[0], planned[0].run_id)]
        assert "already a running run (two copies of one config, both kept)" in report.conflicts[0][2]
        assert len(report.moved) == 3  # the queued copy gave way to the finished run, with both grids
        status = store.statuses(run_ids=[old_ids[0], planned[0].run_id, planned[1].run_id])
        assert status == {old_ids[0]: "done", planned[0].run_id: "running", planned[1].run_id: "done"}
        assert list(store.runs_frame(grid="g2")["run_id"]) == sorted([planned[0].run_id, planned[1].run_id])
        assert (home / "runs" / old_ids[0]).is_dir()


def test_rehash_moves_tune_trials_run_ids(old_store) -> None:  # noqa: ANN001
    import optuna

    from ablate.tune.storage import optuna_storage

    url, home, planned, old_ids = old_store
    with Store.open(url) as store:
        storage = optuna_storage(url)
        study = optuna.create_study(storage=storage, study_name="g/tune")
        trial = study.ask()
        trial.set_user_attr("run_id", old_ids[1])
        study.tell(trial, 1.0)
        rehash(store, home)
        assert optuna.load_study(study_name="g/tune", storage=storage).trials[0].user_attrs["run_id"] == \
            planned[1].run_id
        storage.engine.dispose()


def test_plan_shows_runs_stored_under_old_ids_and_the_cli_rehashes(old_store, monkeypatch) -> None:  # noqa: ANN001
    url, home, planned, old_ids = old_store
    monkeypatch.setenv("ABLATE_HOME", str(home))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{home / 'mlflow.db'}")
    grid = home / "g.yaml"
    grid.write_text(GRID)
    runner = CliRunner()
    out = runner.invoke(app, ["plan", str(grid), "--store", url, "--format", "json"])
    assert out.exit_code == 0, out.output
    statuses = {r["run_id"]: r["status"] for r in json.loads(out.stdout)["runs"]}
    assert statuses[planned[0].run_id] == f"done as {old_ids[0]} (ablate db rehash)"
    out = runner.invoke(app, ["db", "rehash", "--store", url, "--dry-run"])
    assert out.exit_code == 0 and f"{old_ids[0]} -> {planned[0].run_id}" in out.stdout
    assert "4 run(s) would move" in out.stdout and (home / "runs" / old_ids[0]).is_dir()
    out = runner.invoke(app, ["db", "rehash", "--store", url])
    assert out.exit_code == 0, out.output
    # no MLflow store in this home: none is created
    assert out.stdout.startswith(
        "4 run(s) carried over to today's ids (4 run directories moved, 0 MLflow runs"
    )
    assert not (home / "mlflow.db").exists()
    out = runner.invoke(app, ["plan", str(grid), "--store", url, "--format", "json"])
    assert {r["status"] for r in json.loads(out.stdout)["runs"]} == {"done"}
