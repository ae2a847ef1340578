"""Interop: the tiny baseline family round-trips through transformers' Qwen3ForCausalLM."""

from __future__ import annotations

import json

import pytest
import torch

from ablate.ablations import ModelConfig, apply_variant, build_model, export_hf
from ablate.errors import ConfigError


@pytest.mark.parametrize("name,tie", [("baseline", True), ("kv-heads-x2", False)], ids=["baseline", "kv-heads-x2-untied"])
def test_export_round_trip_logits_agree(tmp_path, monkeypatch, name: str, tie: bool) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    cfg = apply_variant(ModelConfig(preset="tiny", tie_embeddings=tie), name)
    model = build_model(cfg).eval()
    export_hf(model, cfg, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["architectures"] == ["Qwen3ForCausalLM"] and config["num_key_value_heads"] == cfg.n_kv_heads
    hf = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    idx = torch.randint(0, cfg.vocab_size, (2, 20))
    with torch.no_grad():
        assert (hf(idx).logits - model(idx).logits).abs().max().item() < 1e-4


@pytest.mark.parametrize("name,field", [("sdpa-elementwise", "gate"), ("sandwich-norm", "sandwich_norm"),
                                        ("switch-v-4top4", "switch")])
def test_gated_variants_refuse_to_export(tmp_path, name: str, field: str) -> None:
    cfg = apply_variant(ModelConfig(preset="tiny"), name)
    with pytest.raises(ConfigError, match=rf"model.{field}: transformers' Qwen3ForCausalLM cannot express {field}="):
        export_hf(build_model(cfg), cfg, tmp_path)
    assert not (tmp_path / "config.json").exists()
