"""The attention weights slot: each arm against its paper's formula on hand-set tensors, its parameters, its
probes.

The references below are written scalar by scalar from the papers' formulas (query t sees keys 0..t):
softmax e^s_j / sum e^s; a sink of logit c adds e^c to the denominator (gpt-oss learned; Miller's off-by-one c
= 0); sigmoid 1 / (1 + e^-(s_j - log T)) (Ramapuram et al.); softpick max(e^s_j - 1, 0) / (sum |e^s - 1| +
eps) (Zuhri et al.).
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
import torch
from probe_models import T, constructed, uniform_share, windows

from ablate.ablations import VARIANTS, ModelConfig, added_params, apply_variant, build_model, count_params
from ablate.ablations.weights import SOFTPICK_EPS, Softmax, weights_for
from ablate.runner.evaluate import probe

CPU = torch.device("cpu")
# the catalogue's sink fixes that fill the weights slot, and the ModelConfig value each sets (the 2025-26 arms
# of the same slot: tests/unit/ablations/test_attn_2025.py)
SINK_FIXES = ("sink-learned", "softmax1", "sigmoid", "softpick")
ARMS = {name: v.changes["attn_weights"] for name, v in VARIANTS.items()
        if v.changes.get("attn_weights") in SINK_FIXES}
SINKS = [0.7, -1.5]  # the learned sink's hand-set logits, per query head


def reference_row(kind: str, s: list[float], head: int) -> list[float]:
    """The weights of one query over its visible keys' scores ``s``, from the paper's formula."""
    e = [math.exp(x) for x in s]
    if kind == "softmax":
        return [x / sum(e) for x in e]
    if kind in ("sink-learned", "softmax1"):
        c = SINKS[head] if kind == "sink-learned" else 0.0
        return [x / (math.exp(c) + sum(e)) for x in e]
    if kind == "sigmoid":
        return [1 / (1 + math.exp(-(x - math.log(len(SCORES[0][0]))))) for x in s]
    assert kind == "softpick"
    return [max(x - 1, 0.0) / (sum(abs(y - 1) for y in e) + SOFTPICK_EPS) for x in e]


# 2 query heads sharing 1 kv head, T = 3, dk = 2: q = (a, 0) * sqrt(2) and k = (b, c) give score a * b exactly
# (heads, T, dk), before sqrt 2
Q = [[[1.0, 0.0], [-0.5, 0.0], [2.0, 0.0]], [[0.0, 0.0], [1.5, 0.0], [-1.0, 0.0]]]
K = [[0.4, 9.0], [-1.2, 9.0], [0.8, 9.0]]  # (T, dk): the second dim meets q's zero
V = [[1.0, 0.0], [0.0, 1.0], [2.0, -3.0]]
SCORES = [[[Q[h][t][0] * K[j][0] for j in range(3)] for t in range(3)] for h in range(2)]  # (heads, T, T)


def weights_module(kind: str, **fields) -> torch.nn.Module:
    """The weights module of ``kind`` for the hand-set tensors' shapes (2 query heads, 1 kv head, dk 2)."""
    cfg = ModelConfig(preset="tiny", n_heads=2, n_kv_heads=1, head_dim=2, attn_weights=kind, **fields)
    return weights_for(cfg)


def hand_set() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    q = torch.tensor(Q).unsqueeze(0) * math.sqrt(2)  # (1, 2, 3, 2)
    return q, torch.tensor(K)[None, None], torch.tensor(V)[None, None]  # (1, 1, 3, 2)


@pytest.mark.parametrize("kind", ["softmax", *ARMS.values()], ids=["softmax", *ARMS])
def test_weights_match_the_papers_formula_on_hand_set_tensors(kind: str) -> None:
    module = weights_module(kind)
    if kind == "sink-learned":
        with torch.no_grad():
            module.sink.copy_(torch.tensor(SINKS))
    q, k, v = hand_set()
    y_probe, p = module(q, k, v, probe=True)
    y_train, none = module(q, k, v, probe=False)
    assert none is None and p.shape == (1, 2, 3, 3)
    for h in range(2):
        for t in range(3):
            row = reference_row(kind, SCORES[h][t][: t + 1], h)
            assert p[0, h, t, : t + 1].tolist() == pytest.approx(row, rel=1e-5, abs=1e-7)
            assert p[0, h, t, t + 1:].tolist() == [0.0] * (2 - t)  # causal: no weight on later keys
            y = [sum(w * V[j][d] for j, w in enumerate(row)) for d in range(2)]
            assert y_probe[0, h, t].tolist() == pytest.approx(y, rel=1e-5, abs=1e-6)
            assert y_train[0, h, t].tolist() == pytest.approx(y, rel=1e-5, abs=1e-6)


def test_softpick_is_stable_where_exp_overflows() -> None:
    q, k, v = hand_set()
    _, p = weights_module("softpick")(q * 200, k, v, probe=True)  # e^320 is inf in float32
    assert torch.isfinite(p).all()
    # scores 160, -480, 320: e^-160 ~ 0
    assert p[0, 0, 2].tolist() == pytest.approx([0.0, 0.0, 1.0], abs=1e-6)


def test_default_weights_are_sdpa_unchanged() -> None:
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 4, 8, 16), torch.randn(2, 2, 8, 16), torch.randn(2, 2, 8, 16)
    y, _ = Softmax()(q, k, v)
    assert torch.equal(y,
                       torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                                        enable_gqa=True))
    assert isinstance(build_model(ModelConfig(preset="tiny")).blocks[0].attn.weights, Softmax)


@pytest.mark.parametrize("name", list(ARMS), ids=list(ARMS))
def test_arm_parameters_are_counted(name: str) -> None:
    cfg = apply_variant(ModelConfig(preset="tiny"), name)
    model = build_model(cfg)
    # one logit per head and layer
    expected = cfg.n_layers * cfg.n_heads if ARMS[name] == "sink-learned" else 0
    assert added_params(ModelConfig(preset="tiny"), name) == expected
    assert count_params(cfg).total == sum(p.numel() for p in model.parameters())
    assert added_params(ModelConfig(preset="paper-dense-1.7b"), name) == (28 * 16 if expected else 0)


@pytest.mark.parametrize("name", list(ARMS), ids=list(ARMS))
def test_probe_path_gives_the_training_logits(name: str) -> None:
    torch.manual_seed(0)
    model = build_model(apply_variant(ModelConfig(preset="tiny"), name))
    with torch.no_grad():
        for block in model.blocks:  # a sink off zero, so the learned one is seen
            getattr(block.attn.weights, "sink", torch.zeros(0)).fill_(1.3)
        idx = torch.randint(0, 320, (2, 12))
        out, probed = model(idx), model(idx, probe=True)
    assert torch.allclose(out.logits, probed.logits, atol=1e-5)
    assert all(p["attn"].shape == (2, 4, 12, 12) for p in probed.probes)


# F-Attn of each arm on the hand-built decoders of test_probes: all-zero queries (every score 0), sink logit 0
UNIFORM_F_ATTN = {
    "sink-learned": float(sum(Fraction(1, t + 2) for t in range(1, T)) / (T - 1)),  # the sink counts as a key
    "softmax1": float(sum(Fraction(1, t + 2) for t in range(1, T)) / (T - 1)),
    "sigmoid": 1 / (1 + T),  # sigmoid(-log T) on every visible key
    "softpick": 0.0,  # e^0 - 1 = 0: no key is picked
}


@pytest.mark.parametrize("name", list(ARMS), ids=list(ARMS))
def test_arm_probes_f_attn_and_m_act(name: str) -> None:
    assert set(UNIFORM_F_ATTN) == set(ARMS.values())
    sink = probe(constructed(name), windows(), hist_bins=10, device=CPU)  # BOS key meets every query at 3600
    assert sink.layers["f_attn"] == pytest.approx([1.0, 1.0], abs=1e-6)
    assert sink.layers["m_act"] == [1.0, 1.0]
    uniform = probe(constructed(name, sink_heads=0), windows(), hist_bins=10, device=CPU)
    assert uniform.layers["f_attn"] == pytest.approx([UNIFORM_F_ATTN[ARMS[name]]] * 2, rel=1e-6, abs=1e-9)
    assert UNIFORM_F_ATTN[ARMS[name]] != pytest.approx(uniform_share(T))  # each differs from plain softmax's


def test_arms_are_refused_by_export_in_one_line() -> None:
    from ablate.ablations.export import hf_unsupported

    for name, kind in ARMS.items():
        assert hf_unsupported(apply_variant(ModelConfig(preset="tiny"), name)) == {"attn_weights": kind}


def test_arms_are_listed_with_their_source() -> None:
    import json

    from typer.testing import CliRunner

    from ablate.cli import app

    result = CliRunner().invoke(app, ["variants", "--format", "json"])
    assert result.exit_code == 0, result.output
    sources = {r["name"]: r["source"] for r in json.loads(result.output)}
    authors = {"sink-learned": "gpt-oss", "softmax1": "Miller 2023", "sigmoid": "Ramapuram et al. 2024",
               "softpick": "Zuhri et al. 2025"}
    for name, kind in ARMS.items():
        assert authors[kind] in sources[name]
    assert "2505.06708" in sources["sdpa-elementwise"]


@pytest.mark.slow
def test_arms_train_and_are_probed_and_stored_through_ablate_run(tmp_path, module_cache) -> None:
    from tiny_grids import train_and_probe

    runs, probes = train_and_probe(tmp_path, "sinks-e2e", list(ARMS))
    assert sorted(runs["variant"]) == sorted(ARMS) and set(runs["status"]) == {"done"}
    tiny = ModelConfig(preset="tiny")
    for rid, variant in runs["variant"].items():
        assert runs.loc[rid, "params"] == count_params(apply_variant(tiny, variant)).total
        assert runs.loc[rid, "added_params"] == added_params(tiny, variant)
        mine = probes[probes["run_id"] == rid].set_index(["name", "layer"])["value"]
        f_attn = [mine[("f_attn", layer)] for layer in range(2)]
        # each arm's own weight on the first token, from its probe path
        assert all(0 <= f <= 1 for f in f_attn)
        assert runs.loc[rid, "f_attn"] == pytest.approx(sum(f_attn) / 2)
        assert mine[("m_act", 0)] > 0
