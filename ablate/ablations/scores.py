"""Attention scores by hand, shared by every arm of the weights slot that does not go through SDPA alone:
the causal scores ``QKᵀ/√d`` with their mask, kv heads repeated for the query heads (GQA), the values mixed
by given weights, and plain causal softmax attention with its probabilities (the probe path).

``weights.py`` (the slot and its simpler arms), ``differential.py`` and ``cumulative.py`` import these; none
of them imports another arm's module for them.
"""

from __future__ import annotations

import torch


def repeat_kv(q: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """``t [B, k, T, dk]`` with each kv head repeated for the query heads it serves -> ``[B, q, T, dk]``."""
    return t.repeat_interleave(q.shape[1] // t.shape[1], 1)


def causal_scores(q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(QKᵀ/√d [B, q, T, T] in float32, mask [T, T])``, ``mask`` True where a query may see a key."""
    T = q.shape[-2]
    scores = (q.float() @ repeat_kv(q, k).float().transpose(-2, -1)) * q.shape[-1] ** -0.5  # (B, q, T, T)
    return scores, torch.ones(T, T, dtype=torch.bool, device=q.device).tril()


def mix(p: torch.Tensor, q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The values mixed by weights ``p [B, q, T, T]``, in ``q``'s dtype."""
    return (p @ repeat_kv(q, v).float()).to(q.dtype)


def explicit_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor,
                                                                                   torch.Tensor]:
    """Causal softmax attention computed by hand, returning the probabilities too: ``(y, p [B, q, T, T])``."""
    scores, mask = causal_scores(q, k)
    p = scores.masked_fill(~mask, float("-inf")).softmax(-1)
    return mix(p, q, v), p
