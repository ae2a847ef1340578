"""Where a training step's GPU memory peaks, phase by phase, against the memory plan's terms.

One step of the runner's arithmetic (bf16 autocast, fp32 logits and cross-entropy, AdamW as the runner builds
it) on one row, without Lightning: ``torch.cuda.memory_allocated`` after each phase and the peak within it,
beside the plan's
``estimate_memory`` items. Used to find why the plan under-estimates the eager 1.7B baseline on an H200
(docs/gpu.md).

    python bench/gpu_memory_phases.py [--preset paper-dense-1.7b] [--seq 4096] [--variant baseline]
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from ablate.ablations import apply_variant, build_model
from ablate.ablations.config import ModelConfig
from ablate.ablations.memory import estimate_memory
from ablate.runner.module import param_groups

GiB = 2**30


def gb(x: float) -> str:
    return f"{x / GiB:7.2f}"


def parser(doc: str | None) -> argparse.ArgumentParser:
    """The options of the GPU memory benches: the model, the arm, one row of ``--seq`` tokens, the steps."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="paper-dense-1.7b")
    p.add_argument("--variant", default="baseline")
    p.add_argument("--seq", type=int, default=4096)
    p.add_argument("--steps", type=int, default=2)
    return p


def main() -> None:
    args = parser(__doc__).parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    cfg = apply_variant(ModelConfig(preset=args.preset), args.variant)
    est = estimate_memory(cfg, seq_len=args.seq, rows=1, precision="bf16-mixed", gpu=True)
    print(f"plan: params {gb(est.params)} grads {gb(est.grads)} optimizer {gb(est.optimizer)} activations "
          f"{gb(est.activations)} temporaries {gb(est.temporaries)} total {gb(est.total)} GiB")
    torch.manual_seed(0)
    model = build_model(cfg, device=dev)
    opt = torch.optim.AdamW(param_groups(model, 0.1, decay_embeddings=False), lr=1e-4)
    n = sum(p.numel() for p in model.parameters())
    print(f"parameters {n:,}: fp32 {gb(4 * n)} GiB")
    idx = torch.randint(0, cfg.vocab_size, (1, args.seq + 1), device=dev)
    for step in range(args.steps):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(idx[:, :-1])
        logits = out.logits.flatten(0, 1).float()
        loss = F.cross_entropy(logits, idx[:, 1:].flatten()) + out.aux_loss
        fwd_alloc, fwd_peak = torch.cuda.memory_allocated(), torch.cuda.max_memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        loss.backward()
        del out, logits, loss
        bwd_alloc, bwd_peak = torch.cuda.memory_allocated(), torch.cuda.max_memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        opt.step()
        opt.zero_grad(set_to_none=True)
        step_peak = torch.cuda.max_memory_allocated()
        torch.cuda.synchronize()
        print(f"step {step}: start {gb(base)}; forward: held {gb(fwd_alloc)} peak {gb(fwd_peak)}; backward: "
              f"peak {gb(bwd_peak)}, held after {gb(bwd_alloc)}; "
              f"optimizer step peak {gb(step_peak)} GiB")
    print(f"largest peak {gb(max(fwd_peak, bwd_peak, step_peak))} GiB against the plan's {gb(est.total)} GiB")


if __name__ == "__main__":
    main()
