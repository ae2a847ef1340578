"""The shipped example grid (examples/own-trainer: a script of ours) and the grid over a public training
script nobody here wrote (tests/fixtures/public/word_language_model: pytorch/examples, vendored unchanged),
each run end to end through the CLI: every stored value is what the script printed, read back from its log
with the grid's own pattern, and compare's paired delta is the arithmetic on the stored values."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ablate.cli import app
from ablate.store import Store
from ablate.trainers.command.grid import load_command_grid

ROOT = Path(__file__).resolve().parents[3]
GRIDS = {"own-trainer": (ROOT / "examples" / "own-trainer" / "grid.yaml", "gated"),
         "word-language-model": (ROOT / "tests" / "fixtures" / "public" / "word_language_model" / "grid.yaml",
                                 "gru")}


@pytest.mark.parametrize("name", list(GRIDS))
def test_a_real_script_runs_end_to_end_and_its_values_are_what_it_printed(tmp_path, monkeypatch, name):
    path, arm = GRIDS[name]
    # the grids run `python ...`: this environment's, which has torch
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    home = tmp_path / "home"
    out = CliRunner().invoke(app, ["run", str(path), "--home", str(home), "--jobs", "2", "--no-mlflow"])
    assert out.exit_code == 0, out.output
    spec = load_command_grid(path).spec
    pattern = re.compile(str(spec.metrics.pattern))
    objective = spec.objective.metric
    reduce = spec.summary_of(objective)
    with Store.open(home=home) as store:
        runs = store.runs_frame(grid=name).set_index("run_id")
    assert len(runs) == 6 and set(runs["status"]) == {"done"}
    for run_id, row in runs.iterrows():
        log = (home / "runs" / str(run_id) / "train.log").read_text()
        printed = [float(m[objective]) for m in (pattern.search(line) for line in log.splitlines())
                   if m is not None and m[objective] is not None]
        expected = printed[-1] if reduce == "last" else min(printed) if reduce == "min" else max(printed)
        assert printed and row[objective] == expected, (run_id, printed)
    compare = CliRunner().invoke(app, ["report", "compare", "--home", str(home), "--format", "json"])
    assert compare.exit_code == 0, compare.output
    (row,) = json.loads(compare.stdout)["comparisons"]  # stderr may say it is unresolved
    assert (row["arm"], row["metric"], row["n"]) == (arm, objective, 3)
    by = {(r["variant"], int(r["seed"])): float(r[objective]) for _, r in runs.iterrows()}
    seeds = sorted({s for _, s in by})
    deltas = [by[(arm, s)] - by[("baseline", s)] for s in seeds]
    assert row["delta"] == pytest.approx(sum(deltas) / len(deltas), abs=1e-12)
    assert not any(path.parent.glob("*.pt")) and not (path.parent / "__pycache__").exists()  # nothing left
