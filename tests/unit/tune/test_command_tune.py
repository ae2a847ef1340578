"""``ablate tune --param lr`` on a command grid, on the real toy script of tests/command_scripts.py (its
``val`` is ``3 / step + noise(seed, step) + effect + lr``: it grows with lr, so the smallest lr tried wins).

A study per arm searches the command's ``lr``; each trial is a run of its own (the parameters are in its id)
whose stored ``val_loss`` is what its script printed. With a threshold pruner and a run of 100,000 steps,
every trial is pruned at its first report (``3 + lr`` is above the threshold at step 1): tune returns only
because the pruner stopped each command's process group, and no command or child of it is left.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import optuna
import pandas as pd
import pytest
from command_scripts import command_grid, live_marked
from optuna.trial import TrialState
from typer.testing import CliRunner

from ablate.cli import app
from ablate.errors import ConfigError
from ablate.grid.planning import plan_grid
from ablate.runner.fingerprints import Fingerprints
from ablate.store import Store
from ablate.trainers.command.config import CommandConfig, command_ids
from ablate.tune.search import TuneOptions, tune
from ablate.tune.studies import stored_studies

PRINTED = re.compile(r"step (\d+): val ([\d.]+)")


def options(home: Path, **over) -> TuneOptions:
    base = dict(param="lr", low=0.01, high=1.0, log=True, trials=3, pruner="none", home=home, jobs=2,
                mlflow=False)
    return TuneOptions(**{**base, **over})


def printed(home: Path, run_id: str) -> list[tuple[int, float]]:
    log = (home / "runs" / run_id / "train.log").read_text()
    return [(int(s), float(v)) for s, v in PRINTED.findall(log)]


def trials_frame(home: Path) -> pd.DataFrame:
    with Store.open(home=home) as store:
        return store.runs_frame(grid="toy/tune").set_index("run_id")


def studies(home: Path) -> list[optuna.Study]:
    with Store.open(home=home) as store:
        return stored_studies(store, "toy")


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """Three trials per arm of the toy grid (seeds 0 and 1), no pruner."""
    root = tmp_path_factory.mktemp("command-tune")
    path = command_grid(root, seeds=[0, 1])
    home = root / "home"
    return path, home, tune(path, [], options(home))


def test_each_arm_finds_the_smallest_lr_tried(tuned):
    _, _, report = tuned
    assert report.exit_code == 0 and report.counts == {"done": 6}
    assert report.metric == "val_loss"  # the objective, by default
    assert [c.label for c in report.cells] == ["baseline", "gated"]
    for cell in report.cells:
        assert len(cell.points) == 3 and {p.outcome for p in cell.points} == {"ok"}
        assert cell.best is not None and cell.best.value == min(p.value for p in cell.points)
        assert cell.seeds == [0, 1]  # trials run at the first seed; the cell holds both


def test_each_trial_is_a_run_of_its_own_whose_value_is_what_its_script_printed(tuned):
    path, home, _ = tuned
    runs = trials_frame(home)
    assert len(runs) == 6 and set(runs["status"]) == {"done"}
    grid_runs = {r.run_id for r in plan_grid(path, fingerprints=Fingerprints.for_home(home)).planned}
    assert not grid_runs & set(runs.index)  # a trial's lr is in its id: none is one of the grid's runs
    for study in studies(home):
        assert study.direction == optuna.study.StudyDirection.MINIMIZE  # objective: {better: lower}
        for trial in study.trials:
            assert trial.state == TrialState.COMPLETE
            run_id = trial.user_attrs["run_id"]
            row = runs.loc[run_id]
            lines = printed(home, run_id)
            assert lines and row["val_loss"] == lines[-1][1] == trial.value  # the last value is the run's
            assert row["params.lr"] == trial.params["lr"]
            # the trial's run is the cell's run with its lr set: the same identity rule as the grid's runs
            with Store.open(home=home) as store:
                config = CommandConfig.model_validate(store.run_config(run_id))
            assert config.params["lr"] == trial.params["lr"] and config.seed == 0
            assert command_ids(config)[0] == run_id


def test_a_rerun_adds_no_trial(tuned):
    path, home, _ = tuned
    again = tune(path, [], options(home))
    assert again.exit_code == 0 and again.counts == {}
    assert sum(len(s.trials) for s in studies(home)) == 6


def test_a_pruned_trial_is_pruned_in_the_store_and_leaves_no_process(tmp_path):
    marker = f"ablate-tune-{os.getpid()}-{time.monotonic_ns()}"
    # 100,000 steps of 0.05 s: only the pruner ends these commands
    path = command_grid(tmp_path, seeds=[0], steps=100_000, sleep=0.05, children=2, marker=marker)
    home = tmp_path / "home"
    report = tune(path, [], options(home, trials=2, pruner="threshold:2"))
    assert live_marked(marker) == []  # no command, no child left
    assert report.exit_code == 0 and report.counts == {"pruned": 4}
    runs = trials_frame(home)
    assert len(runs) == 4 and set(runs["status"]) == {"pruned"}
    assert runs["error"].isna().all()  # not a crash
    for study in studies(home):
        for trial in study.trials:
            assert trial.state == TrialState.PRUNED and trial.user_attrs["outcome"] == "pruned"
            run_id = trial.user_attrs["run_id"]
            first = printed(home, run_id)[0]
            assert trial.intermediate_values == {first[0]: first[1]}  # judged, and stopped, at its first
            assert runs.loc[run_id, "steps"] == first[0] == 1


def test_the_cli_tunes_a_command_grid(tmp_path):
    path = command_grid(tmp_path, seeds=[0])
    home = tmp_path / "home"
    out = CliRunner().invoke(app, ["tune", str(path), "--param", "lr", "--metric", "val_loss", "--low",
                                   "0.01", "--high", "1", "--log", "--trials", "2", "--pruner", "none",
                                   "--home", str(home), "--no-mlflow", "--jobs", "2"])
    assert out.exit_code == 0, out.output
    assert "ablate tune toy: lr per cell (metric val_loss)" in out.output
    assert set(trials_frame(home)["status"]) == {"done"}


@pytest.mark.parametrize(("over", "message"), [
    ({"param": "lrr"}, r"--param: cannot tune 'lrr': the command has no such parameter; unknown parameter "
                       r"'lrr' \(did you mean 'lr'\?\)"),
    ({"param": "seed"}, "cannot tune 'seed': the command has no such parameter"),
    ({"metric": "val_los"}, r"--metric: unknown metric 'val_los' \(did you mean 'val_loss'\?\)"),
    ({"then_run": True}, "--then-run is for grids of ablate's own model"),
], ids=["misspelt-param", "seed", "misspelt-metric", "then-run"])
def test_bad_options_are_one_line_and_make_nothing(tmp_path, over, message):
    path = command_grid(tmp_path, seeds=[0])
    home = tmp_path / "home"
    with pytest.raises(ConfigError, match=message):
        tune(path, [], options(home, **over))
    assert not home.exists()


def test_a_higher_is_better_objective_is_maximized(tmp_path):
    path = command_grid(tmp_path, seeds=[0])
    path.write_text(path.read_text().replace("better: lower", "better: higher"))
    home = tmp_path / "home"
    report = tune(path, [], options(home))
    assert report.exit_code == 0
    for cell in report.cells:  # the toy's val grows with lr: now the largest lr tried wins
        assert cell.best is not None and cell.best.value == max(p.value for p in cell.points)
    assert {s.direction for s in studies(home)} == {optuna.study.StudyDirection.MAXIMIZE}
