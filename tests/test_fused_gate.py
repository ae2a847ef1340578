"""The fused G1 projection: the query projection and the SDPA-output gate's projection in one matmul, laid out as
Qwen3-Next's ``q_proj`` (per head ``[q_h ; g_h]``), is the same function as the two projections apart, with the
same parameter count, for every input-dependent G1 variant of the catalogue."""

from __future__ import annotations

import pytest
import torch

from ablate.ablations import VARIANTS, ModelConfig, apply_variant, build_model, count_params
from ablate.ablations.gates import QueryGateProjection, fuse_query_gate, fuses_g1, split_query_gate

FUSED = [n for n, v in VARIANTS.items() if not v.requires_moe and fuses_g1(apply_variant(ModelConfig(), n).gate)]


def test_the_catalogue_has_fused_variants() -> None:
    assert {"sdpa-elementwise", "sdpa-headwise", "sdpa-head-shared", "sdpa-additive-silu"} <= set(FUSED)
    assert "sdpa-input-independent" not in FUSED and "v-elementwise" not in FUSED


def pair(name: str, **over) -> tuple[ModelConfig, torch.nn.Module, torch.nn.Module]:
    """A fused model and an unfused one holding the same weights."""
    cfg = apply_variant(ModelConfig(preset="tiny", **over), name)
    torch.manual_seed(0)
    unfused = build_model(cfg, fuse_g1=False)
    fused = build_model(cfg)
    fused.load_state_dict(unfused.state_dict())  # the fusing load hook merges the gate rows into q_proj
    return cfg, fused, unfused


@pytest.mark.parametrize("name", FUSED)
def test_fused_equals_unfused(name: str) -> None:
    cfg, fused, unfused = pair(name)
    assert isinstance(fused.blocks[0].attn.q_proj, QueryGateProjection)
    n = sum(p.numel() for p in fused.parameters())
    assert n == sum(p.numel() for p in unfused.parameters()) == count_params(cfg).total
    idx = torch.randint(0, cfg.vocab_size, (2, 12))
    a, b = fused(idx, probe=True), unfused(idx, probe=True)
    assert torch.allclose(a.logits, b.logits, atol=2e-6)
    assert torch.allclose(a.probes[0]["gate"], b.probes[0]["gate"], atol=1e-6)
    a.logits.square().mean().backward()
    b.logits.square().mean().backward()
    for fb, ub in zip(fused.blocks, unfused.blocks, strict=True):
        g_q, g_gate = split_query_gate(fb.attn.q_proj.weight.grad, cfg.n_heads, cfg.head_dim)
        assert torch.allclose(g_q, ub.attn.q_proj.weight.grad, atol=1e-6)
        assert torch.allclose(g_gate, ub.attn.gate_sdpa.proj.weight.grad, atol=1e-6)
        assert torch.allclose(fb.ffn.down_proj.weight.grad, ub.ffn.down_proj.weight.grad, atol=1e-6)


def test_a_gate_bias_stays_under_its_unfused_name() -> None:
    from ablate.ablations.config import GateSpec

    spec = GateSpec(position="G1", bias=True)
    cfg = ModelConfig(preset="tiny", gate=spec)
    torch.manual_seed(0)
    unfused = build_model(cfg, fuse_g1=False)
    with torch.no_grad():
        for b in unfused.blocks:
            b.attn.gate_sdpa.proj.bias.normal_()
    fused = build_model(cfg)
    fused.load_state_dict(unfused.state_dict())
    assert "blocks.0.attn.gate_sdpa.proj.bias" in dict(fused.named_parameters())
    idx = torch.randint(0, cfg.vocab_size, (1, 9))
    assert torch.allclose(fused(idx).logits, unfused(idx).logits, atol=2e-6)


def test_layout_is_qwen3_next_q_proj() -> None:
    """transformers' Qwen3NextAttention reads its q_proj output as ``chunk(view(..., H, 2 * dk), 2)``: query, gate."""
    cfg, fused, unfused = pair("sdpa-elementwise")
    proj = fused.blocks[0].attn.q_proj
    x = torch.randn(2, 5, cfg.d_model)
    q, g = torch.chunk(proj.weight.new_tensor(x @ proj.weight.T).view(2, 5, -1, 2 * cfg.head_dim), 2, dim=-1)
    ours_q, ours_g = proj(x)
    assert torch.equal(q, ours_q) and torch.equal(g, ours_g)
    ref = unfused.blocks[0].attn
    assert torch.allclose(q.flatten(-2), x @ ref.q_proj.weight.T, atol=1e-6)
    assert torch.allclose(g.flatten(-2), x @ ref.gate_sdpa.proj.weight.T, atol=1e-6)
    w = proj.weight
    assert torch.equal(fuse_query_gate(*split_query_gate(w, cfg.n_heads, cfg.head_dim), cfg.n_heads), w)
