"""The model zoo: ``ModelConfig`` -> a Qwen3-style decoder with every attention-gating arm of the paper.

Importing this package never imports torch: ``build_model`` and ``export_hf`` import the torch modules when
called; the catalogue (``VARIANTS``, ``apply_variant``) and counting (``count_params``...) are torch-free at
import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ablate.ablations.config import GateSpec, ModelConfig, SwitchSpec
from ablate.ablations.params import ParamCount, added_params, count_params, match_ffn
from ablate.ablations.presets import PRESETS
from ablate.ablations.variants import VARIANTS, Rel, Variant, apply_variant, get_variant

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    import torch

    from ablate.ablations.model import Decoder


def build_model(cfg: ModelConfig, *, device: torch.device | str | None = None, fuse_g1: bool = True,
                seed: int | None = None) -> Decoder:
    """The decoder for ``cfg`` (see ``ablate.ablations.model.build_model``); imports torch on first call."""
    from ablate.ablations.model import build_model as _build

    return _build(cfg, device=device, fuse_g1=fuse_g1, seed=seed)


def export_hf(model: torch.nn.Module | Mapping[str, torch.Tensor], cfg: ModelConfig, out_dir: str | Path,
              **kwargs: int | None) -> Path:
    """Write ``model`` as a transformers folder: Qwen3, Qwen3-MoE or Qwen3-Next (see
    ``ablate.ablations.export``)."""
    from ablate.ablations.export import export_hf as _export

    return _export(model, cfg, out_dir, **kwargs)


__all__ = [
    "GateSpec", "ModelConfig", "SwitchSpec", "PRESETS", "VARIANTS", "Variant", "Rel", "apply_variant",
    "get_variant", "build_model", "count_params", "ParamCount", "added_params", "match_ffn", "export_hf",
]
