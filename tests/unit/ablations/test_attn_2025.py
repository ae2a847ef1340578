"""The field's 2025-26 attention arms beside G1: differential attention (and DIFF V2), forgetting attention,
selective attention and a G1 gate reading the first k channels. Each against its paper's formula on hand-set
tensors, in the training path and the probe path; their parameters, probes, refusals and bad input.

The references are written scalar by scalar from the papers (query t sees keys 0..t, scores s_tj = q_t k_j /
sqrt(dk)):
- differential (Ye et al.): a_tj = softmax(s¹)_tj - λ softmax(s²)_tj, λ = e^(λq1·λk1) - e^(λq2·λk2) + λ_init;
  o = Σ_j a_tj [v¹_j ; v²_j], y = o / rms(o) (1 - λ_init), its halves the pair's two heads;
- DIFF V2: y_t = Σ_j softmax(s¹)_tj v_j - sigmoid(w·x_t) Σ_j softmax(s²)_tj v_j;
- forgetting (Lin et al.): softmax over j of s_tj + Σ_{l=j+1..t} log sigmoid(w_f·x_l + b_f);
- selective (Leviathan et al.): softmax over j of s_tj - Σ_{j<i<t} ReLU(s⁰_ij) (j >= 1; head 0's scores s⁰).
"""

from __future__ import annotations

import json
import math
from fractions import Fraction

import pytest
import torch
from probe_models import T, constructed, uniform_share, windows
from typer.testing import CliRunner

from ablate.ablations import VARIANTS, ModelConfig, added_params, apply_variant, build_model, count_params
from ablate.ablations.differential import lambda_init_at
from ablate.ablations.flops import matmul_params
from ablate.ablations.weights import weights_for
from ablate.cli import app
from ablate.runner.evaluate import probe

CPU = torch.device("cpu")
NEW = ("differential", "diff-v2", "forgetting", "forgetting-pro", "selective")
# the catalogue's arms of this study, and the ModelConfig values that make each
ARMS = [name for name, v in VARIANTS.items() if v.changes.get("attn_weights") in NEW]
SPARSE = "sdpa-headwise-sparse"
TINY = ModelConfig(preset="tiny")

# T = 4, dk = 2: q = (a, 0) * sqrt(2) and k = (b, c) give the score a * b exactly
Q = [[[1.0, 0.0], [-0.5, 0.0], [2.0, 0.0], [0.7, 0.0]],
     [[0.3, 0.0], [1.5, 0.0], [-1.0, 0.0], [1.2, 0.0]]]  # (2 query heads, T, dk), before sqrt 2
K = [[[0.4, 9.0], [1.2, 9.0], [0.8, 9.0], [1.1, 9.0]],
     [[-0.6, 9.0], [0.9, 9.0], [0.2, 9.0], [-1.3, 9.0]]]  # (2 kv heads, T, dk)
V = [[[1.0, 0.0], [0.0, 1.0], [2.0, -3.0], [-1.0, 0.5]],
     [[0.5, 2.0], [-1.0, 1.0], [0.0, 0.0], [3.0, 1.0]]]  # (2 kv heads, T, dk)
X = [[0.5, -1.0], [2.0, 0.0], [-0.3, 0.8], [1.0, 1.0]]  # the block's input (T, d_model 2)


def scores(h: int, kv: int) -> list[list[float]]:
    return [[Q[h][t][0] * K[kv][j][0] for j in range(4)] for t in range(4)]


def softmax(row: list[float]) -> list[float]:
    e = [math.exp(x - max(row)) for x in row]
    return [x / sum(e) for x in e]


def tensors(kv_heads: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    q = torch.tensor(Q).unsqueeze(0) * math.sqrt(2)  # (1, 2, 4, 2)
    k, v = (torch.tensor(t[:kv_heads]).unsqueeze(0) for t in (K, V))  # (1, kv, 4, 2)
    return q, k, v, torch.tensor(X).unsqueeze(0)


def module(kind: str, *, n_heads: int = 2, n_kv_heads: int = 1, layer: int = 0, **fields) -> torch.nn.Module:
    cfg = ModelConfig(preset="tiny", n_heads=n_heads, n_kv_heads=n_kv_heads, head_dim=2, d_model=2,
                      attn_weights=kind, **fields)
    return weights_for(cfg, layer)


def both_paths(m: torch.nn.Module, kv_heads: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(y from the probe path, y from the training path, p)``, batch row 0."""
    q, k, v, x = tensors(kv_heads)
    with torch.no_grad():
        y_probe, p = m(q, k, v, probe=True, x=x)
        y_train, none = m(q, k, v, probe=False, x=x)
    assert none is None
    return y_probe[0], y_train[0], p[0]


@pytest.mark.parametrize(("layer", "fixed"), [(0, None), (3, None), (1, 0.3)], ids=["l1", "l4", "fixed-0.3"])
def test_differential_matches_the_papers_formula(layer: int, fixed: float | None) -> None:
    m = module("differential", n_kv_heads=2, layer=layer, diff_lambda_init=fixed)
    lq1, lk1, lq2, lk2 = [0.5, -0.2], [0.6, 0.3], [0.1, 0.4], [-0.5, 0.9]
    with torch.no_grad():
        m.lambdas.copy_(torch.tensor([lq1, lk1, lq2, lk2]))
        m.norm.weight.copy_(torch.tensor([1.0, 0.5, 2.0, 1.5]))
    lam_init = fixed if fixed is not None else 0.8 - 0.6 * math.exp(-0.3 * layer)  # layer l = layer + 1
    lam = (math.exp(sum(a * b for a, b in zip(lq1, lk1, strict=True)))
           - math.exp(sum(a * b for a, b in zip(lq2, lk2, strict=True))) + lam_init)
    y_probe, y_train, p = both_paths(m, kv_heads=2)
    assert p.shape == (1, 4, 4)  # one differential head
    s1, s2 = scores(0, 0), scores(1, 1)
    for t in range(4):
        a = [x - lam * y for x, y in zip(softmax(s1[t][: t + 1]), softmax(s2[t][: t + 1]), strict=True)]
        assert p[0, t, : t + 1].tolist() == pytest.approx(a, rel=1e-5, abs=1e-6)
        assert p[0, t, t + 1:].tolist() == [0.0] * (3 - t)
        o = [sum(w * V[0][j][d] for j, w in enumerate(a)) for d in range(2)]
        # the pair's values side by side
        o += [sum(w * V[1][j][d] for j, w in enumerate(a)) for d in range(2)]
        rms = math.sqrt(sum(c * c for c in o) / 4 + 1e-6)
        y = [c / rms * g * (1 - lam_init) for c, g in zip(o, [1.0, 0.5, 2.0, 1.5], strict=True)]
        for path in (y_probe, y_train):
            assert path[:, t].flatten().tolist() == pytest.approx(y, rel=1e-4, abs=1e-5)  # heads 0, 1


def test_lambda_init_follows_the_layer() -> None:
    assert [round(lambda_init_at(i), 4) for i in (0, 1, 2)] == [0.2, 0.3555, 0.4707]
    assert lambda_init_at(100) == pytest.approx(0.8)
    model = build_model(apply_variant(ModelConfig(preset="tiny", n_layers=3), "diff-attention-matched"))
    assert [b.attn.weights.lambda_init for b in model.blocks] == [lambda_init_at(i) for i in range(3)]


def test_diff_v2_matches_its_formula() -> None:
    m = module("diff-v2", n_heads=1, n_kv_heads=1)  # two query heads, one output head, one kv head
    with torch.no_grad():
        m.lambda_proj.weight.copy_(torch.tensor([[0.7, -0.4]]))
    y_probe, y_train, p = both_paths(m, kv_heads=1)
    assert p.shape == (1, 4, 4) and y_train.shape == (1, 4, 2)
    s1, s2 = scores(0, 0), scores(1, 0)  # the pair shares kv head 0
    for t in range(4):
        lam = 1 / (1 + math.exp(-(0.7 * X[t][0] - 0.4 * X[t][1])))  # per token
        a = [x - lam * y for x, y in zip(softmax(s1[t][: t + 1]), softmax(s2[t][: t + 1]), strict=True)]
        assert p[0, t, : t + 1].tolist() == pytest.approx(a, rel=1e-5, abs=1e-6)
        y = [sum(w * V[0][j][d] for j, w in enumerate(a)) for d in range(2)]
        for path in (y_probe, y_train):
            assert path[0, t].tolist() == pytest.approx(y, rel=1e-5, abs=1e-5)


def test_forgetting_matches_the_papers_formula() -> None:
    m = module("forgetting", forget_bias_init=0.25)
    assert m.bias.tolist() == [0.25, 0.25]
    w, b = [[0.9, -0.3], [-1.2, 0.6]], [0.25, 1.5]
    with torch.no_grad():
        m.proj.weight.copy_(torch.tensor(w))
        m.bias.copy_(torch.tensor(b))
    y_probe, y_train, p = both_paths(m, kv_heads=1)

    def log_f(h: int, t: int) -> float:
        return -math.log1p(math.exp(-(w[h][0] * X[t][0] + w[h][1] * X[t][1] + b[h])))

    for h in range(2):
        s = scores(h, 0)
        for t in range(4):
            decay = [sum(log_f(h, i) for i in range(j + 1, t + 1)) for j in range(t + 1)]
            row = softmax([s[t][j] + decay[j] for j in range(t + 1)])
            assert p[h, t, : t + 1].tolist() == pytest.approx(row, rel=1e-5, abs=1e-7)
            assert p[h, t, t + 1:].tolist() == [0.0] * (3 - t)
            y = [sum(r * V[0][j][d] for j, r in enumerate(row)) for d in range(2)]
            for path in (y_probe, y_train):
                assert path[h, t].tolist() == pytest.approx(y, rel=1e-5, abs=1e-6)


def test_selective_matches_the_papers_formula() -> None:
    y_probe, y_train, p = both_paths(module("selective"), kv_heads=1)
    s0 = scores(0, 0)
    # what head 0 selected away: F_tj = Σ_{j<i<t} ReLU(s0_ij) for keys j >= 1 (the first token is never
    # masked)
    F = [[sum(max(s0[i][j], 0.0) for i in range(j + 1, t)) if j >= 1 else 0.0 for j in range(4)]
         for t in range(4)]
    assert F[3][1] == pytest.approx(max(s0[2][1], 0.0)) and F[3][1] > 0  # the tensors select something
    for h in range(2):
        s = scores(h, 0)
        for t in range(4):
            row = softmax([s[t][j] - F[t][j] for j in range(t + 1)])
            assert p[h, t, : t + 1].tolist() == pytest.approx(row, rel=1e-5, abs=1e-7)
            y = [sum(r * V[0][j][d] for j, r in enumerate(row)) for d in range(2)]
            for path in (y_probe, y_train):
                assert path[h, t].tolist() == pytest.approx(y, rel=1e-5, abs=1e-6)


def test_the_sparse_gate_reads_only_its_first_channels() -> None:
    cfg = apply_variant(TINY, SPARSE)
    assert cfg.gate is not None and cfg.gate.input_dims == 12
    attn = build_model(cfg).blocks[0].attn
    gate = attn.gate_sdpa
    assert gate.proj.weight.shape == (4, 12)  # one score per query head from 12 channels
    torch.manual_seed(0)
    y, x = torch.randn(2, 5, 4, 16), torch.randn(2, 5, 64)
    w = gate.proj.weight.detach()
    with torch.no_grad():
        out, s = gate(y, x)
        changed = x.clone()
        changed[..., 12:] = torch.randn(2, 5, 52)  # channels the gate does not read
        out2, _ = gate(y, changed)
    expected = torch.sigmoid(x[..., :12] @ w.T).unsqueeze(-1)  # (B, T, q, 1)
    assert torch.allclose(out, y * expected, atol=1e-6) and torch.equal(out, out2)
    assert s.shape == (2, 5, 4, 1)
    # the query projection stays plain: the gate's logits are not fused into it
    assert attn.q_proj.weight.shape == (64, 64)


@pytest.mark.parametrize("name", [*ARMS, SPARSE])
def test_probe_path_gives_the_training_logits(name: str) -> None:
    torch.manual_seed(0)
    model = build_model(apply_variant(TINY, name))
    idx = torch.randint(0, 320, (2, 12))
    with torch.no_grad():
        out, probed = model(idx), model(idx, probe=True)
    assert torch.allclose(out.logits, probed.logits, atol=1e-5)


# the parameters each arm adds at the tiny preset (2 layers, d 64, q 4, k 2, dk 16), per layer
PER_LAYER = {
    "diff-attention": 4 * 8 + 16 - 2 * 8,  # λ vectors of dk/2; norm of dk; q/k norms shrink to dk/2
    "diff-attention-matched": 4 * 16 + 32,  # λ vectors of dk; norm of 2 dk
    "diff-v2": 64 * 4 * 16 + 64 * 4,  # a second query per head; W_λ
    "forgetting-attention": 64 * 4 + 4,  # w_f and b_f per head
    "forgetting-attention-rope": 64 * 4 + 4,
    # w_f, b_f; two shifts of 2 kv heads; per-head q/k norms replace the decoder's (16 each); the output's
    # per-head norm; the G1 elementwise gate
    "forgetting-pro": 64 * 4 + 4 + 2 * 64 * 2 + (4 + 2) * 16 - 2 * 16 + 4 * 16 + 64 * 64,
    "selective-attention": 0,
    SPARSE: 12 * 4,  # against sdpa-headwise's 64 * 4
}


@pytest.mark.parametrize("name", list(PER_LAYER))
def test_parameters_and_flops_are_counted(name: str) -> None:
    assert set(PER_LAYER) == {*ARMS, SPARSE}
    cfg = apply_variant(TINY, name)
    assert added_params(TINY, name) == 2 * PER_LAYER[name]
    assert count_params(cfg).total == sum(p.numel() for p in build_model(cfg).parameters())
    matmuls = {"diff-v2": 64 * 64 + 64 * 4, "forgetting-attention": 64 * 4,
               "forgetting-attention-rope": 64 * 4, "forgetting-pro": 64 * 4 + 2 * 64 * 2 + 64 * 64,
               SPARSE: 12 * 4}
    assert matmul_params(cfg) == matmul_params(TINY) + 2 * matmuls.get(name, 0)


def test_the_plan_shows_parameters_flops_and_memory(tmp_path, tmp_home) -> None:
    grid = tmp_path / "g.yaml"
    grid.write_text("name: arms\nbase:\n  model: {preset: tiny}\n  data: {seq_len: 64}\n"
                    f"grid:\n  variant: {['baseline', *ARMS, SPARSE]}\n  seed: [0]\n")
    out = CliRunner().invoke(app, ["plan", str(grid), "--format", "json"])
    assert out.exit_code == 0, out.output
    runs = {r["variant"]: r for r in json.loads(out.stdout)["runs"]}
    base = runs["baseline"]
    for name in [*ARMS, SPARSE]:
        assert runs[name]["added_params"] == added_params(TINY, name)
        assert runs[name]["memory_gb"] >= base["memory_gb"]
    assert runs["diff-v2"]["flops"] > base["flops"] and runs["selective-attention"]["flops"] == base["flops"]


# F-Attn on the hand-built decoders of test_probes: every query on the first token (sink heads), or zero
# queries (uniform scores); each arm's own weights. Zeroed parameters: lambda vectors 0 (so lambda =
# lambda_init), W_lambda 0 (sigmoid 0.5), the forget gate at sigmoid(0) = 1/2 per step, head 0's logits all 0
# or on the never-selected first key.
def forget_share(T: int) -> float:
    """Zero scores, f = 1/2: query t's share on key 0 is 2^-t / Σ_{m<=t} 2^-m; the mean over t = 1..T-1."""
    return float(sum(Fraction(1, 2**t) / (2 - Fraction(1, 2**t)) for t in range(1, T)) / (T - 1))


def differential(layer: int) -> tuple[float, float]:
    """Both maps alike, so A = (1 - λ_init) softmax: the share of either decoder, times 1 - λ_init."""
    return 1 - lambda_init_at(layer), (1 - lambda_init_at(layer)) * uniform_share(T)


F_ATTN = {  # (sink heads, uniform heads) per layer
    "diff-attention": differential,
    "diff-attention-matched": differential,
    "diff-v2": lambda layer: (0.5, 0.5 * uniform_share(T)),
    "forgetting-attention": lambda layer: (1.0, forget_share(T)),
    "forgetting-attention-rope": lambda layer: (1.0, forget_share(T)),
    "selective-attention": lambda layer: (1.0, uniform_share(T)),
    SPARSE: lambda layer: (1.0, uniform_share(T)),
}


@pytest.mark.parametrize("name", list(F_ATTN))
def test_f_attn_is_each_arms_own_weight_on_the_first_token(name: str) -> None:
    # forgetting-pro is left out: its key shift starts at alpha = sigmoid(0) = 1/2, which mixes each key
    # with the one before it, so the hand-built sink does not hold
    # (tests/unit/ablations/test_attn_reference.py checks its forward)
    assert set(F_ATTN) == {*ARMS, SPARSE} - {"forgetting-pro"}
    heads = apply_variant(TINY, name).query_heads
    sink = probe(constructed(name, sink_heads=heads), windows(), hist_bins=10, device=CPU)
    uniform = probe(constructed(name, sink_heads=0), windows(), hist_bins=10, device=CPU)
    expected = [F_ATTN[name](layer) for layer in range(2)]
    assert sink.layers["f_attn"] == pytest.approx([e[0] for e in expected], rel=1e-5)
    assert uniform.layers["f_attn"] == pytest.approx([e[1] for e in expected], rel=1e-5)


def test_arms_are_refused_by_export_in_one_line(tmp_path) -> None:
    from ablate.ablations.export import hf_unsupported

    for name in ARMS:
        cfg = apply_variant(TINY, name)
        # FoX Pro is refused at the first field export checks, its per-head output norm
        first = {"sdpa_norm": True} if name == "forgetting-pro" else {"attn_weights": cfg.attn_weights}
        assert hf_unsupported(cfg) == first
    assert hf_unsupported(apply_variant(TINY, SPARSE)) == {"gate.input_dims": 12}
    assert hf_unsupported(ModelConfig(preset="tiny", rope=False)) == {"rope": False}


def test_arms_are_listed_with_their_paper() -> None:
    result = CliRunner().invoke(app, ["variants", "--format", "json"])
    assert result.exit_code == 0, result.output
    sources = {r["name"]: r["source"] for r in json.loads(result.output)}
    papers = {"diff-attention": "2410.05258", "diff-attention-matched": "2410.05258",
              "diff-v2": "Differential Transformer V2", "forgetting-attention": "2503.02130",
              "forgetting-attention-rope": "2503.02130", "forgetting-pro": "2503.02130",
              "selective-attention": "2410.02703",
              SPARSE: "modded-nanogpt"}
    assert set(papers) == {*ARMS, SPARSE}
    for name, paper in papers.items():
        assert paper in sources[name]


@pytest.mark.parametrize(("model", "variant", "message"), [
    ("{preset: tiny, diff_lambda_init: 1.2}", "diff-attention-matched",
     r"base: model: diff_lambda_init \(1\.2\) must be in \[0, 1\)"),
    ("{preset: tiny, diff_lambda_init: -0.1}", "diff-attention",
     r"base: model: diff_lambda_init \(-0\.1\) must be in \[0, 1\)"),
    ("{preset: tiny, forget_bias_init: null}", "forgetting-attention",
     r"variant 'forgetting-attention' .* forget_bias_init is None: a forget gate without a bias"),
    ("{preset: tiny, n_kv_heads: 1}", "diff-attention-matched",
     r"differential attention pairs adjacent heads: n_heads \(4\) and n_kv_heads \(1\) must be even"),
    ("{preset: tiny, gate: {granularity: headwise, input_dims: 65}}", "baseline",
     r"base: model: gate\.input_dims \(k=65\) must be at most d_model \(64\)"),
], ids=["lambda-high", "lambda-negative", "forget-no-bias", "diff-odd-heads", "sparse-k-too-large"])
def test_bad_arguments_are_one_line_and_exit_2(tmp_path, tmp_home, model: str, variant: str,
                                               message: str) -> None:
    grid = tmp_path / "bad.yaml"
    grid.write_text(f"name: bad\nbase:\n  model: {model}\ngrid:\n  variant: [{variant}]\n  seed: [0]\n")
    for command in ("plan", "run"):
        out = CliRunner().invoke(app, [command, str(grid)])
        assert out.exit_code == 2, out.output
        line = out.output.strip()
        assert "\n" not in line and "Traceback" not in line
        assert line.startswith(f"error: {grid}: ") or line.startswith("error: bad.yaml")
        assert __import__("re").search(message, line), line
    assert list(tmp_home.iterdir()) == []


@pytest.mark.slow
def test_arms_train_and_are_probed_and_stored_through_ablate_run(tmp_path, module_cache) -> None:
    from tiny_grids import train_and_probe

    runs, probes = train_and_probe(tmp_path, "arms-e2e", [*ARMS, SPARSE])
    assert sorted(runs["variant"]) == sorted([*ARMS, SPARSE]) and set(runs["status"]) == {"done"}
    for rid, variant in runs["variant"].items():
        assert runs.loc[rid, "params"] == count_params(apply_variant(TINY, variant)).total
        mine = probes[probes["run_id"] == rid].set_index(["name", "layer"])["value"]
        f_attn = [mine[("f_attn", layer)] for layer in range(2)]
        assert runs.loc[rid, "f_attn"] == pytest.approx(sum(f_attn) / 2)
        assert all(-1 <= f <= 1 for f in f_attn)  # a differential arm's net weight may be negative
        assert mine[("m_act", 0)] > 0
    gated = runs[runs["variant"] == SPARSE].iloc[0]
    assert 0 < gated["gate_score"] < 1


def test_a_weights_plugin_gets_the_blocks_input_when_it_asks(tmp_path, monkeypatch, plugin_dir) -> None:
    """The slot passes ``x`` to a plugin whose forward names it; one without keeps its (q, k, v, probe)."""
    from ablate.ablations.config import PluginArm

    (tmp_path / "xweights.py").write_text('''
import torch
from pydantic import BaseModel
from torch import nn


class Reads(nn.Module):
    slot = "weights"
    seen: list = []

    class Args(BaseModel):
        pass

    def __init__(self, args, cfg):
        super().__init__()

    def forward(self, q, k, v, probe=False, x=None):
        Reads.seen.append(tuple(x.shape))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return y, None
''')
    monkeypatch.syspath_prepend(str(tmp_path))
    idx = torch.randint(0, 320, (2, 12))
    model = build_model(ModelConfig(preset="tiny", plugin=PluginArm(arm="xweights:Reads")))
    with torch.no_grad():
        model(idx)
    assert __import__("xweights").Reads.seen == [(2, 12, 64)] * 2  # each layer's normed input
    capped = build_model(ModelConfig(preset="tiny", plugin=PluginArm(arm="myattn:CappedSoftmax",
                                                                     args={"cap": 5})))
    weights = capped.blocks[0].attn.weights
    assert isinstance(weights, __import__("myattn").CappedSoftmax)
    assert "blocks.0.attn.weights.temperature" in capped.state_dict()  # its parameters' names unchanged
    with torch.no_grad():
        assert capped(idx).logits.shape == (2, 12, 320)


def test_the_study_shares_lites_and_the_quick_starts_runs() -> None:
    """attention-2025 has lite's base and attention-2025-text.yaml the quick start's, unchanged, so
    in one store their baseline and G1 runs are trained once; both hold the study's arms, seeds 0-2 (the text
    study FoX Pro too)."""
    from ablate.grid import expand, load_grid
    from ablate.studies import find

    arms = ["baseline", "sdpa-elementwise", "sdpa-headwise", "diff-attention-matched", "diff-attention",
            "diff-v2", "forgetting-attention", "forgetting-attention-rope", "selective-attention", SPARSE,
            "sink-learned"]
    text_arms = [*arms[:8], "forgetting-pro", *arms[8:]]
    for grid, other, lrs, shared, study_arms in [
        ("attention-2025", "lite", {3e-2},
         {(v, s, 3e-2) for v in arms[:3] for s in range(3)}, arms),
        ("attention-2025-text", "quickstart", {1.6e-2, 3.2e-2},
         {(v, s, 1.6e-2) for v in arms[:3] for s in range(2)}, text_arms),
    ]:
        runs = {r.run_id: r.config for r in expand(load_grid(find(grid)))}
        assert [v for v in study_arms if v in {c.variant for c in runs.values()}] == study_arms
        assert {c.train.lr for c in runs.values()} == lrs and {c.seed for c in runs.values()} == {0, 1, 2}
        assert len(runs) == len(study_arms) * len(lrs) * 3
        theirs = {r.run_id for r in expand(load_grid(find(other)))}
        assert {(runs[i].variant, runs[i].seed, runs[i].train.lr) for i in runs if i in theirs} == shared
