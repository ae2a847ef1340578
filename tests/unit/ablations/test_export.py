"""Interop: every variant of the catalogue either loads in transformers with the same logits (Qwen3,
Qwen3-MoE, Qwen3-Next for the G1 gate) or is refused with the field no transformers class can express. Weights
are drawn at O(1) scale (tests/export_runs.py), tolerance 1e-4 in fp32."""

from __future__ import annotations

import json

import pytest
import torch
from export_runs import o1_weights

from ablate.ablations import VARIANTS, ModelConfig, apply_variant, build_model
from ablate.ablations.export import export_hf, hf_target, hf_unsupported
from ablate.errors import ConfigError

# variant -> the transformers class it exports to; every other variant of the catalogue is refused
EXPORTS = {
    "baseline": "Qwen3ForCausalLM", "kv-heads-x2": "Qwen3ForCausalLM", "q-heads-x1.5": "Qwen3ForCausalLM",
    "add-4-experts": "Qwen3MoeForCausalLM",
    "sdpa-elementwise": "Qwen3NextForCausalLM", "sdpa-headwise": "Qwen3NextForCausalLM",
    "sdpa-head-shared": "Qwen3NextForCausalLM",
}


def _preset(name: str) -> str:
    return "tiny-moe" if VARIANTS[name].requires_moe else "tiny"


def _round_trip(cfg: ModelConfig, out, seed: int = 0) -> tuple[torch.nn.Module, float]:
    """Export an O(1)-weight model of ``cfg`` into ``out``; the max |logit difference| after loading it
    back."""
    from transformers import AutoModelForCausalLM

    model = o1_weights(build_model(cfg), seed)
    export_hf(model, cfg, out)
    hf = AutoModelForCausalLM.from_pretrained(out).eval()
    idx = torch.randint(0, cfg.vocab_size, (2, 24), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        ours = model(idx).logits
        assert ours.abs().max() > 1.0  # O(1) logits: a mapping error would show
        return hf, (hf(idx).logits - ours).abs().max().item()


@pytest.mark.parametrize("name", sorted(VARIANTS), ids=sorted(VARIANTS))
def test_every_variant_exports_with_equal_logits_or_is_refused(tmp_path, monkeypatch, name: str) -> None:
    cfg = apply_variant(ModelConfig(preset=_preset(name)), name)
    if name not in EXPORTS:
        with pytest.raises(ConfigError,
                           match=r"^model\.[a-z_.]+: cannot export [a-z_.]+=.+ to Hugging Face: "):
            export_hf(build_model(cfg), cfg, tmp_path / "out")
        assert not (tmp_path / "out").exists() and hf_unsupported(cfg)
        return
    hf, diff = _round_trip(cfg, tmp_path)
    assert type(hf).__name__ == EXPORTS[name] == hf_target(cfg) and not hf_unsupported(cfg)
    assert diff < 1e-4


@pytest.mark.parametrize("preset,name,extra", [
    ("tiny", "sdpa-elementwise", {"tie_embeddings": False}), ("tiny-moe", "baseline", {}),
    ("tiny-moe", "sdpa-elementwise", {}), ("tiny-moe", "sdpa-headwise", {"tie_embeddings": False}),
    ("tiny", "sdpa-elementwise", {"rope_yarn_factor": 4.0, "rope_yarn_original_len": 8}),
], ids=["dense-g1-untied", "moe-baseline", "moe-g1-elementwise", "moe-g1-headwise-untied", "dense-g1-yarn"])
def test_moe_untied_and_yarn_round_trip(tmp_path, preset: str, name: str, extra: dict) -> None:
    cfg = apply_variant(ModelConfig(preset=preset, **extra), name)
    hf, diff = _round_trip(cfg, tmp_path, seed=1)
    assert diff < 1e-4
    assert type(hf).__name__ == ("Qwen3MoeForCausalLM" if name == "baseline" else "Qwen3NextForCausalLM")


@pytest.mark.parametrize("name", ["sdpa-elementwise", "sdpa-headwise"])
def test_qwen3_next_layout(tmp_path, name: str) -> None:
    """The folder's layout, tensor by tensor: q_proj per head [q_h ; g_h] (headwise rows repeated), norms w -
    1, every layer full attention, partial_rotary_factor 1.0, a dense MLP everywhere."""
    from safetensors.torch import load_file

    cfg = apply_variant(ModelConfig(preset="tiny"), name)
    unfused = o1_weights(build_model(cfg, fuse_g1=False))  # the gate's rows apart from the query's
    export_hf(unfused, cfg, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["architectures"] == ["Qwen3NextForCausalLM"]
    assert config["layer_types"] == ["full_attention"] * cfg.n_layers
    assert config["rope_parameters"]["partial_rotary_factor"] == 1.0
    assert config["num_experts"] == 0 and config["intermediate_size"] == cfg.ffn_dim
    w = load_file(tmp_path / "model.safetensors")
    attn = unfused.blocks[1].attn
    nq, dk, d = cfg.n_heads, cfg.head_dim, cfg.d_model
    q_proj = w["model.layers.1.self_attn.q_proj.weight"].view(nq, 2, dk, d)
    torch.testing.assert_close(q_proj[:, 0], attn.q_proj.weight.view(nq, dk, d), atol=0, rtol=0)
    # headwise: one row per head, repeated
    gate = attn.gate_sdpa.proj.weight.view(nq, -1, d).expand(nq, dk, d)
    torch.testing.assert_close(q_proj[:, 1], gate, atol=0, rtol=0)
    assert (q_proj[:, 1, 0] != q_proj[:, 1, 1]).any() == (name == "sdpa-elementwise")
    for theirs, ours in [("model.norm.weight", unfused.norm), ("model.layers.1.input_layernorm.weight",
                         unfused.blocks[1].attn_norm),
                         ("model.layers.1.self_attn.q_norm.weight", attn.q_norm)]:
        torch.testing.assert_close(w[theirs], ours.weight.detach() - 1)
    assert "model.layers.0.mlp.gate_proj.weight" in w and not any("linear_attn" in k for k in w)


def test_fused_and_unfused_models_export_the_same_folder(tmp_path) -> None:
    """The G1 gate fused into ablate's query projection (the default) or apart from it: the same weights
    out."""
    from safetensors.torch import load_file

    cfg = apply_variant(ModelConfig(preset="tiny"), "sdpa-headwise")
    unfused = o1_weights(build_model(cfg, fuse_g1=False))
    fused = build_model(cfg)
    fused.load_state_dict(unfused.state_dict())  # fuses the gate's rows on load
    export_hf(unfused, cfg, tmp_path / "a")
    export_hf(fused.state_dict(), cfg, tmp_path / "b")
    a, b = load_file(tmp_path / "a" / "model.safetensors"), load_file(tmp_path / "b" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_max_positions_and_eos_are_written(tmp_path) -> None:
    cfg = ModelConfig(preset="tiny")
    export_hf(build_model(cfg), cfg, tmp_path, max_positions=256, eos_id=256)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["max_position_embeddings"] == 256 and config["eos_token_id"] == 256


@pytest.mark.parametrize("changes,where", [
    ({"gate": {"position": "G1", "activation": "silu"}}, "model.gate.activation"),
    ({"gate": {"position": "G2"}}, "model.gate.position"),
    ({"gate": {"position": "G1", "bias": True}}, "model.gate.bias"),
    ({"qk_norm": False}, "model.qk_norm"),
], ids=["silu", "value-gate", "gate-bias", "no-qk-norm"])
def test_refusals_name_the_field(tmp_path, changes: dict, where: str) -> None:
    cfg = ModelConfig(preset="tiny", **changes)
    with pytest.raises(ConfigError, match=rf"^{where}: cannot export"):
        export_hf(build_model(cfg), cfg, tmp_path / "out")
    assert not (tmp_path / "out").exists()
