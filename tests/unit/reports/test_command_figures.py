"""``ablate report figures`` and ``ablate report all`` on a command grid, from a real one run by the library.

The grid runs a tiny script that prints ``step N: val X`` and writes ``eval/acc@1`` (a name no file may hold
as it is) to a JSONL file, for two arms x two cells (``scale``) x three seeds; seed 2 skips step 20. Each
figure is read from the matplotlib objects: the mean line of each arm in each cell is the mean over its seeds
of the values the store holds, step by step (over the seeds that reported the step), its band the 95% t
interval of that mean, each seed faint behind it.
"""

from __future__ import annotations

import html
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from matplotlib.axes import Axes
from matplotlib.collections import PolyCollection
from PIL import Image
from typer.testing import CliRunner

from ablate.cli import app
from ablate.execute.executor import RunOptions
from ablate.execute.grid_run import run_grid
from ablate.reports.command_figures import draw_curves, file_name
from ablate.reports.data import GridData, load_grid_data
from ablate.stats import t_interval
from ablate.store import Store

GRID = "own-curves"
ARMS = ("baseline", "gated")
SEEDS = (0, 1, 2)
STEPS = (0, 10, 20, 30, 40)
SKIPPED = (2, 20)  # (seed, step): this seed does not report this step
ACC = "eval/acc@1"

SCRIPT = '''
import argparse, json
p = argparse.ArgumentParser()
p.add_argument("--seed", type=int)
p.add_argument("--gain", type=float)
p.add_argument("--scale", type=float)
p.add_argument("--out")
a = p.parse_args()
with open(a.out, "a") as f:
    for step in STEPS:
        if (a.seed, step) == SKIPPED:
            continue
        val = a.scale * (3.0 - 0.02 * step - a.gain * step / 100) + 0.1 * a.seed * (1 + step / 40)
        print(f"step {step}: val {val:.4f}", flush=True)
        f.write(json.dumps({"step": step, "eval/acc@1": 0.5 + step / 100 - 0.01 * a.seed * a.gain}) + "\\n")
'''


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store holding the finished command grid (12 real runs of the script, one at a time)."""
    folder = tmp_path_factory.mktemp("own")
    (folder / "train.py").write_text(f"STEPS = {STEPS}\nSKIPPED = {SKIPPED}\n" + SCRIPT)
    (folder / "grid.yaml").write_text(textwrap.dedent(f"""\
        name: {GRID}
        trainer:
          command: {sys.executable} train.py --out={{run_dir}}/acc.jsonl {{args}}
          metrics:
            stdout: 'step (?P<step>\\d+): val (?P<val_loss>[\\d.]+)'
            jsonl: '{{run_dir}}/acc.jsonl'
          objective: {{metric: val_loss, better: lower}}
        base: {{gain: 0.0}}
        grid:
          arm:
            baseline: {{}}
            gated: {{gain: 1.0}}
          scale: [1.0, 2.0]
          seed: {list(SEEDS)}
        """))
    home = folder / "home"
    report = run_grid(folder / "grid.yaml", options=RunOptions(home=home, jobs=1, mlflow=False))
    assert not report.errors and sorted(set(report.statuses.values())) == ["done"], report
    assert len(report.statuses) == len(ARMS) * 2 * len(SEEDS)
    return home


@pytest.fixture
def store(home: Path) -> Any:
    opened = Store.open(home=home)
    yield opened
    opened.close()


@pytest.fixture
def data(store: Any) -> GridData:
    return load_grid_data(store, GRID)


def _ask(*args: str, store: Any) -> Any:
    return CliRunner().invoke(app, ["report", *args, "--store", store.url])


def _stored(store: Any, run_ids: list[str], metric: str) -> pd.DataFrame:
    """The store's values of ``metric`` for ``run_ids``: DataFrame(step x run)."""
    c = store.curves(run_ids=run_ids, metrics=[metric])
    return c.pivot_table(index="step", columns="run_id", values="value")


def _xy(ax: Axes, gid: str) -> tuple[np.ndarray, np.ndarray]:
    """The x and y data of the one line of ``ax`` with this gid."""
    (line,) = [ln for ln in ax.get_lines() if ln.get_gid() == gid]
    return np.asarray(line.get_xdata(), dtype=float), np.asarray(line.get_ydata(), dtype=float)


# ---------------------------------------------------------------- the files
def test_figures_writes_a_curve_per_own_metric_named_for_a_file(store: Any, data: GridData,
                                                                 tmp_path: Path) -> None:
    assert data.trainer == "command" and list(data.outcomes) == ["val_loss", ACC]  # the objective first
    res = _ask("figures", "--out", str(tmp_path / "f"), store=store)
    assert res.exit_code == 0, res.output
    assert file_name(ACC) == "curve_eval_acc_1.png"
    names = ["curve_val_loss", "curve_eval_acc_1"]
    assert sorted(p.name for p in (tmp_path / "f").iterdir()) == sorted(
        f"{n}{s}" for n in names for s in (".png", ".pdf"))
    with Image.open(tmp_path / "f" / "curve_val_loss.png") as im:
        title, caption = im.info["Title"], im.info["Description"]
    assert title == "val_loss by step (the objective, lower is better)"
    assert "95% Student t interval of the mean over seeds" in caption and "faint: each seed" in caption
    # seed 2 skipped step 20 in every arm and cell: the caption says where the mean is over fewer seeds
    assert "the mean and its band are over the seeds that did (here: cell.scale=1.0: baseline at step 20;" \
        in caption, caption
    assert "A panel per cell" in caption
    assert (tmp_path / "f" / "curve_val_loss.pdf").read_bytes().startswith(b"%PDF")


# ---------------------------------------------------------------- what is drawn
@pytest.mark.parametrize("metric", ["val_loss", ACC])
def test_each_mean_line_is_the_mean_over_seeds_of_the_stored_values(store: Any, data: GridData,
                                                                    metric: str) -> None:
    fig = draw_curves(data, metric)
    drawn = [ax for ax in fig.axes if ax.get_visible() and ax.get_lines()]
    assert [ax.get_title() for ax in drawn] == ["cell.scale=1.0", "cell.scale=2.0"]
    runs = data.runs
    for ax, scale in zip(drawn, (1.0, 2.0), strict=True):
        labels = ax.get_legend_handles_labels()[1]
        assert labels == [f"{arm} (n=3)" for arm in ARMS]
        for arm in ARMS:
            ids = list(runs[(runs["variant"] == arm) & (runs["cell.scale"] == scale)]["run_id"])
            stored = _stored(store, ids, metric)
            assert stored.shape == (len(STEPS), len(SEEDS)) and stored.isna().sum().sum() == 1
            x, y = _xy(ax, f"mean:{arm}")
            assert x.tolist() == list(STEPS)
            assert y == pytest.approx(stored.mean(axis=1).to_numpy(), abs=1e-12)
            # the step one seed skipped is the mean of the two that reported it
            two = stored.loc[SKIPPED[1]].dropna()
            assert len(two) == 2 and y[STEPS.index(SKIPPED[1])] == pytest.approx(two.mean())
            seeds = [ln for ln in ax.get_lines() if ln.get_gid() == f"seed:{arm}"]
            assert len(seeds) == len(SEEDS) and all((ln.get_alpha() or 1.0) < 0.5 for ln in seeds)
            (band,) = [c for c in ax.collections if isinstance(c, PolyCollection)
                       and c.get_gid() == f"mean-band:{arm}"]
            corners = {(round(float(x), 9), round(float(y), 9))
                       for x, y in np.asarray(band.get_paths()[0].vertices, dtype=float).tolist()}
            for step, values in stored.iterrows():
                lo, hi = t_interval(values.dropna().to_numpy())
                assert {(round(float(step), 9), round(float(lo), 9)),
                        (round(float(step), 9), round(float(hi), 9))} <= corners, (arm, step)


def test_the_arms_differ_where_the_script_made_them_differ(data: GridData) -> None:
    """A check on the figure's reading, not only its arithmetic: the gated arm's val_loss falls faster (gain
    1.0 takes step/100 off per scale unit) and the two arms start together."""
    fig = draw_curves(data, "val_loss")
    ax = next(ax for ax in fig.axes if ax.get_title() == "cell.scale=1.0")
    base, gated = (_xy(ax, f"mean:{arm}")[1] for arm in ARMS)
    assert base[0] == pytest.approx(gated[0]) and base[-1] - gated[-1] == pytest.approx(0.4, abs=1e-3)


# ---------------------------------------------------------------- report all
def test_report_all_has_the_comparison_and_the_curves_and_no_paper_tables(store: Any, tmp_path: Path) -> None:
    out = tmp_path / "r"
    res = _ask("all", "--out", str(out), store=store)
    assert res.exit_code == 0, res.output
    page = (out / "report.html").read_text()
    assert 'id="compare-section"' in page and html.escape("Every arm against baseline") in page
    assert "val_loss (lower is better)" in page and ">gated</td>" in page
    for stem in ("curve_val_loss", "curve_eval_acc_1"):
        assert f'<figure id="{stem}">' in page and f"{stem}.png; {stem}.pdf beside it" in page
    assert page.count("data:image/png;base64,") == 2
    assert "Table 1" not in page and 'id="tables"' not in page and 'id="scorecard-section"' not in page
    assert page.index('id="compare-section"') < page.index('id="figures"')
    assert sorted(p.name for p in out.iterdir()) == ["compare.csv", "compare.json", "compare.md",
                                                    "compare.tex", "figures", "report.html"]
    assert "| gated |" in (out / "compare.md").read_text()
