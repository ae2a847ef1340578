"""Interop: the baseline family as a Hugging Face ``Qwen3ForCausalLM`` folder (config.json + model.safetensors).

A trained checkpoint written here loads with ``AutoModelForCausalLM.from_pretrained(out_dir)``, so lm-eval's
``hf`` model, vLLM and the rest of that ecosystem read it. Gated and other non-Qwen3 arms cannot be expressed by
that architecture and are refused with a ConfigError naming the field.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ablate.ablations.config import ModelConfig
from ablate.errors import ConfigError

log = logging.getLogger(__name__)

# ModelConfig fields whose non-default values Qwen3ForCausalLM has no way to express.
_QWEN3_DEFAULTS: dict[str, Any] = dict(
    gate=None, switch=None, sdpa_norm=False, sdpa_silu=False, sandwich_norm=False, output_clip=None,
    n_experts=0, qk_norm=True,
)


def hf_unsupported(cfg: ModelConfig) -> dict[str, Any]:
    """The fields of ``cfg`` that transformers' Qwen3 cannot express, with their values (empty = exportable)."""
    return {k: getattr(cfg, k) for k, v in _QWEN3_DEFAULTS.items() if getattr(cfg, k) != v}


def qwen3_config(cfg: ModelConfig) -> dict[str, Any]:
    """The ``config.json`` of the Qwen3 model equivalent to ``cfg``."""
    from transformers import Qwen3Config

    rope: dict[str, Any] = {"rope_type": "default", "rope_theta": cfg.rope_theta}
    max_pos = 32768
    if cfg.rope_yarn_factor > 1:
        rope = {
            "rope_type": "yarn", "rope_theta": cfg.rope_theta, "factor": cfg.rope_yarn_factor,
            "original_max_position_embeddings": cfg.rope_yarn_original_len,
        }
        max_pos = int(cfg.rope_yarn_original_len * cfg.rope_yarn_factor)
    hf = Qwen3Config(
        vocab_size=cfg.vocab_size, hidden_size=cfg.d_model, intermediate_size=cfg.ffn_dim,
        num_hidden_layers=cfg.n_layers, num_attention_heads=cfg.n_heads, num_key_value_heads=cfg.n_kv_heads,
        head_dim=cfg.head_dim, rms_norm_eps=cfg.norm_eps, initializer_range=cfg.init_std,
        tie_word_embeddings=cfg.tie_embeddings, rope_parameters=rope, max_position_embeddings=max_pos,
        max_window_layers=cfg.n_layers, use_sliding_window=False, sliding_window=None,
    )
    out = hf.to_dict()
    out["architectures"] = ["Qwen3ForCausalLM"]
    out["torch_dtype"] = "float32"
    return out


def hf_state_dict(state: Mapping[str, Any], cfg: ModelConfig) -> dict[str, Any]:
    """Rename a ``Decoder`` state dict to Qwen3's parameter names (contiguous copies, tied head left out)."""
    names = {"embed.weight": "model.embed_tokens.weight", "norm.weight": "model.norm.weight"}
    if not cfg.tie_embeddings:
        names["lm_head.weight"] = "lm_head.weight"
    per_layer = {
        "attn_norm.weight": "input_layernorm.weight",
        "attn.q_proj.weight": "self_attn.q_proj.weight",
        "attn.kv.k_proj.proj.weight": "self_attn.k_proj.weight",
        "attn.kv.v_proj.proj.weight": "self_attn.v_proj.weight",
        "attn.o_proj.weight": "self_attn.o_proj.weight",
        "attn.q_norm.weight": "self_attn.q_norm.weight",
        "attn.k_norm.weight": "self_attn.k_norm.weight",
        "ffn_norm.weight": "post_attention_layernorm.weight",
        "ffn.gate_proj.weight": "mlp.gate_proj.weight",
        "ffn.up_proj.weight": "mlp.up_proj.weight",
        "ffn.down_proj.weight": "mlp.down_proj.weight",
    }
    for i in range(cfg.n_layers):
        names.update({f"blocks.{i}.{ours}": f"model.layers.{i}.{theirs}" for ours, theirs in per_layer.items()})
    missing = sorted(set(names) - set(state))
    if missing:
        raise ConfigError(f"the model's weights lack {missing[:3]}; is it a Decoder built from this config?")
    return {theirs: state[ours].detach().to("cpu").contiguous().clone() for ours, theirs in names.items()}


def export_hf(model: Any, cfg: ModelConfig, out_dir: str | Path) -> Path:
    """Write ``model`` (a ``Decoder`` or its state dict) as a ``Qwen3ForCausalLM`` folder; returns ``out_dir``.

    Raises ConfigError for configs Qwen3 cannot express (gates, switch heads, SDPA norm/SiLU, sandwich norm,
    clipping, MoE, no q/k norm).
    """
    import json

    from safetensors.torch import save_file

    bad = hf_unsupported(cfg)
    if bad:
        fields = ", ".join(f"{k}={v!r}" for k, v in bad.items())
        raise ConfigError(
            f"transformers' Qwen3ForCausalLM cannot express {fields}; only the baseline family "
            "(baseline, kv-heads-x2, q-heads-x1.5 on a dense preset) exports to Hugging Face",
            where=f"model.{next(iter(bad))}",
        )
    state = model if isinstance(model, Mapping) else model.state_dict()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(qwen3_config(cfg), indent=2) + "\n")
    save_file(hf_state_dict(state, cfg), str(out / "model.safetensors"), metadata={"format": "pt"})
    log.info("exported %s as Qwen3ForCausalLM to %s", cfg.preset, out)
    return out
