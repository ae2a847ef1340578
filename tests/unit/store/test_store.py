"""The results store on SQLite and PostgreSQL: lifecycle, ingest, the runs table and the other queries."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
from store_data import planned, result

from ablate.errors import StoreError, UserInputError
from ablate.result import write_result
from ablate.store import Store


def test_register_and_lifecycle(store: Store) -> None:
    store.register_grid(name="g", text="name: g\n", runs=[planned(i) for i in range(3)])
    assert store.statuses(run_ids=["run000", "run001", "run002", "nope"]) == dict.fromkeys(
        ["run000", "run001", "run002"], "queued")
    assert store.grids() == ["g"]

    store.mark_running(run_id="run000", host="node7", device="cuda:1")
    store.heartbeat(run_id="run000", step=12)
    summary = store.status_summary()
    assert summary["grids"] == [{"grid": "g", "total": 3, "queued": 2, "running": 1, "done": 0, "diverged": 0,
                                 "pruned": 0, "failed": 0, "older": 0}]
    (running,) = summary["running"]
    assert (running["run_id"], running["host"], running["device"], running["step"]) == \
        ("run000", "node7", "cuda:1", 12)
    assert running["stale"] is False and summary["stale"] == []
    assert store.status_summary(stale_after_s=3600)["stale"] == []
    # any heartbeat is older than the future
    assert store.status_summary(stale_after_s=-1)["stale"] == ["run000"]

    store.mark_failed(run_id="run000", error="CUDA out of memory")
    store.mark_queued(run_id="run001")
    assert store.statuses(run_ids=["run000", "run001"]) == {"run000": "failed", "run001": "queued"}
    frame = store.runs_frame()
    assert frame.set_index("run_id").loc["run000", "error"] == "CUDA out of memory"
    store.set_mlflow_run_id(run_id="run001", mlflow_run_id="abc123")
    assert store.runs_frame().set_index("run_id").loc["run001", "mlflow_run_id"] == "abc123"


def test_lifecycle_of_unknown_run_is_an_error(store: Store) -> None:
    with pytest.raises(StoreError, match="run 'ghost' is not in the store"):
        store.mark_running(run_id="ghost", host="h", device="cpu")


def test_same_run_in_two_grids_is_one_run(store: Store) -> None:
    store.register_grid(name="a", text="a", runs=[planned(0), planned(1)])
    store.register_grid(name="b", text="b", runs=[planned(1), planned(2)])
    store.register_grid(name="b", text="b v2", runs=[planned(1), planned(2)])  # again: nothing doubles
    frame = store.runs_frame()
    assert list(frame["run_id"]) == ["run000", "run001", "run002"]
    assert list(frame["grid"]) == ["a", "a, b", "b"]
    assert list(store.runs_frame(grid="b")["run_id"]) == ["run001", "run002"]
    counts = {g["grid"]: g["total"] for g in store.status_summary()["grids"]}
    assert counts == {"a": 2, "b": 2}
    with pytest.raises(UserInputError, match="unknown grid 'c'.*allowed: a, b"):
        store.runs_frame(grid="c")


def test_ingest_records_everything(store: Store) -> None:
    store.register_grid(name="g", text="g", runs=[planned(4)])
    store.mark_running(run_id="run004", host="node1", device="cpu")
    store.ingest(result(4))
    row = store.runs_frame().iloc[0]
    assert row["status"] == "done" and row["variant"] == "sdpa-elementwise" and row["seed"] == 1
    assert (row["steps"], row["tokens"], row["params"], row["added_params"]) == (40, 40 * 4096, 100_010, 10)
    assert row["ppl/code"] == 12.0 and row["ppl/prose"] == 16.0 and row["val_ppl"] == 14.0
    assert row["bench/arith"] == pytest.approx(0.29) and row["loss_spikes"] == 1
    assert row["train_loss"] == pytest.approx(4.0 * math.exp(-39 / 20) + 1.04)
    assert row["train.lr"] == 3e-3 and row["model.n_layers"] == 2 and row["model.gate"] is None
    assert str(row["started"]) == "2025-01-01 10:00:00" and row["host"] == "node1"

    curves = store.curves(run_ids=["run004"])
    assert sorted(curves["metric"].unique()) == ["loss", "lr", "val_ppl"]
    loss = curves[curves.metric == "loss"]
    assert list(loss["step"]) == list(range(40)) and loss["value"].iloc[0] == pytest.approx(5.04)
    assert list(curves[curves.metric == "val_ppl"]["step"]) == [20, 39]  # its own sparse steps
    assert list(store.curves(run_ids=["run004"], metrics=["lr"])["metric"].unique()) == ["lr"]

    probes = store.probes(run_ids=["run004"])
    assert probes[["layer", "name", "value"]].values.tolist() == [
        [0, "gate_score", 0.2], [1, "gate_score", 0.3], [0, "m_act", 5.0], [1, "m_act", 50.0]]
    hist = store.histograms(run_ids=["run004"])
    assert len(hist) == 6 and hist.iloc[2][["layer", "bin", "lo", "hi", "count"]].tolist() == [0, 2, 0.5, 1.0,
                                                                                               3]
    events = store.events(run_ids=["run004"])
    assert events[["kind", "step"]].values.tolist() == [["loss_spike", 7]]
    assert events["data"].iloc[0] == {"loss": 3.5, "trend": 2.1}


def _snapshot(store: Store) -> tuple:
    frame = store.runs_frame().drop(columns=["heartbeat"])
    return (frame.to_json(), store.curves().to_json(), store.probes().to_json(), store.histograms().to_json(),
            store.events().to_json())


def test_ingest_twice_changes_nothing(store: Store, tmp_path) -> None:
    run_dir = tmp_path / "runs" / "run002"
    write_result(result(2), run_dir)
    assert store.ingest(run_dir) == "run002"  # a run the store never saw: created from result.config
    first = _snapshot(store)
    assert store.ingest(run_dir / "result.json") == "run002"
    store.ingest(result(2))
    assert _snapshot(store) == first
    assert len(store.curves()) == 40 * 2 + 2 and len(store.events()) == 1


def test_reingest_replaces_rows(store: Store) -> None:
    store.ingest(result(1, steps=40))
    store.ingest(result(1, steps=10, status="diverged"))  # the run was redone shorter
    assert store.statuses(run_ids=["run001"]) == {"run001": "diverged"}
    assert len(store.curves(metrics=["loss"])) == 10


@pytest.mark.parametrize("cut", [0.3, 0.9], ids=["cut-30pct", "cut-90pct"])
def test_half_written_result_is_rejected(store: Store, tmp_path, cut: float) -> None:
    path = write_result(result(0), tmp_path / "run000")
    text = path.read_text()
    path.write_text(text[: int(len(text) * cut)])
    with pytest.raises(StoreError, match="not a complete result file.*cut off while being written"):
        store.ingest(tmp_path / "run000")
    assert store.runs_frame().empty


def test_missing_and_inconsistent_results_are_rejected(store: Store, tmp_path) -> None:
    with pytest.raises(StoreError, match="no result file"):
        store.ingest(tmp_path / "nothing-here")
    bad = result(0)
    bad.metrics["loss"] = bad.metrics["loss"][:-1]
    with pytest.raises(StoreError, match="metric 'loss' has 39 values for 40 steps"):
        store.ingest(bad)
    assert store.runs_frame().empty  # the transaction rolled back


def test_runs_frame_columns_follow_cli_md(store: Store) -> None:
    store.register_grid(name="g", text="g", runs=[planned(i) for i in range(3)])
    store.ingest(result(0))
    frame = store.runs_frame()
    cols = list(frame.columns)
    head = ["run_id", "grid", "variant", "seed", "status", "params", "added_params", "steps", "tokens",
            "train_loss", "val_ppl", "ppl/code", "ppl/prose", "loss_spikes", "resumed_from", "gate_score",
            "f_attn", "m_act", "bench/arith", "tokens_per_s", "wall_s", "error"]
    assert cols[: len(head)] == head
    assert {"train.lr", "model.n_layers", "data.seq_len", "eval.benchmarks"} <= set(cols)
    assert "variant" not in cols[len(head):]  # config fields already shown are not repeated
    queued = frame.set_index("run_id").loc["run001"]
    assert queued["status"] == "queued" and math.isnan(queued["ppl/code"]) and queued["params"] == 100_010


def test_runs_json_is_a_list_of_objects_with_nulls(store: Store) -> None:
    from ablate.store.render import to_json

    store.register_grid(name="g", text="g", runs=[planned(0), planned(1)])
    store.ingest(result(0))
    rows = json.loads(to_json(store.runs_frame()))
    assert [r["run_id"] for r in rows] == ["run000", "run001"]
    done, queued = rows
    assert done["ppl/code"] == 8.0 and done["train.lr"] == 0.003 and done["gate_score"] is None
    assert queued["ppl/code"] is None and queued["steps"] is None and queued["error"] is None
    assert done["started"] == "2025-01-01T10:00:00" and done["eval.benchmarks"] == "[]"


def test_pruned_is_its_own_status(store: Store) -> None:
    """A run the pruner stopped is ``pruned`` (not failed, no error): its steps, and an event with what the
    pruner saw; ``ablate status`` counts it in its own column."""
    from ablate.result import RunStatus

    store.register_grid(name="g", text="g", runs=[planned(0), planned(1)])
    store.mark_running(run_id="run000", host="h", device="cpu")
    store.mark_pruned(run_id="run000", step=20, value=812.5, metric="val_ppl")
    assert store.statuses(run_ids=["run000"]) == {"run000": RunStatus.PRUNED} == {"run000": "pruned"}
    row = store.runs_frame().set_index("run_id").loc["run000"]
    assert (row["status"], row["steps"], row["error"]) == ("pruned", 20, None)
    assert type(row["status"]) is str  # plain strings in frames (and JSON), whatever the column's type
    events = store.events(run_ids=["run000"])
    assert events[["kind", "step"]].values.tolist() == [["pruned", 20]]
    assert events["data"].iloc[0] == {"value": 812.5, "metric": "val_ppl"}
    store.mark_pruned(run_id="run000", step=30, value=None)  # again (a resumed trial): one event, the latest
    assert store.events(run_ids=["run000"])[["kind", "step"]].values.tolist() == [["pruned", 30]]
    (grid,) = store.status_summary()["grids"]
    assert (grid["pruned"], grid["queued"], grid["failed"]) == (1, 1, 0)
    assert RunStatus.PRUNED.ok and RunStatus.PRUNED.ended and not RunStatus.FAILED.ok


def test_a_grid_registered_again_keeps_the_runs_it_left_as_older_ones(store: Store) -> None:
    store.register_grid(name="g", text="name: g\n", runs=[planned(i) for i in range(3)])
    # the file edited: run000's arm (variant 0) is no longer planned at any seed
    store.register_grid(name="g", text="name: g\n", runs=[planned(i) for i in (1, 2, 4)])
    (grid,) = store.status_summary()["grids"]
    assert (grid["total"], grid["queued"], grid["older"]) == (3, 3, 1)
    assert store.older_runs("g") == 1 and store.status_summary(older=True)["grids"][0]["total"] == 4
    assert list(store.runs_frame(grid="g", current=True)["run_id"]) == ["run001", "run002", "run004"]
    assert len(store.runs_frame(grid="g")) == 4  # still members: `ablate runs --grid g` lists them
    store.register_grid(name="g", text="name: g\n", runs=[planned(0)], whole=False)  # --append, --set: join
    assert store.older_runs("g") == 0 and len(store.runs_frame(grid="g", current=True)) == 4


def test_the_seeds_a_grid_grew_stay_current_until_its_arms_or_cells_change(store: Store) -> None:
    """Runs that are the file's runs at other seeds (what --until-resolved added) stay in the grid's current
    configuration when the file runs again, plain or growing other comparisons: a report keeps the seeds a
    comparison was resolved on. A run whose arm and cell the file no longer plans becomes an older one."""
    store.register_grid(name="g", text="name: g\n", runs=[planned(i) for i in range(3)])
    store.register_grid(name="g", text="name: g\n", runs=[planned(i) for i in range(3, 9)], whole=False)
    store.register_grid(name="g", text="name: g\n", runs=[planned(i) for i in range(3)])  # the file again
    assert store.older_runs("g") == 0
    assert list(store.runs_frame(grid="g", current=True)["run_id"]) == [f"run{i:03d}" for i in range(9)]
    store.register_grid(name="g", text="name: g\n", runs=[planned(i) for i in (0, 1)])  # variant 2 dropped
    assert sorted(store.runs_frame(grid="g", current=True)["run_id"]) == [
        f"run{i:03d}" for i in (0, 1, 3, 4, 6, 7)]
    new_lr = [dataclasses.replace(planned(i, lr=1e-3), run_id=f"lr{i:03d}") for i in range(3)]
    store.register_grid(name="g", text="name: g\n", runs=new_lr)  # the base edited: another learning rate
    assert store.older_runs("g") == 9 and len(store.runs_frame(grid="g", current=True)) == 3
    # and back: the file's runs at the first lr are current again, with every seed of them that ran
    store.register_grid(name="g", text="name: g\n", runs=[planned(i) for i in range(3)])
    assert store.older_runs("g") == 3 and len(store.runs_frame(grid="g", current=True)) == 9


def test_runs_of_one_stem_are_found_under_their_other_ids(store: Store) -> None:
    from ablate.grid.ids import run_id
    from ablate.grid.stems import stem_id

    store.register_grid(name="g", text="name: g\n", runs=[planned(0)])
    ingested = result(1).model_copy(update={"run_id": run_id(planned(1).config)})
    store.ingest(ingested)  # a run the store first saw in its result: its stem is computed there
    store.ingest(result(2))  # one under an id that is not today's: no stem (`ablate db rehash` gives it one)
    stems = {"new0": stem_id(planned(0).config), "new1": stem_id(planned(1).config),
             "new2": stem_id(planned(2).config), "run000": "x"}
    found = store.same_stem(stems)
    assert {k: v[:2] for k, v in found.items()} == {"new0": ("run000", "queued"),
                                                   "new1": (ingested.run_id, "done")}
    assert found["new1"][2]["variant"] == planned(1).config.variant
