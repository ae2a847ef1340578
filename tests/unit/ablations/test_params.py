"""Parameter counting at paper scale (Table 1's Added Param column), presets, and FFN matching."""

from __future__ import annotations

import pytest

from ablate.ablations import VARIANTS, ModelConfig, added_params, apply_variant, count_params, match_ffn

# Table 1, column "Added Param (M)", as the paper prints it (row -> text), at the 15A2B MoE shapes.
PAPER_TABLE1_ADDED = {
    2: "50", 3: "201", 5: "201", 6: "25", 7: "25", 8: "201", 9: "100", 10: "1.6", 11: "0.2",
    12: "201", 13: "25", 14: "201", 15: "201",
}


def variant_for(ref: str) -> str:
    (name,) = [v.name for v in VARIANTS.values() if ref in v.paper]
    return name


@pytest.mark.parametrize("row", list(PAPER_TABLE1_ADDED), ids=[f"table1:{r}" for r in PAPER_TABLE1_ADDED])
def test_table1_added_params_at_paper_scale(row: int) -> None:
    printed = PAPER_TABLE1_ADDED[row]
    decimals = len(printed.split(".")[1]) if "." in printed else 0
    added = added_params(ModelConfig(preset="paper-moe-15a2b"), variant_for(f"table1:{row}"))
    unit = 10.0**-decimals
    millions = added / 1e6
    # the paper rounds some entries (1.57 -> 1.6) and truncates others (100.66 -> 100)
    assert float(printed) in (round(millions, decimals), round(millions // unit * unit, decimals))


def test_paper_preset_totals() -> None:
    moe = count_params(ModelConfig(preset="paper-moe-15a2b"))
    assert 15.0e9 < moe.total < 16.0e9  # "15B total parameters"
    dense = count_params(ModelConfig(preset="paper-dense-1.7b"))
    # Qwen3-1.7B card
    assert round(dense.total / 1e9, 1) == 1.7 and round(dense.non_embedding / 1e9, 1) == 1.4
    deep = count_params(ModelConfig(preset="paper-dense-1.7b-48l"))
    assert round(deep.total / 1e9, 1) == 1.7


def test_tiny_count_by_hand() -> None:
    cfg = ModelConfig(preset="tiny")
    d, q, k, dk, f, v, n = (
        cfg.d_model,
        cfg.n_heads,
        cfg.n_kv_heads,
        cfg.head_dim,
        cfg.ffn_dim,
        cfg.vocab_size,
        2,
    )
    per_layer = d * q * dk * 2 + d * k * dk * 2 + 2 * dk + 3 * d * f + 2 * d
    assert count_params(cfg) == (v * d + n * per_layer + d, n * per_layer + d)
    untied = count_params(ModelConfig(preset="tiny", tie_embeddings=False))
    assert untied.total == v * d * 2 + n * per_layer + d and untied.non_embedding == n * per_layer + d


@pytest.mark.parametrize("preset", ["tiny", "small", "paper-dense-1.7b"])
@pytest.mark.parametrize("name", ["q-heads-x1.5", "sdpa-elementwise", "dense-output", "switch-v-4top4"])
def test_match_ffn_brings_the_variant_to_the_baseline_count(preset: str, name: str) -> None:
    base = ModelConfig(preset=preset)
    target = count_params(base).total
    variant = apply_variant(base, name)
    matched, residual = match_ffn(variant, target)
    assert matched.ffn_dim < variant.ffn_dim
    assert count_params(matched).total == pytest.approx(target * (1 + residual), abs=1)
    assert abs(residual) < (0.005 if preset != "tiny" else 0.01)
    # the width is the best one: one unit wider or narrower is no closer
    for w in (matched.ffn_dim - 1, matched.ffn_dim + 1):
        other = count_params(matched.model_copy(update={"ffn_dim": w})).total
        assert abs(other - target) >= abs(count_params(matched).total - target)


def test_match_ffn_resizes_experts_on_moe() -> None:
    base = ModelConfig(preset="paper-moe-15a2b")
    matched, residual = match_ffn(apply_variant(base, "sdpa-elementwise"), count_params(base).total)
    assert matched.expert_dim < base.expert_dim and matched.ffn_dim == base.ffn_dim
    assert abs(residual) < 0.005
