"""The decoder's math: gates per spec, MoE losses, switch heads, probes, RoPE/YaRN."""

from __future__ import annotations

import pytest
import torch

from ablate.ablations import ModelConfig, apply_variant, build_model
from ablate.ablations.config import GateSpec
from ablate.ablations.gates import Gate
from ablate.ablations.layers import MoE, Rotary, balance_loss, z_loss

B, T, H, DK, D = 2, 5, 4, 8, 32


def gate(**spec: object) -> Gate:
    torch.manual_seed(0)
    g = Gate(GateSpec(**spec), D, H, DK)
    for p in g.parameters():
        torch.nn.init.normal_(p, std=1.0)
    return g


def xy() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(1)
    return torch.randn(B, T, H, DK), torch.randn(B, T, D)


def test_elementwise_sigmoid_is_y_times_sigmoid_xw() -> None:
    g, (y, x) = gate(), xy()
    out, s = g(y, x)
    expected = y * torch.sigmoid(x @ g.proj.weight.T).view(B, T, H, DK)
    assert torch.allclose(out, expected, atol=1e-6)
    assert s.shape == (B, T, H, DK)


def test_headwise_broadcasts_over_dk() -> None:
    g, (_, x) = gate(granularity="headwise"), xy()
    out, s = g(torch.ones(B, T, H, DK), x)
    assert g.proj.weight.shape == (H, D)
    assert s.shape == (B, T, H, 1)
    assert torch.equal(out, s.expand(B, T, H, DK))
    assert not torch.allclose(out[:, :, 0], out[:, :, 1])  # but differs across heads


def test_ns_sigmoid_stays_in_half_to_one() -> None:
    g, (y, x) = gate(activation="ns_sigmoid"), xy()
    _, s = g(y, 100 * x)
    assert s.min() >= 0.5 and s.max() <= 1.0
    assert s.min() < 0.51 and s.max() > 0.99  # the range is actually reached


def test_input_independent_ignores_input_and_starts_at_half() -> None:
    g = Gate(GateSpec(input="independent"), D, H, DK)
    y, x = xy()
    out_a, s_a = g(y, x)
    assert torch.equal(s_a, torch.full_like(s_a, 0.5))  # zero-initialised through the sigmoid
    torch.nn.init.normal_(g.proj.weight)
    out_a, _ = g(y, x)
    out_b, _ = g(y, torch.randn_like(x) * 10)
    assert torch.equal(out_a, out_b)
    assert sum(p.numel() for p in g.parameters()) == H * DK


def test_head_shared_scores_are_equal_across_heads() -> None:
    g, (y, x) = gate(shared=True), xy()
    out, s = g(torch.ones_like(y), x)
    assert g.proj.weight.shape == (H * DK, D)  # per-head scores are computed, then averaged
    for h in range(1, H):
        assert torch.equal(s[:, :, h], s[:, :, 0])
    per_head = torch.sigmoid  # the mean is taken before the activation
    expected = per_head((x @ g.proj.weight.T).view(B, T, H, DK).mean(2, keepdim=True))
    assert torch.allclose(out, expected.expand(B, T, H, DK), atol=1e-6)


def test_additive_identity_is_y_plus_xw() -> None:
    g, (y, x) = gate(combine="additive", activation="identity"), xy()
    out, _ = g(y, x)
    assert torch.allclose(out, y + (x @ g.proj.weight.T).view(B, T, H, DK), atol=1e-5)


def test_additive_silu_is_y_plus_silu_xw() -> None:
    g, (y, x) = gate(combine="additive", activation="silu"), xy()
    out, _ = g(y, x)
    assert torch.allclose(out, y + torch.nn.functional.silu(x @ g.proj.weight.T).view(B, T, H, DK), atol=1e-5)


def test_balance_loss_is_k_under_uniform_routing() -> None:
    n, e, k = 64, 8, 2
    probs = torch.full((n, e), 1 / e)
    idx = torch.stack([torch.arange(n) % e, (torch.arange(n) + 1) % e], dim=1)  # every expert equally loaded
    assert balance_loss(probs, idx, e).item() == pytest.approx(k)
    skewed = torch.zeros(n, k, dtype=torch.long)
    skewed[:, 1] = 1  # everyone on experts 0 and 1, with the router agreeing
    peaked = torch.zeros(n, e)
    peaked[:, :2] = 0.5
    assert balance_loss(peaked, skewed, e).item() == pytest.approx(e * (0.5 + 0.5))


def test_moe_aux_loss_uses_the_config_coefficients() -> None:
    torch.manual_seed(0)
    cfg = ModelConfig(preset="tiny-moe", moe_aux_coef=0.5, moe_z_coef=0.25)
    moe = MoE(cfg)
    torch.nn.init.normal_(moe.router.weight, std=0.5)
    moe.reset_parameters(0.02)
    x = torch.randn(3, 7, cfg.d_model)
    _, aux = moe(x)
    logits = moe.router(x.reshape(-1, cfg.d_model))
    probs = logits.softmax(-1)
    expected = 0.5 * balance_loss(probs, probs.topk(cfg.moe_top_k).indices,
                                  cfg.n_experts) + 0.25 * z_loss(logits)
    assert aux.item() == pytest.approx(expected.item(), rel=1e-5)
    dense = build_model(ModelConfig(preset="tiny"))(torch.zeros(1, 4, dtype=torch.long))
    assert dense.aux_loss.item() == 0.0


def test_moe_matches_a_per_token_loop() -> None:
    torch.manual_seed(0)
    cfg = ModelConfig(preset="tiny-moe", moe_renormalize=True)
    moe = MoE(cfg)
    torch.nn.init.normal_(moe.router.weight, std=0.5)
    moe.reset_parameters(0.1)
    x = torch.randn(1, 6, cfg.d_model)
    out, _ = moe(x)
    for t in range(6):
        p = moe.router(x[0, t]).softmax(-1)
        w, idx = p.topk(cfg.moe_top_k)
        w = w / w.sum()
        ref = sum(
            wi * (torch.nn.functional.silu(x[0, t] @ moe.gate_up[e][:, : cfg.expert_dim])
                  * (x[0, t] @ moe.gate_up[e][:, cfg.expert_dim :])) @ moe.down[e]
            for wi, e in zip(w, idx.tolist(), strict=True)
        )
        assert torch.allclose(out[0, t], ref, atol=1e-5)


def test_switch_v_1top1_equals_v_headwise() -> None:
    torch.manual_seed(0)
    gated = build_model(apply_variant(ModelConfig(preset="tiny"), "v-headwise"))
    switch = build_model(apply_variant(ModelConfig(preset="tiny"), "switch-v-1top1"))
    state = gated.state_dict()
    mapped = {}
    for k in switch.state_dict():
        src = k.replace("kv.router.", "gate_v.proj.")
        mapped[k] = state[src]
    switch.load_state_dict(mapped)
    assert sum(p.numel() for p in switch.parameters()) == sum(p.numel() for p in gated.parameters())
    idx = torch.randint(0, 320, (2, 10))
    assert torch.allclose(switch(idx).logits, gated(idx).logits, atol=1e-5)


def test_switch_top_k_zeroes_the_rest() -> None:
    torch.manual_seed(0)
    model = build_model(apply_variant(ModelConfig(preset="tiny"), "switch-v-8top2"))
    probes = model(torch.randint(0, 320, (1, 9)), probe=True).probes
    scores = probes[0]["gate"]  # (B, T, kv heads, E)
    assert scores.shape == (1, 9, 2, 8)
    assert ((scores > 0).sum(-1) == 2).all() and scores.max() < 1


@pytest.mark.parametrize("name", ["baseline", "sdpa-elementwise", "v-headwise"])
def test_probes_shapes_and_consistency(name: str) -> None:
    torch.manual_seed(0)
    cfg = apply_variant(ModelConfig(preset="tiny"), name)
    model = build_model(cfg)
    idx = torch.randint(0, cfg.vocab_size, (2, 10))
    plain, probed = model(idx), model(idx, probe=True)
    assert plain.probes is None
    assert torch.allclose(plain.logits, probed.logits, atol=1e-5)
    assert len(probed.probes) == cfg.n_layers
    p = probed.probes[0]
    assert p["sdpa_pre"].shape == p["sdpa_post"].shape == (2, 10, cfg.n_heads, cfg.head_dim)
    assert p["attn"].shape == (2, cfg.n_heads, 10, 10)
    assert p["hidden"].shape == (2, 10, cfg.d_model)
    assert torch.allclose(p["attn"].sum(-1), torch.ones(2, cfg.n_heads, 10))
    assert p["attn"].triu(1).abs().max() == 0
    if name == "baseline":
        assert p["gate"] is None and torch.equal(p["sdpa_pre"], p["sdpa_post"])
    if name == "sdpa-elementwise":
        assert torch.allclose(p["sdpa_post"], p["sdpa_pre"] * p["gate"], atol=1e-6)
    assert not any(t.requires_grad for t in p.values() if t is not None)


def test_sdpa_groupnorm_normalises_each_head() -> None:
    model = build_model(apply_variant(ModelConfig(preset="tiny"), "sdpa-groupnorm"))
    p = model(torch.randint(0, 320, (1, 6)), probe=True).probes[1]
    rms = p["sdpa_post"].pow(2).mean(-1).sqrt()
    assert torch.allclose(rms, torch.ones_like(rms), atol=1e-3)


def test_output_clip_bounds_the_residual_updates() -> None:
    model = build_model(ModelConfig(preset="tiny", output_clip=0.01))
    torch.nn.init.normal_(model.blocks[0].attn.o_proj.weight, std=10.0)
    x = model.embed(torch.randint(0, 320, (1, 6)))
    cos, sin = model.rotary(6, x.device)
    out, _, _ = model.blocks[0](x, cos, sin)
    assert (out - x).abs().max() <= 0.02 + 1e-6  # two clipped updates of at most 0.01 each
    assert (out - x).abs().max() > 0.015  # and the clip is what bounds them


def test_yarn_is_used_when_its_factor_is_above_one() -> None:
    from ablate.ablations.yarn import yarn_inv_freq

    cfg = ModelConfig(preset="tiny", rope_yarn_factor=4.0, rope_yarn_original_len=64)
    rot = Rotary(cfg)
    inv, scale = yarn_inv_freq(cfg.head_dim, cfg.rope_theta, 4.0, 64)
    assert torch.equal(rot.inv_freq, inv) and rot.scale == scale > 1
    cos, _ = rot(3, torch.device("cpu"))
    assert cos[0, 0].item() == pytest.approx(scale)
    assert Rotary(ModelConfig(preset="tiny")).scale == 1.0


def test_paper_presets_build_on_meta() -> None:
    model = build_model(ModelConfig(preset="paper-dense-1.7b"), device="meta")
    assert model.embed.weight.is_meta
    assert model.lm_head.weight is model.embed.weight  # tied, as Qwen3-1.7B
