"""YaRN's inverse frequencies and attention factor equal transformers' ``_compute_yarn_parameters``."""

from __future__ import annotations

import math

import pytest
import torch

from ablate.ablations.yarn import yarn_attention_factor, yarn_inv_freq

CASES = [
    # head_dim, theta, factor, original_len
    (16, 10_000.0, 2.0, 256),
    (16, 10_000.0, 4.0, 256),
    (32, 10_000.0, 8.0, 512),
    (64, 500_000.0, 4.0, 4096),
    (128, 1_000_000.0, 4.0, 32768),
    (128, 10_000.0, 16.0, 2048),
    (8, 100.0, 3.0, 64),
]


def _transformers_yarn(head_dim: int, theta: float, factor: float, original_len: int):
    from transformers import Qwen3Config
    from transformers.modeling_rope_utils import _compute_yarn_parameters

    cfg = Qwen3Config(
        hidden_size=head_dim * 4, num_attention_heads=4, head_dim=head_dim,
        max_position_embeddings=int(original_len * factor),
        rope_parameters={"rope_type": "yarn", "rope_theta": theta, "factor": factor,
                         "original_max_position_embeddings": original_len},
    )
    return _compute_yarn_parameters(cfg)


@pytest.mark.parametrize("head_dim,theta,factor,original_len", CASES, ids=[str(c) for c in CASES])
def test_matches_transformers(head_dim, theta, factor, original_len):
    ours, att = yarn_inv_freq(head_dim, theta, factor, original_len)
    ref, ref_att = _transformers_yarn(head_dim, theta, factor, original_len)
    assert ours.shape == (head_dim // 2,) and ours.dtype == torch.float32
    torch.testing.assert_close(ours, ref, rtol=1e-6, atol=0)
    assert att == pytest.approx(ref_att)
    assert att == pytest.approx(0.1 * math.log(factor) + 1)


def test_known_values():
    inv, att = yarn_inv_freq(16, 10_000.0, 4.0, 256)
    plain = 1.0 / 10_000.0 ** (torch.arange(0, 16, 2, dtype=torch.float32) / 16)
    # the fastest dims (many turns within 256 positions) are unchanged, the slowest divided by the factor
    assert inv[0].item() == pytest.approx(plain[0].item())
    assert inv[-1].item() == pytest.approx(plain[-1].item() / 4.0)
    assert bool(torch.all(inv <= plain + 1e-12)) and bool(torch.all(inv >= plain / 4.0 - 1e-12))
    assert att == pytest.approx(1.1386294361)


def test_factor_one_is_plain_rope():
    inv, att = yarn_inv_freq(32, 10_000.0, 1.0, 512)
    plain = 1.0 / 10_000.0 ** (torch.arange(0, 32, 2, dtype=torch.float32) / 32)
    torch.testing.assert_close(inv, plain)
    assert att == 1.0 and yarn_attention_factor(0.5) == 1.0


def test_rejects_odd_head_dim():
    with pytest.raises(ValueError, match="head_dim must be even"):
        yarn_inv_freq(15, 10_000.0, 2.0, 256)
