"""Measuring a trained model on held-out windows: perplexity, and the paper's per-layer probes (Sec. 4, App.
A).

Probe values, per layer (fractions in [0, 1], like the paper's Table 4):

- ``gate_score``: mean gate score (``None`` for a layer without a gate), and its histogram on fixed bins of
  [0, 1] (scores outside are counted in the edge bins; the histogram is normalized to shares);
- ``frac_below_1e-2_pre`` / ``_post`` / ``_scaled`` (and ``1e-3``): the share of SDPA output values with
  |value| below the threshold before the gate, after it, and before it scaled by the layer's mean gate score
  (Fig. 5's control: is the sparsity the gate's doing, or only its average size?);
- ``mean_abs_pre`` / ``mean_abs_post``: mean |Y| before and after the gate (Fig. 4);
- ``f_attn``: the share of attention each query gives the first token, averaged over heads and over query
  positions 1..T-1 (position 0 can attend only to itself) (Fig. 2);
- ``m_act``: the largest |activation| of the layer's output hidden state (Fig. 6);
- ``massive_ratio``: Sun et al.'s (2024) criterion for a massive activation, per probe row (one sequence): the
  largest |activation| of the layer's output hidden state over its median |activation| (``torch.median``, the
  lower median of the row's T x d values), the mean over rows (a row whose median is 0 has no ratio and is
  skipped);
- ``massive_first``: the share of rows whose largest |activation| sits on the first token.

Run-level ``gate_score``/``f_attn``/``m_act`` are means over layers (``gate_score`` None without a gate).
``massive_ratio`` is the largest over layers and ``massive_first`` that layer's share: a sink's massive
activation is a few coordinates of the first token, thousands of times the median, in the layers between the
early ones that make it and the last ones that undo it, so the layer where it peaks is where it is seen; a
residual stream that only grows scales its median with its maximum, and its ratio stays small wherever it
grows.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

THRESHOLDS = ("1e-2", "1e-3")


def autocast_for(device: torch.device, precision: str) -> contextlib.AbstractContextManager[object]:
    """The autocast context of a training precision on this device (none for full precision)."""
    if precision in ("bf16-mixed", "16-mixed") and device.type in ("cuda", "cpu"):
        dtype = torch.bfloat16 if precision == "bf16-mixed" else torch.float16
        return torch.autocast(device_type=device.type, dtype=dtype)
    return contextlib.nullcontext()


@torch.no_grad()
def perplexity(model: torch.nn.Module, windows: np.ndarray, *, batch_size: int, device: torch.device,
               precision: str = "32-true") -> float:
    """exp(mean next-token NLL) over ``windows [N, seq_len + 1]`` (every position of every window scored)."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for start in range(0, len(windows), batch_size):
        w = torch.from_numpy(windows[start: start + batch_size]).to(device)
        with autocast_for(device, precision):
            logits = model(w[:, :-1]).logits
        total += F.cross_entropy(logits.float().flatten(0, 1), w[:, 1:].flatten(), reduction="sum").item()
        count += w[:, 1:].numel()
    model.train(was_training)
    mean = total / count
    return math.exp(mean) if mean < 709.0 else math.inf  # exp overflows above ~709.78 (and nan is not < 709)


@dataclass
class _Layer:
    gate_sum: float = 0.0
    gate_n: int = 0
    hist: np.ndarray | None = None
    abs_pre: float = 0.0
    abs_post: float = 0.0
    n_sdpa: int = 0
    below: dict[str, float] = field(default_factory=dict)
    f_attn_sum: float = 0.0
    f_attn_n: int = 0
    m_act: float = 0.0
    ratio_sum: float = 0.0
    ratio_n: int = 0
    rows: int = 0
    first_rows: int = 0


@dataclass
class Probes:
    """Per-layer probe values (name -> list over layers), gate-score histograms and their bin edges."""

    layers: dict[str, list[float | None]]
    histograms: dict[str, list[list[float]]]
    edges: list[float]

    def summary(self) -> dict[str, float | None]:
        """The run-level numbers: ``gate_score``, ``f_attn``, ``m_act`` as means over layers;
        ``massive_ratio`` the largest over layers and ``massive_first`` that layer's share (module docstring:
        why)."""
        out: dict[str, float | None] = {}
        for name in ("gate_score", "f_attn", "m_act"):
            vals = [v for v in self.layers.get(name, []) if v is not None]
            out[name] = float(np.mean(vals)) if vals else None
        ratios = [(v, i) for i, v in enumerate(self.layers.get("massive_ratio", [])) if v is not None]
        peak = max(ratios, default=None)
        out["massive_ratio"] = peak[0] if peak else None
        out["massive_first"] = self.layers["massive_first"][peak[1]] if peak else None
        return out


def probe_windows(heldout: dict[str, np.ndarray], probe_tokens: int, seq_len: int) -> np.ndarray:
    """About ``probe_tokens`` tokens of windows, taken in turn from each held-out set (what a run probes)."""
    n = max(1, -(-probe_tokens // seq_len))
    sets = list(heldout.values())
    rows = [sets[i % len(sets)][(i // len(sets)) % len(sets[i % len(sets)])] for i in range(n)]
    return np.stack(rows)


@torch.no_grad()
def probe(model: torch.nn.Module, windows: np.ndarray, *, hist_bins: int, device: torch.device,
          precision: str = "32-true") -> Probes:
    """Run ``model(idx, probe=True)`` over ``windows [N, seq_len + 1]`` and reduce its per-layer tensors.

    A second pass counts the pre-gate values scaled by each layer's mean gate score (known only after the
    first pass); it runs only when the model has a gate.
    """
    was_training = model.training
    model.eval()
    seq = windows.shape[1] - 1
    cfg = getattr(model, "cfg", None)
    per_seq = (getattr(cfg, "n_heads", 1) * seq * seq + 1) * getattr(cfg, "n_layers", 1) * 4
    bs = max(1, min(len(windows), 2**28 // per_seq))  # keep the explicit attention maps near 256 MiB
    batches = [torch.from_numpy(windows[i: i + bs, :-1]).to(device) for i in range(0, len(windows), bs)]
    layers: list[_Layer] = []
    for x in batches:
        with autocast_for(device, precision):
            out = model(x, probe=True)
        if not layers:
            layers = [_Layer() for _ in out.probes]
        for acc, p in zip(layers, out.probes, strict=True):
            _accumulate(acc, p, hist_bins)
    gated = [acc.gate_n > 0 for acc in layers]
    if any(gated):
        means = [acc.gate_sum / acc.gate_n if acc.gate_n else None for acc in layers]
        for x in batches:
            with autocast_for(device, precision):
                out = model(x, probe=True)
            for acc, p, m in zip(layers, out.probes, means, strict=True):
                if m is not None:
                    scaled = p["sdpa_pre"].float().abs() * m
                    for t in THRESHOLDS:
                        acc.below[f"{t}_scaled"] = acc.below.get(f"{t}_scaled",
                                                                 0.0) + (scaled < float(t)).sum().item()
    model.train(was_training)
    return _reduce(layers, hist_bins)


def _accumulate(acc: _Layer, p: dict[str, torch.Tensor | None], hist_bins: int) -> None:
    gate = p.get("gate")
    if gate is not None:
        g = gate.float()
        acc.gate_sum += g.sum().item()
        acc.gate_n += g.numel()
        h = torch.histc(g.clamp(0, 1), bins=hist_bins, min=0, max=1).cpu().numpy()
        acc.hist = h if acc.hist is None else acc.hist + h
    pre_t, post_t, hidden = p["sdpa_pre"], p["sdpa_post"], p["hidden"]
    assert pre_t is not None and post_t is not None and hidden is not None  # every layer's probe has these
    pre, post = pre_t.float().abs(), post_t.float().abs()
    acc.abs_pre += pre.sum().item()
    acc.abs_post += post.sum().item()
    acc.n_sdpa += pre.numel()
    for t in THRESHOLDS:
        for name, v in (("pre", pre), ("post", post)):
            acc.below[f"{t}_{name}"] = acc.below.get(f"{t}_{name}", 0.0) + (v < float(t)).sum().item()
    attn = p["attn"]  # (B, q, T, T)
    if attn is not None and attn.shape[-1] > 1:
        first = attn[:, :, 1:, 0].float()
        acc.f_attn_sum += first.sum().item()
        acc.f_attn_n += first.numel()
    acc.m_act = max(acc.m_act, hidden.float().abs().max().item())
    ratio, first = massive(hidden)
    acc.ratio_sum += ratio.nansum().item()
    acc.ratio_n += int(ratio.isfinite().sum().item())
    acc.rows += len(first)
    acc.first_rows += int(first.sum().item())


def massive(hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sun et al.'s criterion per row of ``hidden [B, T, d]``: (max |h| / median |h| [B], nan where the median
    is 0; does the max sit on the first token [B]).

    >>> h = torch.tensor([[[1.0, -8.0], [2.0, 1.0]], [[1.0, 2.0], [4.0, 2.0]]])
    >>> massive(h)
    (tensor([8., 2.]), tensor([ True, False]))
    """
    flat = hidden.float().abs().flatten(1)  # (B, T * d)
    top, at = flat.max(-1)
    median = flat.median(-1).values
    ratio = torch.where(median > 0, top / median, torch.nan)
    return ratio, at < hidden.shape[-1]


def _reduce(layers: list[_Layer], hist_bins: int) -> Probes:
    out: dict[str, list[float | None]] = {
        "gate_score": [a.gate_sum / a.gate_n if a.gate_n else None for a in layers],
        "f_attn": [a.f_attn_sum / a.f_attn_n if a.f_attn_n else None for a in layers],
        "m_act": [a.m_act for a in layers],
        "massive_ratio": [a.ratio_sum / a.ratio_n if a.ratio_n else None for a in layers],
        "massive_first": [a.first_rows / a.rows if a.rows else None for a in layers],
        "mean_abs_pre": [a.abs_pre / a.n_sdpa for a in layers],
        "mean_abs_post": [a.abs_post / a.n_sdpa for a in layers],
    }
    for t in THRESHOLDS:
        for name in ("pre", "post", "scaled"):
            key = f"{t}_{name}"
            out[f"frac_below_{key}"] = [a.below[key] / a.n_sdpa if key in a.below else None for a in layers]
    hist = [(a.hist / a.hist.sum()).tolist() if a.hist is not None else [] for a in layers]
    histograms = {"gate_score": hist} if any(hist) else {}
    edges = np.linspace(0.0, 1.0, hist_bins + 1).tolist()
    return Probes(out, histograms, edges)
