"""Training compute: FLOPs per token of a model, counted from the matmuls it actually has (gates included).

Per token of training (forward and backward, PaLM's appendix B convention)::

    flops_per_token = 6 * N + 12 * L * H * Q * T

- ``N``: the weights of the model's matrix multiplies that one token passes through, without the vocabulary
  matrices (the token embedding and the LM head, tied or not; Kaplan et al.'s non-embedding count). A gate's
  projection (``X W_theta``) is a matmul, so it is in ``N``: a gated variant costs more compute than its
  baseline by exactly its gate. Weights that multiply elementwise (RMSNorm scales, an input-independent gate's
  per-head logits) are not matmuls and are left out. In a mixture of experts only the ``moe_top_k`` routed
  experts (and, for switch heads, the ``top_k`` selected ones) are counted: active-parameter compute, what a
  sparse implementation spends (ablate's switch heads compute every expert and weight them, so they spend
  more).
- ``12 * L * H * Q * T``: the attention scores and the weighted sum (``QK^T`` and ``PV``, forward and
  backward) for ``L`` layers of ``H`` query heads of dimension ``Q`` over a context of ``T`` tokens, counted
  over the full ``T x T`` square as PaLM does (causal masking is not subtracted). ``H`` is the heads the query
  projection makes (``ModelConfig.query_heads``: DIFF V2 attends with two per output head). Differential
  attention's two half maps per pair of heads cost one map's scores and one weighted sum of the pair's values:
  the same term. Elementwise work on the ``T x T`` maps (a forget gate's decay, selective attention's running
  sum, softmax itself) is not a matmul and is not counted.

Counting walks the model built on the meta device, so it follows the model as built (a fused projection, a new
gate) without a second description of its shapes; tests/unit/ablations/test_flops.py checks it against torch's
FlopCounterMode over a real training step. Importing this module never imports torch.
"""

from __future__ import annotations

from ablate.ablations.config import ModelConfig
from ablate.ablations.meta_counts import kept


@kept("matmul_weights")
def _matmul_weights(cfg_json: str) -> int:
    from torch import nn

    from ablate.ablations.gates import ExpertProjection, ZeroHeadLinear
    from ablate.ablations.layers import MoE
    from ablate.ablations.model import build_model

    cfg = ModelConfig.model_validate_json(cfg_json)
    model = build_model(cfg, device="meta")
    total = 0.0
    counted: set[int] = set()  # Linear layers inside an expert module, already counted at its active share
    for name, module in model.named_modules():
        if isinstance(module, MoE):
            # stacked expert weights: each token goes through top_k of the n_experts
            total += (module.gate_up.numel() + module.down.numel()) * module.top_k / module.n_experts
        elif isinstance(module, ExpertProjection):
            n_experts = module.shape[1]
            top_k = cfg.switch.top_k if cfg.switch is not None else n_experts
            total += module.proj.weight.numel() * top_k / n_experts
            counted.add(id(module.proj))
        elif isinstance(module, ZeroHeadLinear):  # a gate's matmul that is no Linear (it starts at zero)
            total += module.weight.numel() + (module.bias.numel() if module.bias is not None else 0)
        elif isinstance(module, nn.Linear) and name != "lm_head" and id(module) not in counted:
            total += module.weight.numel() + (module.bias.numel() if module.bias is not None else 0)
    return round(total)


def matmul_params(cfg: ModelConfig) -> int:
    """``N`` of the FLOPs count: the active matmul weights one token passes through, vocabulary matrices
    excluded.

    >>> # 2 layers x (q, k, v, o: 4096 + 2048 + 2048 + 4096; FFN 36864)
    >>> matmul_params(ModelConfig(preset="tiny"))
    98304
    """
    return _matmul_weights(cfg.model_dump_json())


def attention_flops_per_token(cfg: ModelConfig, seq_len: int) -> int:
    """The attention term ``12 * L * H * Q * T`` (scores and weighted sum, forward and backward)."""
    return 12 * cfg.n_layers * cfg.query_heads * cfg.head_dim * seq_len


def flops_per_token(cfg: ModelConfig, seq_len: int) -> int:
    """Training FLOPs per token of ``cfg`` (the effective model: its variant already applied) at context
    ``seq_len``.

    >>> flops_per_token(ModelConfig(preset="tiny"), 256)  # 6 * 98304 + 12 * 2 * 4 * 16 * 256
    983040
    """
    return 6 * matmul_params(cfg) + attention_flops_per_token(cfg, seq_len)
