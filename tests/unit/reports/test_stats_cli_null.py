"""The null check through the command line: grids whose every arm is drawn from its baseline's distribution,
written as finished runs (``result.json``) and recorded by ``ablate run`` (nothing trains), then read by
``ablate report table1 --format csv`` and ``ablate report scorecard --format json``. The 95% intervals exclude
zero about 5% of the time, and after Holm almost nothing is marked significant or holds."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from ablate.cli import app

ARMS = ("baseline", "kv-heads-x2", "q-heads-x1.5", "sdpa-elementwise", "v-elementwise", "k-elementwise",
        "q-elementwise", "dense-output", "sdpa-headwise", "v-headwise", "sdpa-head-shared", "v-head-shared",
        "sdpa-additive-silu", "sdpa-elementwise-silu")
GRIDS, SEEDS = 8, 3
runner = CliRunner()


def _grid(name: str, lr: float) -> str:
    """A grid of every arm x seed; ``lr`` differs per grid so that its runs are its own (ids are content)."""
    return (f"name: {name}\nbase:\n  model: {{preset: tiny}}\n  train: "
            f"{{steps: 2, batch_size: 2, lr: {lr}}}\ngrid:\n  variant: [{', '.join(ARMS)}]\n  seed: "
            f"[{', '.join(map(str, range(SEEDS)))}]\n")


def _ablate(*args: str, home: Path):  # noqa: ANN202
    return runner.invoke(app, [*args, "--home", str(home)])


def _fill(path: Path, home: Path, rng: np.random.Generator) -> None:
    """Every planned run of the grid at ``path`` finished, with null-distributed metrics: one mean for all
    arms, a per-seed offset shared by the arms of a seed (what pairing cancels) and seed-to-seed noise."""
    from ablate.grid.expand import expand
    from ablate.grid.schema import load_grid
    from ablate.layout import run_dir
    from ablate.result import RunResult, write_result

    offsets = {s: rng.normal(0, 0.3, 3) for s in range(SEEDS)}
    for p in expand(load_grid(path)):
        o = offsets[p.config.seed]
        summary = {"steps": 2, "tokens": 64, "train_loss": 2.0, "loss_spikes": 0,
                   "val_ppl": 9.0 + o[0] + rng.normal(0, 0.2),
                   "f_attn": float(np.exp(-3 + o[1] + rng.normal(0, 0.2))),
                   "m_act": float(np.exp(5 + o[2] + rng.normal(0, 0.2)))}
        write_result(RunResult(run_id=p.run_id, config=p.config.model_dump(mode="json"), status="done",
                               summary=summary, metrics={"step": [0, 1], "loss": [3.0, 2.0]}),
                               run_dir(home, p.run_id))


def test_null_grids_through_the_cli_exclude_zero_at_most_7_percent(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    home, rng = tmp_path / "home", np.random.default_rng(22)
    excluded = compared = significant = holds = claims = 0
    for g in range(GRIDS):
        path = tmp_path / f"null{g}.yaml"
        path.write_text(_grid(f"null{g}", 1e-3 * (g + 1)))
        _fill(path, home, rng)
        ran = _ablate("run", str(path), "--no-mlflow", home=home)
        # read, not trained
        assert ran.exit_code == 0 and f"done │ {len(ARMS) * SEEDS:>8}" in ran.output, ran.output
        table = _ablate("report", "table1", "--grid", f"null{g}", "--format", "csv", home=home)
        assert table.exit_code == 0, table.output
        for row in csv.DictReader(io.StringIO(table.stdout)):
            if row["delta:val_ppl:lo"]:
                compared += 1
                excluded += not float(row["delta:val_ppl:lo"]) <= 0 <= float(row["delta:val_ppl:hi"])
                significant += row["delta:val_ppl:significant"] == "1"
        card = _ablate("report", "scorecard", "--grid", f"null{g}", "--format", "json", home=home)
        assert card.exit_code == 0, card.output
        for c in json.loads(card.stdout):
            if c["kind"] == "delta" and c["ci"] is not None:  # the claims whose null is "no difference"
                claims += 1
                line = 1.0 if c["scale"] == "ratio" else 0.0  # M-Act is read as a ratio, as compare does
                excluded += not c["ci"][0] <= line <= c["ci"][1]
                holds += c["verdict"] == "holds"
                compared += 1
    assert compared >= GRIDS * (len(ARMS) - 1)
    print(f"null check: {excluded}/{compared} intervals exclude 0; {significant} significant, {holds} hold")
    assert excluded / compared <= 0.07, (excluded, compared)
    assert significant + holds <= 0.05 * compared, (significant, holds)
    assert claims > 0
