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
