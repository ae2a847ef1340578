"""Decoders with hand-set weights whose attention and residual stream are known, for the probes' tests and the
attention arms' (tests/unit/runner/test_probes.py says how they are built and what each answer is)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import torch
import torch.nn.functional as F

from ablate.ablations import ModelConfig, apply_variant, build_model

BOS, T = 256, 16
CPU = torch.device("cpu")


def uniform_share(T: int) -> float:
    """F-Attn of uniform causal attention over queries 1..T-1: mean of 1/(t+1)."""
    return float(sum(Fraction(1, t + 1) for t in range(1, T)) / (T - 1))


def constructed(variant: str = "baseline", *, sink_heads: int = 4, n_layers: int = 2) -> torch.nn.Module:
    """The tiny preset (4 query heads, 2 key/value heads, head_dim 16) with ``sink_heads`` sink heads and the
    rest uniform, in every layer; the residual stream is the embedding (1 on d-dim 0 for BOS, on d-dim 1
    otherwise)."""
    cfg = apply_variant(ModelConfig(preset="tiny", n_layers=n_layers), variant)
    torch.manual_seed(0)
    model = build_model(cfg)
    dk = cfg.head_dim
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.embed.weight[:, 1] = 1.0
        model.embed.weight[BOS] = F.one_hot(torch.tensor(0), cfg.d_model).float()
        for block in model.blocks:
            a = block.attn
            for norm in (block.attn_norm, block.ffn_norm, a.q_norm, a.k_norm):
                norm.weight.fill_(1.0)
            # RoPE's slowest pair (7, 15) turns by < 0.005 rad over 16 positions: the logits barely depend on
            # position
            a.q_norm.weight[dk // 2 - 1] = a.k_norm.weight[dk // 2 - 1] = 30.0
            # query head h: rows h * dk.., a fused gate's after
            q_rows = getattr(a.q_proj, "proj", a.q_proj).weight
            for h in range(sink_heads):  # every token's query points along dim 7 of the head
                q_rows[h * dk + dk // 2 - 1, :2] = 1.0
            for j in range(cfg.n_kv_heads):  # BOS's key along dim 7, every other key along dim 0
                a.kv.k_proj.proj.weight[j * dk + dk // 2 - 1, 0] = 1.0
                a.kv.k_proj.proj.weight[j * dk, 1] = 1.0
    return model


def windows(n: int = 3, seed: int = 0) -> np.ndarray:
    """``[n, T + 1]`` rows that start with BOS, then bytes."""
    rows = np.random.default_rng(seed).integers(0, 256, size=(n, T + 1))
    rows[:, 0] = BOS
    return rows
