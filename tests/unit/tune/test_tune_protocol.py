"""``ablate tune``'s pure parts: the stable-LR bracketing search against constructed thresholds, best and
largest stable values, cells and study names, the tuned grid file, option errors; and Optuna's tables beside
the store's."""

from __future__ import annotations

import math

import pytest

from ablate.errors import ConfigError
from ablate.grid import expand, parse_grid
from ablate.tune.protocol import (
    PENALTY,
    Bracket,
    Point,
    best_point,
    bracket,
    bracket_from_points,
    edge_of,
    first_unstable_above,
    is_stable,
    max_stable,
)
from ablate.tune.space import SearchSpace, cells_of, check_metric, study_name, with_value
from ablate.tune.storage import make_pruner, parse_pruner
from ablate.tune.tuned import tuned_grid


@pytest.mark.parametrize("threshold", [2e-3, 7.7e-3, 0.0301, 0.09])
@pytest.mark.parametrize("steps", [3, 6])
def test_geometric_bracket_brackets_a_constructed_divergence_threshold(threshold, steps):
    tried = []

    def stable(lr: float) -> bool:  # the fake objective: diverges at and above the threshold
        tried.append(lr)
        return lr < threshold

    b = bracket(stable, 1e-3, 0.1, steps=steps, log=True)
    assert b.stable < threshold <= b.unstable
    assert len(tried) == steps and len(b.tried) == steps
    # halved in log space each step
    assert b.ratio == pytest.approx((0.1 / 1e-3) ** (1 / 2 ** steps), rel=1e-9)
    assert all(1e-3 < x < 0.1 for x in tried)
    assert tried[0] == pytest.approx(math.sqrt(1e-3 * 0.1))


def test_linear_bracket_and_its_limits():
    b = bracket(lambda x: x <= 0.37, 0.0, 1.0, steps=5, log=False)
    assert b.stable <= 0.37 < b.unstable and b.ratio == pytest.approx(1 / 32)
    assert b.probe() is None and b.done
    with pytest.raises(ValueError, match="stable < unstable"):
        Bracket(0.1, 0.01)
    with pytest.raises(ValueError, match="positive lower end"):
        Bracket(0.0, 1.0, log=True)


def test_best_and_largest_stable_from_points():
    points = [Point(1e-4, "ok", 20.0), Point(1e-3, "ok", 12.0), Point(3e-3, "ok", 12.5),
              Point(1e-2, "ok", 13.0), Point(2e-2, "pruned"), Point(5e-2, "diverged"), Point(3e-2, "failed")]
    assert best_point(points) == points[1]
    # within 5% of 12.0 means <= 12.6: 3e-3 is the largest stable, 1e-2 (13.0) is outside the tolerance
    assert max_stable(points, 0.05) == points[2]
    assert first_unstable_above(points, 3e-3, 0.05) == points[3]
    # a wider tolerance: 1e-2 becomes stable and the next unstable is the diverged 5e-2 (pruned/failed say
    # nothing)
    assert max_stable(points, 0.10) == points[3]
    assert first_unstable_above(points, 1e-2, 0.10) == points[5]
    assert is_stable(points[4], 12.0) is None and is_stable(points[5], 12.0) is False
    assert best_point([Point(1.0, "diverged"), Point(2.0, "pruned")]) is None


def test_bracket_from_points_starts_from_the_tightest_pair_or_says_why_not():
    points = [Point(1e-3, "ok", 10.0), Point(4e-3, "ok", 10.2), Point(0.1, "diverged"),
              Point(0.5, "diverged")]
    b, why = bracket_from_points(points, high=1.0, steps=2, log=True, tolerance=0.05)
    assert why == "" and (b.stable, b.unstable) == (4e-3, 0.1)
    none, why = bracket_from_points(points[:2], high=1.0, steps=2, log=True)
    assert none is None and "raise --high" in why
    none, why = bracket_from_points([Point(0.1, "diverged")], high=1.0, steps=2, log=True)
    assert none is None and "no trial finished" in why


GRID = """
name: g
base: {model: {preset: tiny}, train: {steps: 5}}
grid:
  variant: [baseline, sdpa-elementwise]
  seed: [0, 1]
  train.lr: [1.0e-3, 3.0e-3]
"""


def test_cells_group_by_everything_but_seed_and_the_tuned_param():
    planned = expand(parse_grid(GRID))
    cells = cells_of(planned, "train.lr")
    assert [c.label for c in cells] == ["baseline", "sdpa-elementwise"]
    assert [c.seeds for c in cells] == [[0, 1], [0, 1]]
    assert all(c.base.config.seed == 0 for c in cells)
    names = {study_name("g", "train.lr", c) for c in cells}
    assert len(names) == 2 and all(n.startswith("g/tune/train.lr/") for n in names)
    # tuning another field: the lr axis now makes cells of its own
    assert len(cells_of(planned, "train.weight_decay")) == 4
    cfg = with_value(cells[0].base.config, "train.lr", 0.02, eval_every=3)
    assert (cfg.train.lr, cfg.eval.every, cfg.variant) == (0.02, 3, "baseline")
    with pytest.raises(ConfigError, match="train.lr"):
        with_value(cells[0].base.config, "train.lr", -1.0)


def test_the_tuned_grid_file_is_each_run_at_its_best_value():
    grid = parse_grid(GRID)
    cells = cells_of(expand(grid), "train.lr")
    best = {"baseline": 0.0123, "sdpa-elementwise": 0.0456}
    picks = [(run, best[c.variant]) for c in cells for run in c.runs]
    import yaml

    doc = tuned_grid(grid, picks, "train.lr")
    runs = expand(parse_grid(yaml.safe_dump(doc)))
    got = sorted((r.config.variant, r.config.seed, r.config.train.lr) for r in runs)
    assert got == [("baseline", 0, 0.0123), ("baseline", 1, 0.0123), ("sdpa-elementwise", 0, 0.0456),
                   ("sdpa-elementwise", 1, 0.0456)]
    assert doc["name"] == "g/tuned"


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"param": "variant", "low": 1, "high": 2}, "not a numeric field"),
    ({"param": "train.lrr", "low": 1, "high": 2}, "did you mean 'train.lr'"),
    ({"param": "train.lr", "low": 0.1, "high": 0.01}, "must be below --high"),
    ({"param": "train.lr", "low": 0.0, "high": 0.01, "log": True}, "log scale needs --low above 0"),
], ids=["not-numeric", "misspelt", "empty-range", "log-at-zero"])
def test_search_space_errors_name_the_option_and_the_fix(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        SearchSpace(**kwargs)


def test_pruner_specs_and_metric_names():
    import optuna

    assert isinstance(make_pruner("median:1"), optuna.pruners.MedianPruner)
    assert isinstance(make_pruner("hyperband", min_resource=5, max_resource=50),
                      optuna.pruners.HyperbandPruner)
    assert isinstance(make_pruner("threshold:100"), optuna.pruners.ThresholdPruner)
    assert isinstance(make_pruner("none"), optuna.pruners.NopPruner)
    with pytest.raises(ConfigError, match=r"--pruner: unknown pruner 'medain' \(did you mean 'median'\?\)"):
        parse_pruner("medain")
    cfg = expand(parse_grid(GRID))[0].config
    assert check_metric("ppl/code", cfg) == "ppl/code"
    with pytest.raises(ConfigError, match="unknown metric 'val_pll'.*did you mean 'val_ppl'"):
        check_metric("val_pll", cfg)
    assert PENALTY > 1e6


def test_optuna_tables_live_beside_the_store_and_both_reopen(store_url):
    """Both use Alembic's default version table: the store's revision stays, Optuna's check is skipped."""
    import optuna
    from sqlalchemy import inspect

    from ablate.store import Store
    from ablate.store.migrate import current_revision, head_revision
    from ablate.tune.storage import optuna_storage, store_studies

    with Store.open(store_url) as store:
        assert store_studies(store, "g") == []  # creates nothing
        assert not inspect(store.engine).has_table("studies")
        study = optuna.create_study(study_name="g/tune/x", storage=optuna_storage(store.url),
                                    direction="minimize")
        study.set_user_attr("grid", "g")
        study.tell(study.ask(), 1.5)
    with Store.open(store_url) as store:  # the store migrates (a no-op) and still works
        assert store.grids() == []
        with store.engine.connect() as conn:
            assert current_revision(conn) == head_revision()
        again = optuna.load_study(study_name="g/tune/x", storage=optuna_storage(store.url))
        assert [t.value for t in again.trials] == [1.5]
        assert [s.study_name for s in store_studies(store, "g")] == ["g/tune/x"]


def test_a_study_is_continued_never_duplicated_and_never_mixed_with_another_search(tmp_path):
    from ablate.store import Store
    from ablate.tune.storage import optuna_storage
    from ablate.tune.studies import open_study

    attrs = {"grid": "g", "param": "train.lr", "low": 1e-4, "high": 1e-2, "log": True, "metric": "val_ppl"}
    with Store.open(f"sqlite:///{tmp_path / 'a.db'}") as store:
        storage = optuna_storage(store.url)
        first = open_study(storage, "g/tune/s", attrs, trials=4, pruner=make_pruner("none"))
        again = open_study(storage, "g/tune/s", {**attrs, "tolerance": 0.1}, trials=4,
                           pruner=make_pruner("none"))
        assert first._study_id == again._study_id and len(storage.get_all_studies()) == 1
        assert again.user_attrs["tolerance"] == 0.1  # attrs that do not change the question are updated
        with pytest.raises(ConfigError,
                           match=r"made with high=0.01, not high=0.1.*same --param, --low, --high"):
            open_study(storage, "g/tune/s", {**attrs, "high": 0.1}, trials=4, pruner=make_pruner("none"))


def test_the_tune_summary_off_a_terminal_prints_whole_labels_and_values(capsys) -> None:
    """``ablate tune ... | cat`` (a CI log): nothing cut to '…', however long a cell's label."""
    from ablate.tune.options import CellResult, TuneReport
    from ablate.tune.summary import print_summary

    label = "sdpa-elementwise-headwise  model.gate.act=silu, train.batch_size=32, data.seq_len=1024"
    best = Point(2.5e-3, "ok", 12.3456, run_id="0123456789abcdef")
    cell = CellResult(label, "sdpa-elementwise", "s", [0, 1], [best, Point(5e-2, "diverged")], best, best,
                      Point(5e-2, "diverged"))
    print_summary(TuneReport("g", "g/tune", cells=[cell], counts={"done": 2}), "train.lr", "val_ppl")
    out = capsys.readouterr().out
    assert "…" not in out and label in out and "0.0025" in out and "12.35" in out, out


@pytest.mark.parametrize("width", [80, 100])
def test_the_tune_summary_fits_a_terminal_and_cuts_no_header(width: int) -> None:
    """On a terminal the table fits its width; its headers wrap at their spaces instead of ending in '…'
    (``ok/div/pruned/fa…`` once)."""
    from rich.console import Console

    from ablate.tune.options import CellResult, TuneReport
    from ablate.tune.summary import print_summary

    best = Point(2.5e-3, "ok", 12.3456, run_id="0123456789abcdef")
    worse = Point(5e-2, "diverged")
    cell = CellResult("sdpa-elementwise", "sdpa-elementwise", "s", [0, 1], [best, worse], best, best, worse)
    console = Console(width=width, record=True, force_terminal=True)
    print_summary(TuneReport("g", "g/tune", cells=[cell], counts={"done": 2}), "train.lr", "val_ppl", console)
    text = console.export_text()
    table = text.split("this time:")[0]
    assert all(len(line) <= width for line in table.splitlines()), table
    assert "…" not in table and "diverged" in table and "failed" in table, table


@pytest.mark.parametrize(("best", "edge"), [(0.0286, "high"), (0.0288, "high"), (1.1e-4, "low"), (3e-3, None),
                                            (0.01, None)])
def test_a_best_value_at_an_end_of_the_range_is_at_the_edge(best, edge):
    # the cells: best lr 0.0286 and 0.0288 with --high 0.03 (log range 1e-4..3e-2)
    assert edge_of(best, 1e-4, 0.03, log=True) == edge
    line = SearchSpace("train.lr", 1e-4, 0.03, log=True).edge_warning("baseline", best)
    if edge is None:
        assert line is None
    else:
        end, flag = ("top", "--high 0.03") if edge == "high" else ("bottom", "--low 0.0001")
        assert line is not None and line.startswith(
            f"baseline: the best train.lr, {best:.3g}, lies at the {end} of the range searched ({flag}; "
            "within 10% of its width on the log scale)")


def test_the_tune_summary_names_the_worse_value_for_what_it_is_and_warns_at_the_edge(capsys) -> None:
    """The column after the largest stable value is the first value above it that did worse, and says how
    (diverged, or its metric over the best's); a best at the top of the range is one warning line; the last
    line names the trials' grid as `ablate report lr` takes it."""
    from ablate.tune.options import CellResult, TuneReport
    from ablate.tune.summary import print_summary

    best, worse, diverged = Point(0.0286, "ok", 10.0), Point(0.029, "ok", 10.8), Point(0.0295, "diverged")
    cells = [CellResult("baseline", "baseline", "s", [0], [best, worse], best, best, worse),
             CellResult("sdpa-elementwise", "sdpa-elementwise", "t", [0], [best, diverged], best, best,
                        diverged)]
    report = TuneReport("g", "g/tune", cells=cells, counts={"done": 2},
                        warnings=[w for c in cells if (w := SearchSpace("train.lr", 1e-4, 0.03, log=True)
                                                      .edge_warning(c.label, c.best.value)) is not None])
    print_summary(report, "train.lr", "val_ppl")
    out = capsys.readouterr().out
    assert "first >5% worse" in out and "unstable" not in out, out
    assert "0.029 (+8%)" in out and "0.0295 (diverged)" in out, out
    assert out.count("warning: ") == 2 and "lies at the top of the range searched (--high 0.03" in out, out
    assert "ablate report lr --grid 'g/tune'" in out, out
