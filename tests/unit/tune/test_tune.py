"""``ablate tune`` end to end on the tiny preset (15 steps of 4 x 32 tokens of the arithmetic stream,
validation every 5 steps): a study that prunes a hopeless trial, a rerun that adds nothing, a diverged trial
told as a bad value, a repeated config reused, a bracketing probe, ``--then-run`` at the best LR, and the
report.

The trials' values are fixed with Optuna's ``enqueue_trial`` on the same study, so every outcome is
constructed: lr 1e-2 trains well; lr 1e-6 barely moves (val PPL ~300 vs ~16 at step 5), so a median pruner
that needs one finished trial must prune it; lr 50 diverges within the few steps ``diverge_patience: 3``
allows.
"""

from __future__ import annotations

import re
import subprocess
import sys

import optuna
import pandas as pd
import pytest
from optuna.trial import TrialState
from typer.testing import CliRunner

from ablate.cli import app
from ablate.grid import expand, load_grid
from ablate.store import Store
from ablate.tune.protocol import PENALTY
from ablate.tune.search import TuneOptions, tune
from ablate.tune.space import cells_of, study_name
from ablate.tune.storage import optuna_storage

pytestmark = pytest.mark.slow

GRID = """
name: lrg
base:
  model: {preset: tiny}
  data:
    seq_len: 32
    stream_tokens: 20000
    train: [{kind: builtin, name: arithmetic}]
    heldout: {arith: {kind: builtin, name: arithmetic}}
  train: {steps: 15, batch_size: 4, checkpoint_every: 100, warmup_frac: 0.0, diverge_patience: 3}
  eval: {heldout_tokens: 256, probes: false, every: 5}
grid:
  variant: [baseline]
  seed: [0, 1]
"""


def options(home, **over) -> TuneOptions:
    base = dict(param="train.lr", low=1e-6, high=100.0, log=True, trials=2, pruner="median:1", home=home,
                jobs=1, mlflow=False)
    return TuneOptions(**{**base, **over})


def enqueue(home, path, *values: float) -> str:
    """Fix the next trials' values of the grid's one study (made here if new) and return its name."""
    (cell,) = cells_of(expand(load_grid(path)), "train.lr")
    name = study_name("lrg", "train.lr", cell)
    with Store.open(home=home) as store:
        study = optuna.create_study(study_name=name, storage=optuna_storage(store.url), direction="minimize",
                                    load_if_exists=True)
    for v in values:
        study.enqueue_trial({"train.lr": v})
    return name


def study_of(home, name):
    with Store.open(home=home) as store:
        return optuna.load_study(study_name=name, storage=optuna_storage(store.url))


def runs(home, grid):
    with Store.open(home=home) as store:
        return store.runs_frame(grid=grid).set_index("run_id")


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """Three `ablate tune` calls on one home: 2 trials; the same again; 4 trials with --then-run and a
    probe."""
    mp = pytest.MonkeyPatch()
    root = tmp_path_factory.mktemp("tune")
    mp.setenv("ABLATE_CACHE", str(root / "cache"))
    path, home = root / "g.yaml", root / "home"
    path.write_text(GRID)
    name = enqueue(home, path, 1e-2, 1e-6)
    first = tune(path, [], options(home, mlflow=True))  # the trials as MLflow runs, under their study
    snapshot = [(t.number, t.state, t.params["train.lr"]) for t in study_of(home, name).trials]
    again = tune(path, [], options(home))
    enqueue(home, path, 50.0, 1e-2)
    last = tune(path, [], options(home, trials=4, then_run=True, find_max_stable=True, stable_steps=1))
    yield dict(path=path, home=home, name=name, first=first, snapshot=snapshot, again=again, last=last)
    mp.undo()


def test_a_study_runs_and_prunes_a_hopeless_trial(tuned):
    first, home = tuned["first"], tuned["home"]
    assert first.exit_code == 0 and first.counts == {"done": 1, "pruned": 1}
    assert [(n, s, v) for n, s, v in tuned["snapshot"]] == [(0, TrialState.COMPLETE, 1e-2),
                                                            (1, TrialState.PRUNED, 1e-6)]
    trials = study_of(home, tuned["name"]).trials
    good, hopeless = trials[0], trials[1]
    assert 5 < good.value < 40 and good.user_attrs["outcome"] == "ok"
    # pruned at its first report
    assert hopeless.intermediate_values and min(hopeless.intermediate_values) == 5
    assert hopeless.intermediate_values[5] > 3 * good.intermediate_values[5]
    frame = runs(home, "lrg/tune")
    assert frame.loc[good.user_attrs["run_id"], "status"] == "done"
    assert frame.loc[good.user_attrs["run_id"], "val_ppl"] == pytest.approx(good.value)
    pruned = frame.loc[hopeless.user_attrs["run_id"]]
    assert pruned["status"] == "pruned" and pruned["steps"] == 5 and pd.isna(pruned["error"])  # not a crash


def test_trials_are_mlflow_runs_under_their_study_with_the_pruning_decision(tuned):
    from mlflow import MlflowClient

    home, name = tuned["home"], tuned["name"]
    client = MlflowClient(f"sqlite:///{home.resolve()}/mlflow.db")
    exp = client.get_experiment_by_name("lrg/tune")
    (study,) = client.search_runs([exp.experiment_id], filter_string=f"tags.`ablate.parent` = '{name}'")
    trials = study_of(home, name).trials
    by_run = {r.data.tags["run_id"]: r for r in
              client.search_runs([exp.experiment_id], filter_string="tags.`ablate.role` = 'run'")}
    good, hopeless = (by_run[t.user_attrs["run_id"]] for t in trials[:2])
    for run, trial in ((good, trials[0]), (hopeless, trials[1])):
        assert run.data.tags["mlflow.parentRunId"] == study.info.run_id
        assert run.data.tags["trial_id"] == str(trial._trial_id) and run.data.tags["study"] == name
        assert float(run.data.params["train.lr"]) == trial.params["train.lr"]
    # named apart: the cell's trials all run at seed 0, and each is named by its value
    assert (good.info.run_name, hopeless.info.run_name) == ("baseline-s0 train.lr=0.01",
                                                            "baseline-s0 train.lr=1e-06")
    assert good.info.status == "FINISHED" and good.data.tags["status"] == "done"
    assert hopeless.info.status == "FINISHED" and hopeless.data.tags["status"] == "pruned"
    assert hopeless.data.tags["pruned_at_step"] == "5"
    assert float(hopeless.data.tags["pruned_val_ppl"]) == pytest.approx(trials[1].intermediate_values[5])
    assert [m.step for m in client.get_metric_history(good.info.run_id, "val_ppl")] == [4, 9, 14]


def test_a_rerun_adds_no_trial_and_no_study(tuned):
    again, home = tuned["again"], tuned["home"]
    assert again.counts == {} and again.exit_code == 0
    with Store.open(home=home) as store:
        names = [s.study_name for s in optuna_storage(store.url).get_all_studies()]
    assert names == [tuned["name"]]
    assert again.cells[0].best.value == 1e-2


def test_a_diverged_trial_is_a_bad_value_and_a_repeated_config_is_reused(tuned):
    last, home = tuned["last"], tuned["home"]
    trials = study_of(home, tuned["name"]).trials
    assert len(trials) == 4  # --trials is the total: two more, not four
    diverged, repeat = trials[2], trials[3]
    assert diverged.params["train.lr"] == 50.0 and diverged.state == TrialState.COMPLETE
    assert diverged.value == PENALTY and diverged.user_attrs["outcome"] == "diverged"
    assert runs(home, "lrg/tune").loc[diverged.user_attrs["run_id"], "status"] == "diverged"
    # the same sampled config is the same run: told from the store, not trained again
    assert repeat.user_attrs["run_id"] == trials[0].user_attrs["run_id"] and repeat.value == trials[0].value
    assert last.counts["reused"] >= 1 and last.counts["diverged"] >= 1


def test_the_bracketing_probe_lies_between_the_stable_and_the_diverged_lr(tuned):
    study = study_of(tuned["home"], tuned["name"])
    (probe,) = study.user_attrs["probes"]
    # geometric midpoint of stable 1e-2, unstable 50
    assert probe["value"] == pytest.approx((1e-2 * 50.0) ** 0.5)
    cell = tuned["last"].cells[0]
    assert cell.stable.value >= 1e-2 and cell.unstable.value <= 50.0
    assert cell.stable.value < cell.unstable.value


def test_then_run_runs_every_seed_at_the_best_lr(tuned):
    last, home = tuned["last"], tuned["home"]
    best = last.cells[0].best.value
    assert last.tuned is not None and last.tuned.exit_code == 0 and last.exit_code == 0
    assert last.tuned_grid.is_file() and "lrg/tuned" in last.tuned_grid.read_text()
    frame = runs(home, "lrg/tuned")
    assert sorted(frame["seed"]) == [0, 1] and set(frame["train.lr"]) == {best}
    assert set(frame["status"]) == {"done"}
    # seed 0 at the best lr is the trial's own run: reused, not trained twice
    seed0 = frame.index[frame["seed"] == 0][0]
    assert seed0 in set(runs(home, "lrg/tune").index)


def test_the_lr_report_and_the_cli(tuned, monkeypatch):
    home = tuned["home"]
    cli = CliRunner()
    out = cli.invoke(app, ["report", "lr", "--home", str(home)])
    assert out.exit_code == 0, out.output
    best = tuned["last"].cells[0].best.value
    assert "Table LR" in out.output and f"{best:.1e}".replace("e-0", "e-") in out.output
    # lr 1e-2 twice (ok), lr 50 (diverged), lr 1e-6 (pruned), and the probe at 0.71 (diverges on CPU here)
    assert re.search(r"\| [23] ok, [12] diverged, 1 pruned \|", out.output), out.output
    # the column above the largest stable value says what it holds: diverged, here
    assert "first >5% worse" in out.output, out.output
    assert re.search(r"\| [0-9.e-]+ \(diverged\) \|", out.output), out.output
    # the trials' grid, the name `ablate tune` prints, reports the same studies
    by_tune_name = cli.invoke(app, ["report", "lr", "--home", str(home), "--grid", "lrg/tune"])
    assert by_tune_name.exit_code == 0 and by_tune_name.output == out.output, by_tune_name.output
    out = cli.invoke(app,
                     ["report", "all", "--home", str(home), "--grid", "lrg/tuned", "--out",
                      str(home / "rep")])
    assert out.exit_code == 0, out.output
    assert (home / "rep" / "figures" / "lr_sensitivity.png").stat().st_size > 1000
    assert 'id="lr"' in (home / "rep" / "report.html").read_text()
    # a rerun from the CLI: nothing new to train, exit 0, the summary names the best
    out = cli.invoke(app,
                     ["tune", str(tuned["path"]), "--home", str(home), "--low", "1e-6", "--high", "100",
                      "--log",
                           "--trials", "4", "--pruner", "median:1", "--jobs", "1"])
    assert out.exit_code == 0, out.output
    assert "nothing to run" in out.output and "ablate report lr --grid 'lrg/tune'" in out.output


def test_option_errors_exit_2_with_the_fix(tmp_path):
    cli = CliRunner()
    path = tmp_path / "g.yaml"
    path.write_text(GRID)
    out = cli.invoke(app, ["tune", str(path), "--home", str(tmp_path / "h")])
    assert out.exit_code == 2 and "--low and --high" in out.output
    out = cli.invoke(app, ["tune", str(path), "--low", "1e-4", "--high", "1e-2", "--metric", "val_pll",
                           "--home", str(tmp_path / "h")])
    assert out.exit_code == 2 and "did you mean 'val_ppl'" in out.output
    out = cli.invoke(app, ["report", "lr", "--home", str(tmp_path / "h")])
    assert out.exit_code == 1 and "no store at sqlite:///" in out.output  # nothing ran there: nothing made
    assert not (tmp_path / "h").exists()
    assert cli.invoke(app, ["db", "upgrade", "--home", str(tmp_path / "h")]).exit_code == 0
    out = cli.invoke(app, ["report", "lr", "--home", str(tmp_path / "h")])
    assert out.exit_code == 2 and "no tuning studies" in out.output


def test_dashboard_without_the_package_says_how_to_install_it(tmp_path):
    # a real `ablate` process in which optuna-dashboard cannot be imported (None in sys.modules: ImportError),
    # as on a machine without the `dashboard` extra
    code = ("import sys; sys.modules['optuna_dashboard'] = None; sys.argv = ['ablate'] + sys.argv[1:]; "
            "from ablate.cli import main; main()")
    out = subprocess.run([sys.executable, "-c", code, "tune", "--dashboard", "--home", str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "pip install optuna-dashboard" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr


def test_a_cut_off_trial_is_resumed_not_replaced(tuned):
    """A trial left RUNNING (its `ablate tune` was killed) counts towards --trials and is finished on the next
    call (here its run is already in the store, so it is told from there without training)."""
    home, name = tuned["home"], tuned["name"]
    study = study_of(home, name)
    study.enqueue_trial({"train.lr": 1e-2})
    cut = study.ask({"train.lr": optuna.distributions.FloatDistribution(1e-6, 100.0, log=True)})
    cut.set_user_attr("run_id", study.trials[0].user_attrs["run_id"])
    report = tune(tuned["path"], [], options(home, trials=5))
    assert report.counts == {"reused": 1}
    trials = study_of(home, name).trials
    assert len(trials) == 5 and trials[4].state == TrialState.COMPLETE and trials[4].value == trials[0].value
