"""The levers the attention-sink study (grids/paper/lite.yaml) turns, and a few steps of that study itself."""

from __future__ import annotations

import pytest
import torch

from ablate.ablations import ModelConfig, build_model
from ablate.config import TrainConfig
from ablate.runner.module import LitDecoder, param_groups


@pytest.mark.parametrize("decay_embeddings", [False, True])
def test_decay_embeddings_moves_the_tied_embedding_into_the_decayed_group(decay_embeddings):
    model = build_model(ModelConfig(preset="tiny"))
    decay, no_decay = param_groups(model, 0.1, decay_embeddings=decay_embeddings)
    assert any(p is model.embed.weight for p in decay["params"]) is decay_embeddings
    assert model.lm_head.weight is model.embed.weight  # tied: one parameter, listed once
    norms = [m.weight for m in model.modules() if type(m).__name__ == "RMSNorm"]
    assert all(any(n is p for p in no_decay["params"]) for n in norms)  # norms are never decayed
    assert sum(p.numel() for g in (decay, no_decay) for p in g["params"]) == sum(p.numel() for p in model.parameters())
    lit = LitDecoder(model, TrainConfig(decay_embeddings=decay_embeddings, weight_decay=0.5))
    groups = lit.configure_optimizers()["optimizer"].param_groups
    decayed = [p for g in groups if g["weight_decay"] == 0.5 for p in g["params"]]
    assert any(p is model.embed.weight for p in decayed) is decay_embeddings


def test_a_decayed_embedding_shrinks_without_gradient():
    """AdamW's decoupled decay: a parameter with zero gradient shrinks by lr * wd per step, only when decayed."""
    model = build_model(ModelConfig(preset="tiny"))
    before = model.embed.weight.detach().clone()
    for decay in (False, True):
        with torch.no_grad():
            model.embed.weight.copy_(before)
        opt = torch.optim.AdamW(param_groups(model, 0.5, decay_embeddings=decay), lr=0.1)
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
        opt.step()
        expected = before * (1 - 0.1 * 0.5) if decay else before
        assert torch.allclose(model.embed.weight, expected)
