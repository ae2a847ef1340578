"""On a CUDA device (``pytest -m cuda``; ``bench/gpu_check.sh`` runs them): the model's forward and backward
on the GPU agree with the CPU's, and a tiny run trains in bf16-mixed through the runner. Skipped where no GPU
is visible. Also, everywhere: the GPU check's Python part runs end to end on CPU (``--cpu``), so the script is
known to work before it meets a GPU.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ablate.ablations import apply_variant, build_model
from ablate.ablations.config import ModelConfig
from ablate.config import RunConfig

ROOT = Path(__file__).resolve().parents[3]
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible")
# the paper's arms, the attention weights slot's sink fixes, the field's 2025-26 arms (attention-2025)
VARIANTS = ["baseline", "sdpa-elementwise", "sdpa-headwise", "v-elementwise", "sink-learned",
            "softmax-off-by-one", "softpick", "diff-attention", "diff-attention-matched", "diff-v2",
            "forgetting-attention", "forgetting-attention-rope", "selective-attention",
            "sdpa-headwise-sparse"]


@pytest.mark.cuda
@cuda
@pytest.mark.parametrize("variant", VARIANTS, ids=VARIANTS)
def test_forward_and_backward_on_cuda_match_the_cpu(variant, monkeypatch):
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)  # full fp32, like the CPU
    cfg = apply_variant(ModelConfig(preset="tiny"), variant)
    torch.manual_seed(0)
    model = build_model(cfg)
    tokens = torch.randint(0, cfg.vocab_size, (2, 24))
    grads = {}
    for device in ("cpu", "cuda"):
        model.to(device).zero_grad(set_to_none=True)
        out = model(tokens.to(device))
        loss = torch.nn.functional.cross_entropy(out.logits.flatten(0, 1).float(),
                                                 tokens.to(device).flatten())
        loss.backward()
        assert out.logits.shape == (2, 24, cfg.vocab_size) and out.logits.device.type == device
        grads[device] = (loss.item(), {n: p.grad.detach().cpu() for n, p in model.named_parameters()})
    assert grads["cuda"][0] == pytest.approx(grads["cpu"][0], rel=1e-4)
    for name, g in grads["cpu"][1].items():
        torch.testing.assert_close(grads["cuda"][1][name], g, rtol=1e-3, atol=1e-5, msg=name)


@pytest.mark.cuda
@cuda
@pytest.mark.parametrize("variant", VARIANTS, ids=VARIANTS)
def test_the_probe_path_on_cuda_matches_the_cpu(variant, monkeypatch):
    """The probe path (explicit attention weights, the F-Attn and activation probes) gives the CPU's
    tensors."""
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    cfg = apply_variant(ModelConfig(preset="tiny"), variant)
    torch.manual_seed(0)
    model = build_model(cfg).eval()
    tokens = torch.randint(0, cfg.vocab_size, (2, 24))
    outs = {}
    with torch.no_grad():
        for device in ("cpu", "cuda"):
            out = model.to(device)(tokens.to(device), probe=True)
            layers = [{k: v.float().cpu() for k, v in layer.items() if isinstance(v, torch.Tensor)}
                      for layer in out.probes]
            outs[device] = (out.logits.cpu(), layers)
    torch.testing.assert_close(outs["cuda"][0], outs["cpu"][0], rtol=1e-3, atol=1e-4)
    assert len(outs["cuda"][1]) == cfg.n_layers
    for layer, (gpu, cpu) in enumerate(zip(outs["cuda"][1], outs["cpu"][1], strict=True)):
        assert gpu.keys() == cpu.keys()
        for key, t in cpu.items():
            torch.testing.assert_close(gpu[key], t, rtol=1e-3, atol=1e-4, msg=f"layer {layer} {key}")


@pytest.mark.cuda
@cuda
@pytest.mark.parametrize("init_rng", ["sequential", "per-parameter"])
def test_a_tiny_run_trains_in_bf16_mixed_on_cuda(tmp_path, monkeypatch, init_rng):
    from ablate.runner import run_one

    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    cfg = RunConfig.model_validate({
        "model": {"preset": "tiny", "init_rng": init_rng}, "variant": "sdpa-elementwise",
        "data": {"seq_len": 32, "stream_tokens": 20000, "train": [{"kind": "builtin", "name": "arithmetic"}],
                 "heldout": {"arith": {"kind": "builtin", "name": "arithmetic"}}},
        "train": {"steps": 40, "batch_size": 8, "precision": "bf16-mixed"},
        "eval": {"heldout_tokens": 512, "probe_tokens": 128},
    })
    result = run_one(cfg, tmp_path / "run", run_id="cuda")
    assert result.status == "done"
    assert result.device == torch.cuda.get_device_name(0)
    losses = result.metrics["loss"]
    assert len(losses) == 40 and all(math.isfinite(x) for x in losses)
    assert sum(losses[-5:]) / 5 < 0.8 * sum(losses[:5]) / 5
    assert math.isfinite(result.summary["val_ppl"]) and result.summary["gate_score"] is not None


@pytest.mark.cuda
@cuda
def test_per_parameter_init_on_cuda_draws_the_cpus_weights():
    cfg = apply_variant(ModelConfig(preset="tiny", init_rng="per-parameter"), "sdpa-elementwise")
    on_cpu = build_model(cfg, seed=3).state_dict()
    on_gpu = build_model(cfg, seed=3, device=torch.device("cuda")).state_dict()
    assert on_gpu.keys() == on_cpu.keys()
    for name, t in on_cpu.items():
        assert on_gpu[name].device.type == "cuda" and torch.equal(on_gpu[name].cpu(), t), name


@pytest.mark.slow
def test_the_gpu_check_script_runs_on_cpu(tmp_path):
    out = tmp_path / "figures.json"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "ABLATE_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_check.py"), "--cpu", "--steps", "6",
                           "--warmup", "2", "--out", str(out)], env=env, capture_output=True, text=True,
                           timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "sdpa-elementwise / baseline step time:" in proc.stdout
    figures = json.loads(out.read_text())
    assert figures["device"] == "cpu" and figures["peak_tflops"] is None
    runs = [r for r in figures["rows"] if "variant" in r]
    assert [(r["size"], r["variant"]) for r in runs] == [
        ("tiny", "baseline"), ("tiny", "sdpa-elementwise"), ("tiny-3l", "baseline"),
        ("tiny-3l", "sdpa-elementwise")]
    assert runs[0]["params"] == 119168  # the tiny preset
    assert all(r["tokens_per_s"] > 0 and r["mfu"] is None for r in runs)
    # FLOPs per token: 6 N + 12 L H Q T
    assert runs[0]["flops_per_token"] == 6 * 119168 + 12 * 2 * 4 * 16 * 16
    ratios = [r["gated_over_baseline_step_time"] for r in figures["rows"] if "variant" not in r]
    assert len(ratios) == 2 and all(r > 0 for r in ratios)


def test_peak_flops_are_known_by_gpu_name():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import gpu_check
    finally:
        sys.path.remove(str(ROOT / "bench"))
    assert gpu_check.peak_tflops("NVIDIA H200") == gpu_check.peak_tflops("NVIDIA H100 80GB HBM3") == 989.4
    assert gpu_check.peak_tflops("NVIDIA A100-SXM4-80GB") == 312.0
    assert gpu_check.peak_tflops("Some Future GPU") is None
