"""``ablate plan`` of a large command grid, its work counted (tests/work_counts.py), never timed: a count is
the same on every machine at any load. bench/command_plan.py times the same plan (issue #44: < 3 s for
10,000 runs).

Planning 10,000 runs (2 arms x 50 learning rates x 100 seeds) against 1,000 (10 seeds): the grid file is
read once, the code's identity is taken once, the disk checks (``render.check``: cwd, the program, the
placeholders) run once per cell, not per run, and a run costs its two hashes (its id and its stem), its
planned config (built, never validated) and, as JSON, one dump of it. Against a store that holds the grid, the
statement count grows by a few per ``IN_CHUNK`` run ids, never by some per run.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from typer.testing import CliRunner
from work_counts import Work, counting

import ablate.grid.command_planning as command_planning
import ablate.grid.planning as planning
import ablate.trainers.command.identity as identity
from ablate.cli import app
from ablate.store import Store
from ablate.store.chunks import IN_CHUNK
from ablate.trainers.command.config import CommandConfig
from ablate.trainers.command.spec import CommandSpec

ARMS, LRS = 2, 50
CELLS = ARMS * LRS


def grid_text(seeds: int) -> str:
    lrs = ", ".join(f"{(i + 1) * 1e-5:.6g}" for i in range(LRS))
    return f"""name: counted
trainer:
  command: {sys.executable} train.py --out_dir={{run_dir}} {{args}}
  metrics: {{stdout: 'step (?P<step>\\d+): val (?P<val_loss>[\\d.]+)'}}
  objective: {{metric: val_loss, better: lower}}
base: {{max_iters: 2000, n_layer: 4, optim: {{wd: 0.1, betas: [0.9, 0.95]}}}}
grid:
  arm: {{baseline: {{}}, gated: {{gate: true, gate_init: 0.5}}}}
  optim.lr: [{lrs}]
  seed: [{", ".join(str(s) for s in range(seeds))}]
"""


class _Calls:
    """A pydantic validator or serializer that counts the calls made through it (as work_counts does for
    ablate's own config models)."""

    def __init__(self, inner: Any, work: Work, label: str):
        self._inner, self._work, self._label = inner, work, label

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            self._work[self._label] += 1
            return attr(*args, **kwargs)

        return call


def _count_models(work: Work, monkeypatch: pytest.MonkeyPatch, *models: type[BaseModel]) -> None:
    for model in models:
        monkeypatch.setattr(model, "__pydantic_validator__",
                            _Calls(model.__pydantic_validator__, work, f"validate {model.__name__}"))
        monkeypatch.setattr(model, "__pydantic_serializer__",
                            _Calls(model.__pydantic_serializer__, work, f"dump {model.__name__}"))


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """The grid files' folder, with the script they run (outside git: the code's identity hashes it)."""
    (tmp_path / "train.py").write_text("print('step 1: val 2.0')\n")
    for seeds in (10, 100):
        (tmp_path / f"g{seeds}.yaml").write_text(grid_text(seeds))
    return tmp_path


def _plan(path: Path, home: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[Work, str]:
    with counting() as work, monkeypatch.context() as mp:
        _count_models(work, mp, CommandConfig, CommandSpec)
        for name in ("load_command_grid", "code_identity", "check", "expand_command_grid", "_planned"):
            work.spy(command_planning, name)
        work.spy(identity, "digest")
        out = CliRunner().invoke(app, ["plan", str(path), "--home", str(home), *args])
    assert out.exit_code == 0, out.output
    return work, out.stdout


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_planning_ten_times_the_runs_only_hashes_and_builds_more(folder: Path,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  fmt: str) -> None:
    _plan(folder / "g10.yaml", folder / "home", monkeypatch, "--format", fmt)  # what a process does once
    one, _ = _plan(folder / "g10.yaml", folder / "home", monkeypatch, "--format", fmt)
    ten, shown = _plan(folder / "g100.yaml", folder / "home", monkeypatch, "--format", fmt)
    added = 10_000 - 1_000
    assert (shown.count('"run_id"') if fmt == "json" else shown.count(" new")) == 10_000
    grown = {k: n for k, n in ten.grown(one).items() if n}
    dumps = {"dump CommandConfig": added} if fmt == "json" else {}  # each run's config in the JSON
    assert grown == {"digest": 2 * added, "_planned": added, **dumps}
    assert (ten["load_command_grid"], ten["code_identity"], ten["expand_command_grid"]) == (1, 1, 1)
    assert ten["check"] == CELLS  # once per cell, whatever the seeds
    assert ten["validate CommandConfig"] == 0 and ten["validate CommandSpec"] == 1  # the file's trainer, once
    assert ten["sql"] == 0  # no store in this home yet: plan opens none, and makes none
    assert not (folder / "home").exists()


def _registered(folder: Path, seeds: int) -> Path:
    """A home whose store holds the grid of ``seeds`` seeds, one run in a hundred done."""
    from ablate.result import RunResult
    from ablate.runner.fingerprints import Fingerprints

    home = folder / f"home{seeds}"
    path = folder / f"g{seeds}.yaml"
    planned = planning.plan_grid(path, fingerprints=Fingerprints.for_home(home)).planned
    with Store.open(home=home) as store:
        store.register_grid(name="counted", text=path.read_text(), runs=planned)
        for run in planned[::100]:
            store.ingest(RunResult(run_id=run.run_id, config=run.config.model_dump(mode="json"),
                                   status="done", summary={"steps": 1, "val_loss": 2.0}))
    return home


def test_planning_against_a_store_sends_a_few_statements_per_chunk(folder: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    counts: dict[int, tuple[int, int]] = {}
    for seeds in (10, 100):
        home = _registered(folder, seeds)
        work, shown = _plan(folder / f"g{seeds}.yaml", home, monkeypatch, "--format", "json")
        runs = seeds * CELLS
        assert shown.count('"status": "done"') == runs // 100
        counts[runs] = (work["sql"], math.ceil(runs / IN_CHUNK))
        # the code changed (the script's hash is its identity here): every run is new, said per run, and
        # the store is asked for their stems by chunks too
        (folder / "train.py").write_text("print('step 1: val 1.0')\n")
        changed, shown = _plan(folder / f"g{seeds}.yaml", home, monkeypatch, "--format", "json")
        (folder / "train.py").write_text("print('step 1: val 2.0')\n")
        assert shown.count("new: the code changed since run") == runs
        assert changed["validate CommandConfig"] == 0
        counts[-runs] = (changed["sql"], math.ceil(runs / IN_CHUNK))
    for small, large in ((1_000, 10_000), (-1_000, -10_000)):
        (sql_small, chunks_small), (sql_large, chunks_large) = counts[small], counts[large]
        assert 0 < sql_small and sql_large - sql_small <= 3 * (chunks_large - chunks_small), counts
