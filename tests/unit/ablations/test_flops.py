"""Training FLOPs per token: 6N (matmul weights, no vocabulary) + 12·L·H·Q·T, gates and active experts
counted."""

from __future__ import annotations

import pytest

from ablate.ablations import ModelConfig, apply_variant
from ablate.ablations.flops import attention_flops_per_token, flops_per_token, matmul_params


def test_dense_by_hand() -> None:
    cfg = ModelConfig(preset="small")
    d, q, k, dk, f, n = cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.ffn_dim, cfg.n_layers
    per_layer = 2 * d * q * dk + 2 * d * k * dk + 3 * d * f  # q, o; k, v; SwiGLU
    assert matmul_params(cfg) == n * per_layer
    assert flops_per_token(cfg, 512) == 6 * n * per_layer + 12 * n * q * dk * 512
    # an untied head is a vocabulary matrix: not counted either
    assert matmul_params(ModelConfig(preset="small", tie_embeddings=False)) == n * per_layer


@pytest.mark.parametrize(("variant", "extra"), [
    ("sdpa-elementwise", lambda c: c.d_model * c.n_heads * c.head_dim),  # G1: X W, W [d, q*dk]
    ("sdpa-headwise", lambda c: c.d_model * c.n_heads),                  # one score per head
    ("v-elementwise", lambda c: c.d_model * c.n_kv_heads * c.head_dim),   # G2 on the kv heads
    # a learned per-head vector: no matmul
    ("sdpa-input-independent", lambda c: 0),
], ids=["sdpa-elementwise", "sdpa-headwise", "v-elementwise", "sdpa-input-independent"])
def test_the_gate_costs_its_matmul(variant: str, extra) -> None:
    base = ModelConfig(preset="tiny")
    gated = apply_variant(base, variant)
    assert matmul_params(gated) - matmul_params(base) == base.n_layers * extra(base)
    assert flops_per_token(gated, 256) - flops_per_token(base, 256) == 6 * base.n_layers * extra(base)


def test_moe_counts_active_experts_only() -> None:
    cfg = ModelConfig(preset="tiny-moe")  # 4 experts of width 64, top-2
    d, n = cfg.d_model, cfg.n_layers
    attn = 2 * d * cfg.n_heads * cfg.head_dim + 2 * d * cfg.n_kv_heads * cfg.head_dim
    router = d * cfg.n_experts
    active_experts = cfg.moe_top_k * 3 * d * cfg.expert_dim
    assert matmul_params(cfg) == n * (attn + router + active_experts)
    # the paper's 15A2B: ~15.6B parameters, of which ~1.4B non-embedding ones are active per token
    paper = matmul_params(ModelConfig(preset="paper-moe-15a2b"))
    assert 1.3e9 < paper < 1.45e9


def test_switch_heads_count_selected_experts() -> None:
    base = ModelConfig(preset="tiny")
    v8top2 = apply_variant(base, "switch-v-8top2")  # 8 value experts per kv head, 2 selected
    d, k, dk = base.d_model, base.n_kv_heads, base.head_dim
    # v: 2 of 8 experts active; plus the router [d, k*8]
    assert matmul_params(v8top2) - matmul_params(base) == base.n_layers * (d * k * dk * (2 - 1) + d * k * 8)


def test_attention_term_grows_with_context() -> None:
    cfg = ModelConfig(preset="paper-dense-1.7b")
    assert attention_flops_per_token(cfg, 4096) == 12 * 28 * 16 * 128 * 4096
    assert flops_per_token(cfg, 4096) - flops_per_token(cfg, 2048) == 12 * 28 * 16 * 128 * 2048


@pytest.mark.parametrize(("preset", "variant"), [
    ("tiny", "baseline"), ("tiny", "sdpa-elementwise"), ("tiny", "sdpa-headwise"), ("tiny", "dense-output"),
    ("tiny", "sdpa-input-independent"), ("tiny-moe", "baseline"), ("tiny", "switch-v-8top2"),
], ids=lambda x: x)
def test_the_count_is_what_torch_counts_in_a_training_step(preset: str, variant: str) -> None:
    """torch's FlopCounterMode over one forward + backward (explicit attention, so its matmuls are counted) is
    flops_per_token per token, plus the LM head's 6·d·V that the count leaves out with the vocabulary."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from ablate.ablations import build_model

    cfg = apply_variant(ModelConfig(preset=preset), variant)
    torch.manual_seed(0)
    model = build_model(cfg)
    batch, seq = 2, 64
    with FlopCounterMode(display=False) as counter:
        out = model(torch.randint(0, cfg.vocab_size, (batch, seq)), probe=True)
        (out.logits.float().sum() + out.aux_loss).backward()
    expected = flops_per_token(cfg, seq) + 6 * cfg.d_model * cfg.vocab_size
    if cfg.switch is not None:
        # switch heads are computed densely here (every expert, then weighted): the count keeps the top_k
        # selected experts' share, as a sparse implementation spends
        d, k, dk, e = cfg.d_model, cfg.n_kv_heads, cfg.head_dim, cfg.switch.n_experts
        expected += 6 * cfg.n_layers * d * k * dk * (e - cfg.switch.top_k)
    assert counter.get_total_flops() == batch * seq * expected
