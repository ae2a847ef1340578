"""Scaling ladders in a grid file: rungs x the other axes, steps from the token budget, matching per rung, the
plan's tokens and FLOPs, and one line with exit status 2 for a bad ladder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ablate.ablations import apply_variant, count_params
from ablate.ablations.flops import flops_per_token
from ablate.cli import app
from ablate.errors import ConfigError
from ablate.grid import expand, parse_grid

LADDER = """
name: lad
base:
  model: {preset: tiny}
  data: {seq_len: 64}
  train: {batch_size: 8, lr: 1.0e-3}
ladder:
  sizes: [tiny, {d_model: 96, n_layers: 3}, {preset: small, n_layers: 2}]
  tokens_per_param: 4
grid:
  variant: [baseline, sdpa-elementwise]
  seed: [0, 1]
match_params: baseline
"""


def test_rungs_times_axes_with_steps_from_the_budget() -> None:
    runs = expand(parse_grid(LADDER))
    assert len(runs) == 3 * 2 * 2
    shapes = [(r.config.model.n_layers, r.config.model.d_model) for r in runs]
    assert shapes == [(2, 64)] * 4 + [(3, 96)] * 4 + [(2, 256)] * 4  # the ladder varies slowest
    assert [(r.config.variant, r.config.seed) for r in runs[:4]] == [
        ("baseline", 0), ("baseline", 1), ("sdpa-elementwise", 0), ("sdpa-elementwise", 1)]
    for i in range(0, 12, 4):  # the budget is the rung's own model's (the baseline's, before matching)
        n = count_params(runs[i].config.model).non_embedding
        # every variant of a rung reads the same batches: equal steps, compute differs only by the gate
        assert {r.config.train.steps for r in runs[i:i + 4]} == {round(4 * n / (8 * 64))}


def test_a_rung_sets_the_shape_and_keeps_the_vocabulary() -> None:
    runs = expand(parse_grid(LADDER))
    wide = runs[4].config.model  # {d_model: 96, n_layers: 3}: heads, kv heads, FFN follow the width
    assert (wide.head_dim, wide.n_heads, wide.n_kv_heads, wide.ffn_dim) == (16, 6, 3, 288)
    small = runs[8].config.model  # the small preset's shape, the base's vocabulary (not small's 512)
    assert (small.preset, small.d_model, small.head_dim, small.n_layers, small.vocab_size) == ("small", 256,
                                                                                               32, 2, 320)


def test_match_params_works_per_rung() -> None:
    runs = expand(parse_grid(LADDER))
    for i in range(0, 12, 4):
        base, gated = runs[i], runs[i + 2]
        # the gate's weights came out of the FFN
        assert gated.config.model.ffn_dim < base.config.model.ffn_dim
        assert abs(gated.params - base.params) / base.params < 0.01
        assert count_params(apply_variant(gated.config.model, "sdpa-elementwise")).total == gated.params


def test_plan_shows_each_rung_tokens_and_flops(tmp_path: Path) -> None:
    grid = tmp_path / "lad.yaml"
    grid.write_text(LADDER)
    result = CliRunner().invoke(app, ["plan", str(grid), "--format", "json", "--home", str(tmp_path)])
    assert result.exit_code == 0, result.output
    runs = json.loads(result.stdout)["runs"]
    for r, planned in zip(runs, expand(parse_grid(LADDER)), strict=True):
        tokens = r["config"]["train"]["steps"] * 8 * 64
        model = apply_variant(planned.config.model, r["variant"])
        assert r["tokens"] == tokens and r["flops"] == tokens * flops_per_token(model, 64)
    assert runs[0]["flops"] < runs[4]["flops"] < runs[8]["flops"]
    table = CliRunner().invoke(app, ["plan", str(grid), "--home", str(tmp_path)])
    header = next(line for line in table.stdout.splitlines() if "run id" in line)
    for column in ("rung", "tokens", "FLOPs", "vs baseline"):
        assert column in header
    assert "L3·d96" in table.stdout and "model.d_model" not in header


@pytest.mark.parametrize(("edit", "message"), [
    ({"sizes": []}, r"ladder\.sizes: a ladder needs at least one size"),
    ({"sizes": ["tiny", "medium"]}, r"ladder\.sizes\[1\]: unknown preset 'medium'.*allowed: .*small"),
    ({"sizes": [{"preset": "smal"}]}, r"unknown preset 'smal' \(did you mean 'small'\?\)"),
    ({"sizes": [{"width": 96}]},
     r"ladder\.sizes\[0\]: unknown size field 'width'.*allowed: preset, n_layers, d_model"),
    ({"tokens_per_param": 0.001}, r"ladder: tokens_per_param 0.001 gives .* zero steps"),
    ({"tokens_per_param": 0}, r"ladder\.tokens_per_param: Input should be greater than 0"),
    ({"sizes": [{"d_model": 100}]}, r"ladder\.sizes\[0\]: d_model 100 is not a multiple of head_dim 16"),
],
ids=["empty", "unknown-preset", "misspelt-preset", "unknown-field", "zero-steps", "zero-budget", "bad-width"])
def test_bad_ladders_get_one_line_and_exit_2(tmp_path: Path, edit: dict, message: str) -> None:
    import yaml

    doc = yaml.safe_load(LADDER)
    doc["ladder"] = {**doc["ladder"], **edit}
    grid = tmp_path / "bad.yaml"
    grid.write_text(yaml.safe_dump(doc))
    result = CliRunner().invoke(app, ["plan", str(grid), "--home", str(tmp_path)])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output
    assert lines[0].count(str(grid)) == 1
    with pytest.raises(ConfigError, match=message):
        expand(parse_grid(yaml.safe_dump(doc), source=str(grid)))


@pytest.mark.parametrize(("text", "message"), [
    ("base: {train: {steps: 5}}",
     r"ladder: train\.steps follows from the ladder's budget.*remove it from base"),
    ("grid: {model.d_model: [64, 128]}", r"ladder: 'model\.d_model' is set by each rung"),
    ("include: [{variant: sdpa-headwise}]", r"ladder: include entries cannot be combined with a ladder"),
], ids=["steps-in-base", "shape-axis", "include"])
def test_what_a_ladder_cannot_be_combined_with(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_grid(f"name: x\n{text}\nladder: {{sizes: [tiny], tokens_per_param: 20}}")
    with pytest.raises(ConfigError, match=r"remove it from --set"):
        parse_grid("name: x\nladder: {sizes: [tiny], tokens_per_param: 20}", sets=["train.steps=3"])
