"""The levers the attention-sink study (the shipped `lite`) turns, and a few steps of that study itself."""

from __future__ import annotations

import pytest
import torch

from ablate.ablations import ModelConfig, build_model
from ablate.config import TrainConfig
from ablate.runner.module import LitDecoder, param_groups
from ablate.studies import shipped


@pytest.mark.parametrize("decay_embeddings", [False, True])
def test_decay_embeddings_moves_the_tied_embedding_into_the_decayed_group(decay_embeddings):
    model = build_model(ModelConfig(preset="tiny"))
    decay, no_decay = param_groups(model, 0.1, decay_embeddings=decay_embeddings)
    assert any(p is model.embed.weight for p in decay["params"]) is decay_embeddings
    assert model.lm_head.weight is model.embed.weight  # tied: one parameter, listed once
    norms = [m.weight for m in model.modules() if type(m).__name__ == "RMSNorm"]
    assert all(any(n is p for p in no_decay["params"]) for n in norms)  # norms are never decayed
    assert sum(p.numel() for g in (decay, no_decay) for p in g["params"]) == sum(
        p.numel() for p in model.parameters()
    )
    lit = LitDecoder(model, TrainConfig(decay_embeddings=decay_embeddings, weight_decay=0.5))
    groups = lit.configure_optimizers()["optimizer"].param_groups
    decayed = [p for g in groups if g["weight_decay"] == 0.5 for p in g["params"]]
    assert any(p is model.embed.weight for p in decayed) is decay_embeddings


def test_a_decayed_embedding_shrinks_without_gradient():
    """AdamW's decoupled decay: a parameter with zero gradient shrinks by lr * wd per step, only when
    decayed."""
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


def test_a_few_steps_of_the_lite_study(tmp_path, module_cache):
    """The shipped `lite` study expands to its 27 runs, every row starting at BOS; one G1 run trains a few
    steps and reports its probes per layer (the study itself takes ~40 minutes: it is not a test)."""
    from ablate.grid import expand, load_grid
    from ablate.runner import run_one

    path = shipped()["lite"]
    small = ["train.steps=6", "eval.heldout_tokens=128", "eval.probe_tokens=64", "data.stream_tokens=20000"]
    runs = expand(load_grid(path, sets=small))
    assert len(runs) == 27 and {r.config.data.row_start for r in runs} == {"bos"}
    by = {(r.config.variant, r.config.train.lr) for r in runs}
    assert ("baseline", 0.1) in by and ("sdpa-elementwise", 0.1) in by and ("sdpa-headwise", 0.1) not in by
    one = next(r for r in runs if r.config.variant == "sdpa-elementwise" and r.config.train.lr == 0.03)
    result = run_one(one.config, tmp_path / "run", run_id=one.run_id)
    s = result.summary
    assert result.status == "done" and len(result.probes["f_attn"]) == 2 and len(result.probes["m_act"]) == 2
    assert 0 < s["f_attn"] < 1 and 0 < s["gate_score"] < 1 and s["m_act"] > 0


def test_the_sinks_study_shares_the_lite_studys_baseline_and_g1_runs():
    """The shipped `sinks` study: lite's base unchanged, so its baseline and G1 runs are lite's (one store
    trains them once), beside the four sink arms, lr 3e-2 only, seeds 0-2."""
    import yaml

    from ablate.ablations.variants import VARIANTS
    from ablate.grid import expand, load_grid

    sinks, lite = (yaml.safe_load(shipped()[name].read_text()) for name in ("sinks", "lite"))
    assert sinks["base"] == lite["base"]
    runs = {r.run_id: r.config for r in expand(load_grid(shipped()["sinks"]))}
    lite_ids = {r.run_id for r in expand(load_grid(shipped()["lite"]))}
    arms = ["baseline", "sdpa-elementwise", "sdpa-headwise",
            "sink-learned", "softmax-off-by-one", "sigmoid-attention", "softpick"]
    assert sorted({c.variant for c in runs.values()}) == sorted(arms) and set(arms) <= set(VARIANTS)
    assert (
        len(runs) == 21
        and {c.train.lr for c in runs.values()} == {3e-2}
        and {c.seed for c in runs.values()} == {0, 1, 2}
    )
    shared = {i for i in runs if i in lite_ids}
    assert {(runs[i].variant, runs[i].seed) for i in shared} == {(v, s) for v in arms[:3] for s in range(3)}
