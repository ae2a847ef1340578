"""``ablate report ladder`` from a real store: a ladder grid's planned runs, results whose held-out loss
follows a known power law in their recorded FLOPs, and the report as JSON, CSV, markdown and a figure."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from ablate.cli import app
from ablate.grid import expand, parse_grid
from ablate.grid.ladder import planned_flops
from ablate.result import RunResult

GRID = """
name: lad
base: {model: {preset: tiny}, data: {seq_len: 64}, train: {batch_size: 8}}
ladder:
  sizes: [{d_model: 32, n_layers: 1}, {d_model: 32, n_layers: 2}, {d_model: 32, n_layers: 4}, tiny,
          {d_model: 96}]
  tokens_per_param: 2
grid: {variant: [baseline, sdpa-elementwise], seed: [0, 1, 2]}
"""
LAW = {"baseline": (1.0, 40.0, 0.1), "sdpa-elementwise": (1.0, 36.0, 0.1)}  # E, A, alpha: G1 wins by 10% of A


@pytest.fixture(scope="module")
def ladder_url(tmp_path_factory) -> str:
    from ablate.store import Store

    url = f"sqlite:///{tmp_path_factory.mktemp('ladder') / 'ablate.db'}"
    runs = expand(parse_grid(GRID))
    rng = np.random.default_rng(0)
    with Store.open(url) as store:
        store.register_grid(name="lad", text=GRID, runs=runs)
        for r in runs:
            flops = planned_flops(r.config)
            e, a, alpha = LAW[r.config.variant]
            loss = e + a * flops ** -alpha + rng.normal(0, 0.002)
            store.ingest(RunResult(run_id=r.run_id, config=r.config.model_dump(mode="json"), status="done",
                                   summary={"flops": flops, "steps": r.config.train.steps,
                                            "ppl/code": math.exp(loss - 0.2),
                                            "ppl/prose": math.exp(loss + 0.2)}))
    return url


def report(url: str, *args: str):
    return CliRunner().invoke(app, ["report", "ladder", "--grid", "lad", "--store", url, *args])


def test_the_paper_targets_are_refused_this_far_from_the_ladder(ladder_url: str) -> None:
    res = report(ladder_url, "--format", "json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert [t["name"] for t in out["targets"]] == ["1.7B dense, 400B tokens", "1.7B dense, 3.5T tokens",
                                                   "15B-A2.5B MoE, 3.5T tokens"]
    assert out["targets"][0]["flops"] == pytest.approx(4.5e21, rel=0.01)  # 11.27 GFLOPs/token x 400B
    for p in out["variants"]["sdpa-elementwise"]["predictions"]:
        assert p["loss"] is None and "x the largest rung's compute (the limit is 1e+03 x)" in p["refused"]


def test_json_has_fit_and_predictions_per_variant(ladder_url: str) -> None:
    res = report(ladder_url, "--format", "json", "--target", "1e12,1e13")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    base, gated = out["variants"]["baseline"], out["variants"]["sdpa-elementwise"]
    for v in (base, gated):
        assert v["fit"]["reliable"], v["fit"]["problems"]
        assert {"E", "A", "alpha"} <= set(v["fit"]) and v["fit"]["alpha"]["low"] <= v["fit"]["alpha"]["high"]
        assert v["fit"]["alpha"]["value"] == pytest.approx(0.1, abs=0.03)
        assert len(v["rungs"]) == 5 and v["n_runs"] == 15 and v["seeds"] == [0, 1, 2]
    for p in gated["predictions"]:
        assert set(p) >= {"target", "flops", "loss", "low", "high", "delta"}
        assert p["low"] <= p["loss"] <= p["high"]
        assert set(p["delta"]) == {"value", "low", "high", "resolved"} and p["delta"]["value"] < 0


def test_targets_given_as_flops_and_csv(ladder_url: str) -> None:
    res = report(ladder_url, "--format", "csv", "--target", "1e12,1e17")
    assert res.exit_code == 0, res.output
    lines = res.stdout.strip().splitlines()
    assert lines[0].startswith("series,variant,target,flops,loss,low,high,delta,delta_low,delta_high")
    assert len(lines) == 1 + 2 * 2 and "1.00e+17 FLOPs" in lines[-1]
    near, far = (dict(zip(lines[0].split(","), line.split(","), strict=True)) for line in lines[3:5])
    assert float(near["loss"]) > 1.0 and float(near["delta"]) < 0 and near["reliable"] == "True"
    assert far["loss"] == "" and far["delta"] == ""  # refused: 1e6 x past the ladder


def test_markdown_and_figure_in_a_directory(ladder_url: str, tmp_path: Path) -> None:
    res = report(ladder_url, "--out", str(tmp_path / "rep"))
    assert res.exit_code == 0, res.output
    text = (tmp_path / "rep" / "ladder.md").read_text()
    assert "L(C) = E + A·C^(-alpha)" in text and "| baseline | 15 | 5 | 3 |" in text
    assert (
        "1.7B dense, 3.5T tokens" in text and "L4·d32" in text and "none: 6.4e+09 x the largest rung" in text
    )
    png = (tmp_path / "rep" / "ladder.png").read_bytes()
    assert png.startswith(b"\x89PNG") and 5_000 < len(png) < 400_000


@pytest.mark.parametrize(("args", "message"), [
    (["--format", "latex"], "unknown format for the ladder report 'latex'"),
    (["--target", "1e21,big"],
     "--target: expected 'paper' or compute budgets in FLOPs like '1e21,3e22', got 'big'"),
], ids=["format", "target"])
def test_bad_options_get_one_line_and_exit_2(ladder_url: str, args: list[str], message: str) -> None:
    res = report(ladder_url, *args)
    assert res.exit_code == 2 and message in res.output and len(res.output.strip().splitlines()) == 1


def test_flops_at_paper_scale_round_trip_through_the_store(store) -> None:
    """A 1.7B run's compute (4.5e21: past int64) goes into each backend and back as the same number."""
    (run,) = expand(parse_grid("name: big\nbase: {model: {preset: paper-dense-1.7b}, train: {steps: 95367, "
                               "batch_size: 1024}, data: {seq_len: 4096}}"))
    flops = planned_flops(run.config)
    assert flops == pytest.approx(4.5e21, rel=0.01) and flops > 2**63
    store.register_grid(name="big", text="name: big", runs=[run])
    store.ingest(RunResult(run_id=run.run_id, config=run.config.model_dump(mode="json"), status="done",
                           summary={"flops": float(flops), "ppl/test": 20.0}))
    assert store.runs_frame(grid="big")["flops"].iloc[0] == float(flops)
