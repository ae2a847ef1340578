"""``ablate export RUN_ID --format hf``: a run directory's checkpoint as a Qwen3 folder that transformers loads with
the same logits; a gated variant is refused with exit 2. (Interop, beside the lm-eval adapter's tests.)"""

from __future__ import annotations

import pytest
import torch
from typer.testing import CliRunner

from ablate.ablations import apply_variant, build_model
from ablate.cli import app
from ablate.config import RunConfig


def _fake_run(home, run_id: str, variant: str) -> torch.nn.Module:
    """A run directory laid out as the runner leaves it: ``checkpoints/last.ckpt`` with ``model.``-prefixed weights
    and the resolved run config."""
    config = RunConfig(model={"preset": "tiny"}, variant=variant)
    torch.manual_seed(0)
    model = build_model(apply_variant(config.model, config.variant)).eval()
    ckpt = home / "runs" / run_id / "checkpoints" / "last.ckpt"
    ckpt.parent.mkdir(parents=True)
    torch.save({"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
                "run_config": config.model_dump(mode="json")}, ckpt)
    return model


def test_export_baseline_loads_in_transformers(tmp_path):
    model = _fake_run(tmp_path, "abc123", "baseline")
    out = tmp_path / "hf"
    res = CliRunner().invoke(app, ["export", "abc123", "--format", "hf", "--out", str(out), "--home", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "exported abc123 (hf)" in res.output and "no tokenizer written: 'byte'" in res.output
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(out).eval()
    idx = torch.randint(0, 257, (2, 24))
    with torch.no_grad():
        torch.testing.assert_close(hf(idx).logits, model(idx).logits, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("args,match", [
    (["export", "zzz", "--out", "x"], "no run 'zzz'"),
    (["export", "gated", "--out", "x", "--format", "gguf"], "unknown export format 'gguf'; allowed: hf"),
    (["export", "gated", "--out", "x"], "cannot express"),
], ids=["unknown-run", "unknown-format", "gated-variant"])
def test_export_refusals(tmp_path, args, match):
    _fake_run(tmp_path, "gated", "sdpa-elementwise")
    res = CliRunner().invoke(app, [*args[:3], str(tmp_path / args[3]), *args[4:], "--home", str(tmp_path)])
    assert res.exit_code == 2
    assert match in " ".join(res.output.split())
