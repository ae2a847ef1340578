"""The fused G1 projection: the query projection and the SDPA-output gate's projection in one weight (all
query rows, then all gate rows), is the same function as the two projections apart, with the same parameter
count, for every input-dependent G1 variant of the catalogue; it converts to Qwen3-Next's per-head ``q_proj``
layout, and checkpoints in that layout (ablate's before) load and resume."""

from __future__ import annotations

import pytest
import torch

from ablate.ablations import VARIANTS, ModelConfig, apply_variant, build_model, count_params
from ablate.ablations.gates import (
    QueryGateProjection,
    SplitLinear,
    fuse_query_gate,
    fuses_g1,
    query_gate_rows,
    split_query_gate,
)

FUSED = [n for n, v in VARIANTS.items() if not v.requires_moe and fuses_g1(apply_variant(ModelConfig(),
                                                                                         n).gate)]


def test_the_catalogue_has_fused_variants() -> None:
    assert {"sdpa-elementwise", "sdpa-headwise", "sdpa-head-shared", "sdpa-additive-silu"} <= set(FUSED)
    assert "sdpa-input-independent" not in FUSED and "v-elementwise" not in FUSED


def pair(name: str, **over) -> tuple[ModelConfig, torch.nn.Module, torch.nn.Module]:
    """A fused model and an unfused one holding the same weights."""
    cfg = apply_variant(ModelConfig(preset="tiny", **over), name)
    torch.manual_seed(0)
    unfused = build_model(cfg, fuse_g1=False)
    fused = build_model(cfg)
    fused.load_state_dict(unfused.state_dict())  # the fusing load hook merges the gate rows into q_proj
    return cfg, fused, unfused


@pytest.mark.parametrize("name", FUSED)
def test_fused_equals_unfused(name: str) -> None:
    cfg, fused, unfused = pair(name)
    assert isinstance(fused.blocks[0].attn.q_proj, QueryGateProjection)
    n = sum(p.numel() for p in fused.parameters())
    assert n == sum(p.numel() for p in unfused.parameters()) == count_params(cfg).total
    idx = torch.randint(0, cfg.vocab_size, (2, 12))
    a, b = fused(idx, probe=True), unfused(idx, probe=True)
    assert torch.allclose(a.logits, b.logits, atol=2e-6)
    assert torch.allclose(a.probes[0]["gate"], b.probes[0]["gate"], atol=1e-6)
    a.logits.square().mean().backward()
    b.logits.square().mean().backward()
    for fb, ub in zip(fused.blocks, unfused.blocks, strict=True):
        g_q, g_gate = fb.attn.q_proj.proj.weight.grad.split(fb.attn.q_proj.rows)
        assert torch.allclose(g_q, ub.attn.q_proj.weight.grad, atol=1e-6)
        assert torch.allclose(g_gate, ub.attn.gate_sdpa.proj.weight.grad, atol=1e-6)
        assert torch.allclose(fb.ffn.down_proj.weight.grad, ub.ffn.down_proj.weight.grad, atol=1e-6)


@pytest.mark.parametrize("used", [(0, 1), (0,), (1,)], ids=["both", "query-only", "gate-only"])
def test_split_linear_gradients_are_the_linear_layers(used: tuple[int, ...]) -> None:
    """The blocks are ``x W_i^T``, contiguous, and their backward (no concatenation) is the exact gradient,
    also when a block is unused (its weight rows get zeros)."""
    x = torch.randn(2, 5, 7, dtype=torch.float64, requires_grad=True)
    w = torch.randn(9, 7, dtype=torch.float64, requires_grad=True)
    blocks = SplitLinear.apply(x, w, (6, 3))
    assert all(b.is_contiguous() for b in blocks)
    # a matmul split into blocks of rows need not round like the whole one (BLAS kernels differ between CPUs):
    # equal within float64's rounding, not bitwise
    torch.testing.assert_close(torch.cat(blocks, -1), torch.nn.functional.linear(x, w),
                               rtol=1e-12, atol=1e-12)
    assert torch.autograd.gradcheck(lambda x, w: tuple(SplitLinear.apply(x, w, (6, 3))[i] for i in used),
                                    (x, w))


def test_split_linear_under_autocast_keeps_the_parameters_dtype() -> None:
    x, w = torch.randn(4, 7, requires_grad=True), torch.randn(9, 7, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        q, g = SplitLinear.apply(x, w, (6, 3))
    assert q.dtype == g.dtype == torch.bfloat16
    (q.float().sum() + g.float().square().sum()).backward()
    assert x.grad is not None and w.grad is not None
    assert (x.grad.dtype, w.grad.dtype) == (torch.float32, torch.float32)


def test_a_gate_bias_stays_under_its_unfused_name() -> None:
    from ablate.ablations.config import GateSpec

    spec = GateSpec(position="G1", bias=True)
    cfg = ModelConfig(preset="tiny", gate=spec)
    torch.manual_seed(0)
    unfused = build_model(cfg, fuse_g1=False)
    with torch.no_grad():
        for b in unfused.blocks:
            b.attn.gate_sdpa.proj.bias.normal_()
    fused = build_model(cfg)
    fused.load_state_dict(unfused.state_dict())
    assert "blocks.0.attn.gate_sdpa.proj.bias" in dict(fused.named_parameters())
    idx = torch.randint(0, cfg.vocab_size, (1, 9))
    assert torch.allclose(fused(idx).logits, unfused(idx).logits, atol=2e-6)


def test_query_rows_then_gate_rows_and_the_qwen3_next_layout() -> None:
    """Ours: ``q`` is the first H * dk rows of the one weight, the gate's logits the rest. transformers'
    Qwen3NextAttention reads its q_proj output as ``chunk(view(..., H, 2 * dk), 2)``: query, gate, per
    head."""
    cfg, fused, unfused = pair("sdpa-elementwise")
    proj, ref = fused.blocks[0].attn.q_proj, unfused.blocks[0].attn
    x = torch.randn(2, 5, cfg.d_model)
    ours_q, ours_g = proj(x)
    out = x @ proj.proj.weight.T
    n = cfg.n_heads * cfg.head_dim
    # the blocks' matmuls against the whole one: float32 rounding, not bitwise (kernels differ between CPUs)
    torch.testing.assert_close(out[..., :n].unflatten(-1, (cfg.n_heads, -1)), ours_q, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out[..., n:].unflatten(-1, (cfg.n_heads, -1)), ours_g, rtol=1e-5, atol=1e-6)
    assert torch.allclose(ours_q.flatten(-2), x @ ref.q_proj.weight.T, atol=1e-6)
    assert torch.allclose(ours_g.flatten(-2), x @ ref.gate_sdpa.proj.weight.T, atol=1e-6)
    rows = query_gate_rows(fused.state_dict(), "blocks.0.attn.", cfg.n_heads, cfg.head_dim)
    theirs = fuse_query_gate(*rows, cfg.n_heads)  # [H * 2 dk, d], per head [q_h ; g_h]
    q, g = torch.chunk((x @ theirs.T).view(2, 5, cfg.n_heads, 2 * cfg.head_dim), 2, dim=-1)
    assert torch.allclose(q, ours_q, atol=1e-6) and torch.allclose(g, ours_g, atol=1e-6)
    assert all(torch.equal(a, b) for a, b in zip(split_query_gate(theirs, cfg.n_heads, cfg.head_dim), rows,
                                                     strict=True))


def per_head_state(model: torch.nn.Module, cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """``model``'s state dict as ablate wrote it before the contiguous layout: ``q_proj.weight`` per head."""
    state = {}
    for key, value in model.state_dict().items():
        if key.endswith("q_proj.proj.weight"):
            key, value = key.replace(".proj.weight", ".weight"), fuse_query_gate(
                *value.tensor_split([cfg.n_heads * cfg.head_dim]), cfg.n_heads)
        state[key] = value
    return state


@pytest.mark.parametrize("name", ["sdpa-elementwise", "sdpa-headwise"])
def test_a_per_head_checkpoint_loads_as_the_same_function(name: str) -> None:
    cfg, fused, _ = pair(name)
    old = per_head_state(fused, cfg)
    assert "blocks.0.attn.q_proj.weight" in old and "blocks.0.attn.q_proj.proj.weight" not in old
    loaded = build_model(cfg)
    loaded.load_state_dict(old)
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), fused.state_dict().values(),
                                                     strict=True))
    idx = torch.randint(0, cfg.vocab_size, (1, 9))
    assert torch.equal(loaded(idx).logits, fused(idx).logits)


def test_a_per_head_checkpoint_resumes_with_its_adam_moments_reordered() -> None:
    """Lightning's checkpoint of a run from before: the weights and AdamW's moments of ``q_proj`` per head;
    ``LitDecoder.on_load_checkpoint`` reorders both before Lightning restores them."""
    from ablate.config import TrainConfig
    from ablate.runner.module import LitDecoder, stack_per_head_gates

    cfg, fused, _ = pair("sdpa-elementwise")
    lit = LitDecoder(fused, TrainConfig(steps=2))
    opt = lit.configure_optimizers()["optimizer"]
    lit.model(torch.randint(0, cfg.vocab_size, (2, 8))).logits.square().mean().backward()
    opt.step()
    today = {"state_dict": lit.state_dict(), "optimizer_states": [opt.state_dict()]}
    per_head = per_head_state(fused, cfg)
    old = {"state_dict": {f"model.{k}": v for k, v in per_head.items()},
           "optimizer_states": [opt.state_dict()]}
    i = next(i for i, p in enumerate(p for g in opt.param_groups for p in g["params"])
             if p is fused.blocks[0].attn.q_proj.proj.weight)
    moments = old["optimizer_states"][0]["state"][i] = dict(old["optimizer_states"][0]["state"][i])
    for key in ("exp_avg", "exp_avg_sq"):
        moments[key] = fuse_query_gate(*moments[key].tensor_split([cfg.n_heads * cfg.head_dim]), cfg.n_heads)
    assert stack_per_head_gates(old, fused) == cfg.n_layers
    assert old["state_dict"].keys() == today["state_dict"].keys()
    assert all(torch.equal(old["state_dict"][k], v) for k, v in today["state_dict"].items())
    for key in ("exp_avg", "exp_avg_sq"):
        assert torch.equal(old["optimizer_states"][0]["state"][i][key],
                           today["optimizer_states"][0]["state"][i][key])
    assert stack_per_head_gates(old, fused) == 0  # a checkpoint of today is left alone


def test_a_run_cut_in_the_per_head_layout_resumes_to_the_same_losses(tmp_path) -> None:
    """A run of a G1 variant cut at step 6, its checkpoint rewritten as ablate wrote it before
    (``q_proj.weight`` per head, AdamW's moments too), resumes to exactly the losses of the run never cut."""
    import threading

    from ablate.config import RunConfig
    from ablate.layout import CHECKPOINT
    from ablate.runner import RunInterrupted, run_one
    from ablate.runner.module import param_groups

    config = RunConfig.model_validate({
        "model": {"preset": "tiny"}, "variant": "sdpa-elementwise",
        "data": {"train": [{"kind": "builtin", "name": "arithmetic"}], "heldout": {}, "seq_len": 32,
                 "stream_tokens": 20_000},
        "train": {"steps": 10, "batch_size": 4, "lr": 1e-2, "checkpoint_every": 100},
        "eval": {"probes": False}})
    whole = run_one(config, tmp_path / "whole", run_id="w")
    stop = threading.Event()
    with pytest.raises(RunInterrupted):
        run_one(config, tmp_path / "cut", run_id="c", on_step=lambda row: row["step"] == 5 and stop.set(),
                stop=stop)
    path = tmp_path / "cut" / CHECKPOINT
    ckpt = torch.load(path, weights_only=False)
    cfg = apply_variant(config.model, config.variant)
    model = build_model(cfg)
    names = {id(p): n for n, p in model.named_parameters()}
    order = [names[id(p)] for g in param_groups(model, 0.0) for p in g["params"]]

    def per_head(w: torch.Tensor) -> torch.Tensor:
        return fuse_query_gate(*w.tensor_split([cfg.n_heads * cfg.head_dim]), cfg.n_heads)

    for i, name in enumerate(order):
        if name.endswith("q_proj.proj.weight"):
            key = f"model.{name}"
            ckpt["state_dict"][key.replace(".proj.weight", ".weight")] = per_head(ckpt["state_dict"].pop(key))
            moments = ckpt["optimizer_states"][0]["state"][i]
            moments.update({k: per_head(moments[k]) for k in ("exp_avg", "exp_avg_sq")})
    torch.save(ckpt, path)
    resumed = run_one(config, tmp_path / "cut", run_id="c")
    assert resumed.resumed_from == 6
    assert resumed.metrics["loss"] == whole.metrics["loss"]
