"""The trainer seam holds for a third trainer: tests/third_trainer.py (a Python function as the trainer) is
one module and one registry entry, and ablate's plan, run (two worker processes), store, rerun, compare,
--until-resolved and the model-only refusals serve it unchanged."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import third_trainer
from typer.testing import CliRunner

from ablate.cli import app
from ablate.store import Store
from ablate.trainers import registry

GRID = """\
name: fn
function: third_trainer:fit
objective: {metric: val_loss, better: lower}
arms: {baseline: {noise: 0.5}, clean: {noise: 0.1}}
seeds: [0, 1, 2]
"""


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def frame(home: Path):
    with Store.open(home=home) as store:
        return store.runs_frame(grid="fn").set_index("run_id")


@pytest.fixture
def grid(tmp_path, monkeypatch):
    """The registry with the third trainer's entry, the worker processes able to import its module."""
    monkeypatch.setitem(registry.TRAINERS, third_trainer.NAME, third_trainer.ENTRY)
    here = str(Path(third_trainer.__file__).parent)
    monkeypatch.setenv("PYTHONPATH", f"{here}:{':'.join(p for p in sys.path if p)}")
    path = tmp_path / "fn.yaml"
    path.write_text(GRID)
    return path, tmp_path / "home"


def test_a_third_trainer_is_planned_run_stored_and_compared_unchanged(grid):
    path, home = grid
    out = invoke("plan", str(path), "--home", str(home), "--format", "json")
    assert out.exit_code == 0, out.output
    assert out.stdout.count('"run_id"') == 6 and not home.exists()

    out = invoke("run", str(path), "--jobs", "2", "--home", str(home), "--no-mlflow")
    assert out.exit_code == 0, out.output
    runs = frame(home)
    assert len(runs) == 6 and set(runs["status"]) == {"done"} and set(runs["trainer"]) == {"function"}
    for _, row in runs.iterrows():  # each stored value is what the function returned, for its arm and seed
        params = {"noise": 0.5 if row["variant"] == "baseline" else 0.1}
        expected = third_trainer.fit(params, int(row["seed"]), lambda *_: None)["val_loss"]
        assert row["val_loss"] == pytest.approx(expected, rel=1e-12) and row["steps"] == 20
    with Store.open(home=home) as store:  # its steps, reported live and ingested from its result
        curve = store.curves(run_ids=[str(runs.index[0])], metrics=["loss"])
    assert list(curve["step"]) == list(range(20))

    out = invoke("run", str(path), "--home", str(home), "--no-mlflow")  # its ids are stable: nothing retrains
    assert out.exit_code == 0, out.output
    assert runs["finished"].notna().all() and (frame(home)["finished"] == runs["finished"]).all()

    out = invoke("report", "compare", "--home", str(home), "--format", "json")
    assert out.exit_code == 0, out.output
    (row,) = json.loads(out.stdout)["comparisons"]
    assert (row["arm"], row["metric"], row["n"]) == ("clean", "val_loss", 3)  # the objective, by default
    by = {(r["variant"], int(r["seed"])): r["val_loss"] for _, r in runs.iterrows()}
    deltas = [by[("clean", s)] - by[("baseline", s)] for s in (0, 1, 2)]
    assert row["delta"] == pytest.approx(sum(deltas) / 3, abs=1e-12)

    out = invoke("report", "table1", "--home", str(home))
    assert out.exit_code == 2 and out.output.count("\n") == 1
    assert "this is a function grid (trainer: function)" in out.output


def test_until_resolved_adds_seeds_of_a_third_trainer(grid):
    path, home = grid
    path.write_text(GRID.replace("noise: 0.1}", "noise: 0.5, draw: 1}"))  # no effect: open at 3 seeds
    out = invoke("run", str(path), "--home", str(home), "--no-mlflow", "--until-resolved", "--compare",
                 "clean", "--max-seeds", "4")
    assert out.exit_code == 0, out.output
    seeds = frame(home).groupby("variant")["seed"].agg(sorted)
    assert seeds["clean"] == seeds["baseline"] and len(seeds["clean"]) > 3  # seeds added past the file's 3
