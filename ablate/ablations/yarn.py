"""YaRN RoPE scaling (Peng et al. 2023, arXiv 2309.00071): inverse frequencies and the attention factor.

The same formula as Hugging Face transformers' ``_compute_yarn_parameters`` (with ``truncate=True``, no
``mscale``): dimensions that rotate fast over the original context (more than ``beta_fast`` turns) keep their
frequency (extrapolation), slow ones (fewer than ``beta_slow`` turns) are divided by ``factor``
(interpolation), and those between blend linearly. Cos/sin are multiplied by the attention factor ``0.1
ln(factor) + 1``.
"""

from __future__ import annotations

import math

import torch


def _dim_for_rotations(rotations: float, dim: int, theta: float, original_len: int) -> float:
    # The (fractional) rotary dimension index whose wavelength fits `rotations` times in `original_len`.
    return dim * math.log(original_len / (rotations * 2 * math.pi)) / (2 * math.log(theta))


def yarn_attention_factor(factor: float) -> float:
    """The cos/sin scale YaRN applies: ``0.1 ln(factor) + 1`` (1.0 when ``factor <= 1``)."""
    return 1.0 if factor <= 1 else 0.1 * math.log(factor) + 1.0


def yarn_inv_freq(
    head_dim: int,
    theta: float,
    factor: float,
    original_len: int,
    beta_fast: float = 32,
    beta_slow: float = 1,
) -> tuple[torch.Tensor, float]:
    """RoPE inverse frequencies ``[head_dim // 2]`` (float32) under YaRN scaling, and the attention factor.

    ``factor`` is the context extension ratio (target length / ``original_len``, the length trained at).

    >>> inv, att = yarn_inv_freq(16, 10000.0, 4.0, 256)
    >>> tuple(inv.shape), round(att, 4)
    ((8,), 1.1386)
    """
    if head_dim % 2 or head_dim < 2:
        raise ValueError(f"head_dim must be even and >= 2, got {head_dim}")
    if original_len < 1:
        raise ValueError(f"original_len must be >= 1 for YaRN, got {original_len}")
    half = head_dim // 2
    base_freq = theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)  # [half]
    extrapolated = 1.0 / base_freq
    interpolated = 1.0 / (factor * base_freq)

    low = max(math.floor(_dim_for_rotations(beta_fast, head_dim, theta, original_len)), 0)
    high: float = min(math.ceil(_dim_for_rotations(beta_slow, head_dim, theta, original_len)), head_dim - 1)
    if low == high:
        high += 0.001  # avoid dividing by zero in the ramp
    # 0 = fast dims, 1 = slow
    ramp = ((torch.arange(half, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    inv_freq = extrapolated * (1 - ramp) + interpolated * ramp
    return inv_freq, yarn_attention_factor(factor)
