"""Reports never pick a configuration silently (issue 14 item 8): a grid with smoke runs at train.steps=30
beside runs at train.steps=120 shows the configuration with the most finished runs, then the latest, says on
stderr in one line what it left out, and --where chooses."""

from __future__ import annotations

import math

import pytest
from store_data import Planned
from typer.testing import CliRunner

from ablate.cli import app
from ablate.config import RunConfig
from ablate.grid import run_id
from ablate.reports.configs import configuration_fields, one_configuration
from ablate.result import RunResult

runner = CliRunner()


def _add(store, steps: int, seeds: list[int], *, finished: str, ppl: float) -> list[str]:  # noqa: ANN001
    planned, results = [], []
    for variant, off in (("baseline", 0.0), ("sdpa-elementwise", -0.2)):
        for seed in seeds:
            config = RunConfig(variant=variant, seed=seed, train={"steps": steps})
            rid = run_id(config)
            planned.append(Planned(rid, config, 1000, 10 if variant != "baseline" else 0,
                                   {"variant": variant, "seed": seed}))
            v = ppl + off + 0.01 * seed
            results.append(RunResult(run_id=rid, config=config.model_dump(mode="json"), status="done",
                                     summary={"steps": steps, "val_ppl": v, "ppl/code": v,
                                              "train_loss": math.log(v)},
                                     metrics={"step": [0, 1], "loss": [3.0, 2.0]}, finished=finished))
    # as `ablate run --set` adds runs
    store.register_grid(name="g", text="name: g", runs=planned, whole=False)
    for r in results:
        store.ingest(r)
    return [p.run_id for p in planned]


def test_the_configuration_with_most_finished_runs_is_shown_and_the_rest_named(store, store_url: str) -> None:
    _add(store, 30, [0], finished="2025-01-02T10:00:00+00:00", ppl=9.0)  # smoke runs, and later
    _add(store, 120, [0, 1], finished="2025-01-01T10:00:00+00:00", ppl=6.0)
    out = runner.invoke(app, ["report", "table1", "--store", store_url])
    assert out.exit_code == 0, out.output
    (line,) = out.stderr.splitlines()
    assert line == ("warning: report of grid g: 2 run(s) at other configurations left out (train.steps=30 (2 "
                    "finished)); showing train.steps=120 (4 finished, the most); choose with --where, e.g. "
                    "--where \"train.steps == 30\"")
    assert "| Baseline |" in out.stdout and "6.00 ± 0.01" in out.stdout and "9.00" not in out.stdout
    chosen = runner.invoke(app, ["report", "table1", "--store", store_url, "--where", "train.steps == 30"])
    assert chosen.exit_code == 0 and chosen.stderr == "", chosen.output
    assert "9.00 (n=1)" in chosen.stdout and "6.00" not in chosen.stdout
    bad = runner.invoke(app, ["report", "table1", "--store", store_url, "--where", "train.stepz == 30"])
    assert bad.exit_code == 2 and "unknown column 'train.stepz'" in bad.stderr


def test_on_a_tie_the_latest_configuration_is_shown(store) -> None:
    _add(store, 30, [0, 1], finished="2025-01-01T10:00:00+00:00", ppl=9.0)
    _add(store, 120, [0, 1], finished="2025-03-01T10:00:00+00:00", ppl=6.0)
    runs = store.runs_frame(grid="g")
    assert configuration_fields(runs, store.grid_axes("g")) == ["train.steps"]
    kept, line = one_configuration(runs, store.grid_axes("g"), grid="g")
    assert set(kept["train.steps"]) == {120} and len(kept) == 4
    assert "showing train.steps=120 (4 finished, the most, then the latest)" in line


@pytest.mark.parametrize("axes", [["variant", "seed", "train.steps"], ["train.steps"]])
def test_a_field_the_grid_varies_is_not_a_configuration(store, axes: list[str]) -> None:
    _add(store, 30, [0], finished="2025-01-01T10:00:00+00:00", ppl=9.0)
    _add(store, 120, [0], finished="2025-01-01T10:00:00+00:00", ppl=6.0)
    runs = store.runs_frame(grid="g")
    kept, line = one_configuration(runs, axes)
    assert line is None and len(kept) == len(runs) == 4
