"""The catalogue: every variant trains a step on its tiny preset, is causal, and the rows of the paper are
covered."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from typer.testing import CliRunner

from ablate.ablations import VARIANTS, ModelConfig, apply_variant, build_model
from ablate.ablations.gates import NoGate
from ablate.errors import ConfigError

REQUIRED_ROWS = (
    [f"table1:{r}" for r in range(1, 16)]
    + [f"table3:{r}" for r in range(1, 8)]
    + [f"table4:{r}" for r in range(1, 8)]
    + [f"table6:{r}" for r in range(1, 7)]
    + ["table2:7"]
)


def tiny_for(name: str) -> ModelConfig:
    return apply_variant(ModelConfig(preset="tiny-moe" if VARIANTS[name].requires_moe else "tiny"), name)


@pytest.mark.parametrize("name", list(VARIANTS), ids=list(VARIANTS))
def test_variant_forward_backward_and_causal(name: str) -> None:
    torch.manual_seed(0)
    cfg = tiny_for(name)
    model = build_model(cfg)
    idx = torch.randint(0, cfg.vocab_size, (2, 12))
    out = model(idx)
    assert out.logits.shape == (2, 12, cfg.vocab_size)
    assert out.aux_loss.shape == ()
    loss = torch.nn.functional.cross_entropy(out.logits.flatten(0, 1), idx.flatten()) + out.aux_loss
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    # every parameter the variant adds takes part in the loss
    assert sum(int(g.abs().sum() > 0) for g in grads) == len(grads)
    # causality: changing token 7 leaves every earlier logit untouched
    with torch.no_grad():
        changed = idx.clone()
        changed[:, 7] = (changed[:, 7] + 1) % cfg.vocab_size
        a, b = model(idx).logits, model(changed).logits
    assert torch.allclose(a[:, :7], b[:, :7], atol=1e-6)
    assert not torch.allclose(a[:, 7:], b[:, 7:])


def test_catalogue_covers_the_paper_rows_once() -> None:
    refs = [ref for v in VARIANTS.values() for ref in v.paper]
    assert len(VARIANTS) >= 30
    assert sorted(set(REQUIRED_ROWS) - set(refs)) == []
    assert len(refs) == len(set(refs)), "a paper row is claimed by two variants"
    for v in VARIANTS.values():
        assert v.description and v.act_func and v.score_shape
        assert all(ref.startswith("table") and ref.split(":")[1].isdigit() for ref in v.paper)


def test_baseline_is_all_identity() -> None:
    attn = build_model(ModelConfig(preset="tiny")).blocks[0].attn
    for slot in (attn.gate_q, attn.gate_k, attn.gate_v, attn.gate_sdpa, attn.gate_out):
        assert isinstance(slot, NoGate)
    assert isinstance(attn.sdpa_post, torch.nn.Identity)


def test_relative_changes_follow_the_preset() -> None:
    assert apply_variant(ModelConfig(preset="paper-moe-15a2b"), "kv-heads-x2").n_kv_heads == 8
    assert apply_variant(ModelConfig(preset="paper-moe-15a2b"), "q-heads-x1.5").n_heads == 48
    moe = apply_variant(ModelConfig(preset="paper-moe-15a2b"), "add-4-experts")
    assert (moe.n_experts, moe.moe_top_k) == (132, 12)
    with pytest.raises(ConfigError, match=r"model.n_heads.*x1.5 on n_heads=5 gives 7.5"):
        apply_variant(ModelConfig(preset="tiny", n_heads=5, n_kv_heads=1), "q-heads-x1.5")


def test_moe_only_variant_on_dense_preset_is_a_clear_error() -> None:
    with pytest.raises(
        ConfigError, match=r"variant: variant 'add-4-experts' needs a mixture-of-experts model.*'tiny-moe'"
    ):
        apply_variant(ModelConfig(preset="tiny"), "add-4-experts")


def test_unknown_variant_names_a_near_match() -> None:
    with pytest.raises(ConfigError,
                       match=r"unknown variant 'sdpa-elementwize' \(did you mean 'sdpa-elementwise'\?\)"):
        apply_variant(ModelConfig(), "sdpa-elementwize")


def test_cli_variants_json_covers_every_required_row() -> None:
    from ablate.cli import app

    result = CliRunner().invoke(app, ["variants", "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [r["name"] for r in rows] == list(VARIANTS)
    covered = {ref for r in rows for ref in r["paper"]}
    assert set(REQUIRED_ROWS) <= covered
    by_name = {r["name"]: r for r in rows}
    assert by_name["kv-heads-x2"]["changes"] == {"n_kv_heads": "x2"}
    assert by_name["sdpa-headwise"]["score_shape"] == "n x q"


def test_cli_variants_table_and_bad_format() -> None:
    from ablate.cli import app

    runner = CliRunner()
    table = runner.invoke(app, ["variants"])  # piped: wrapped to 100 columns, nothing cut
    assert table.exit_code == 0 and "sdpa-elementwise" in table.output and "table1:5" in table.output
    assert max(len(line) for line in table.stdout.splitlines()) <= 100 and "…" not in table.stdout
    lines = table.stdout.splitlines()
    start = next(line for line in lines if "description" in line).index("description")
    column = " ".join(" ".join(line[start:].split()) for line in lines[4:])  # the descriptions, unwrapped
    for row in json.loads(runner.invoke(app, ["variants", "--format", "json"]).stdout):
        assert row["name"] in table.stdout.split()
        assert " ".join(row["description"].split()) in column  # every word, in order
    assert "Miller 2023" in table.stdout  # an arm from another paper: its source where paper rows would be
    wide = runner.invoke(app, ["variants", "--wide", "--preset", "tiny"])
    assert wide.exit_code == 0 and "score shape" in wide.stdout and "added @ tiny" in wide.stdout
    assert any(len(line) > 200 for line in wide.stdout.splitlines())  # one line a variant, whole
    bad = runner.invoke(app, ["variants", "--format", "xml"])
    assert bad.exit_code == 2
    assert "unknown format 'xml'" in bad.output


def test_catalogue_import_stays_torch_free() -> None:
    code = "import sys, ablate.ablations, ablate.ablations.variants; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_variants_wide_names_the_reference_code_each_arm_equals() -> None:
    from ablate.cli import app

    runner = CliRunner()
    rows = {r["name"]: r for r in json.loads(runner.invoke(app, ["variants", "--format", "json"]).stdout)}
    wide = runner.invoke(app, ["variants", "--wide"], env={"COLUMNS": "1000"})
    assert wide.exit_code == 0, wide.output
    lines = {line.split("│")[1].strip(): line for line in wide.stdout.splitlines() if line.count("│") > 2}
    referenced = [name for name, v in VARIANTS.items() if v.reference is not None]
    arms = {"diff-attention", "diff-v2", "forgetting-pro", "selective-attention", "sdpa-headwise-sparse"}
    assert arms <= set(referenced)
    for name in referenced:
        ref = VARIANTS[name].reference
        assert rows[name]["reference"]["pin"] == str(ref)
        assert rows[name]["revision"] == VARIANTS[name].revision
        assert str(ref) in lines[name]
        if ref.commit:  # a file of a repository at a commit: 40 hex digits, shown as 12
            assert len(ref.commit) == 40 and f"{ref.repo}@{ref.commit[:12]}:{ref.path}" in lines[name]


def test_a_revised_arm_gets_new_run_ids_and_its_old_runs_read_as_stale(tmp_path, tmp_home) -> None:
    """An arm whose computation changed (``revision`` 2) plans under new ids, while every arm still at its
    first revision keeps its ids; a store's run of the arm from before reads as stale in ``ablate plan``."""
    from dataclasses import replace

    from ablate.cli import app
    from ablate.grid import expand, identity, load_grid
    from ablate.grid.ids import run_id
    from ablate.grid.stems import stem_id
    from ablate.store import Store

    revised = {n for n, v in VARIANTS.items() if v.revision > 1}
    assert revised == {"diff-attention", "diff-attention-matched", "sdpa-headwise-sparse", "softpick"}
    grid = tmp_path / "g.yaml"
    grid.write_text("name: g\nbase:\n  model: {preset: tiny}\n"
                    "grid:\n  variant: [baseline, sdpa-elementwise, diff-attention, softpick]\n  seed: [0]\n")
    runs = {r.config.variant: r for r in expand(load_grid(grid))}
    for name, run in runs.items():
        # as the arm was planned before its revision: the same config, the revision left out
        before = run.config.model_copy(update={"variant_revision": None})
        assert run.config.variant_revision == (VARIANTS[name].revision if name in revised else None)
        assert (run.run_id == run_id(before)) == (name not in revised)
        assert run.stem_id == stem_id(before) == stem_id(identity.strip(run.config))
    new = runs["diff-attention"]
    before = new.config.model_copy(update={"variant_revision": None})
    old = replace(new, config=before, run_id=run_id(before))
    with Store.open(f"sqlite:///{tmp_home / 'ablate.db'}") as store:
        store.register_grid(name="g", text=grid.read_text(), runs=[old])
    out = CliRunner().invoke(app, ["plan", str(grid), "--format", "json"])
    assert out.exit_code == 0, out.output
    status = {r["variant"]: r["status"] for r in json.loads(out.stdout)["runs"]}
    assert status["diff-attention"] == f"stale: variant_revision changed since run {old.run_id}"
    assert status["baseline"] == status["softpick"] == "new"
