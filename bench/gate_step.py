"""Step time (forward + backward) of each main gated variant, of each attention-weights arm (the other sink
fixes; differential, forgetting and selective attention) and of the sparse G1 gate, relative to the baseline,
measured side by side.

Every repetition times all variants once, in a shuffled order, so drift of the machine (thermal, other jobs)
hits all of them alike; the figure is the median over repetitions of each variant's time over the baseline's,
with the quartiles of that ratio beside it (their spread says whether more repetitions are needed).
An input-dependent G1 gate's projection is fused into the query projection's weight (the fused form, as
Qwen3-Next: ``gates.QueryGateProjection``); the G1 variants are also timed unfused (``name/unfused``: a
separate gate projection), and the last line says what the fusion gives for the paper's best gate (issue #27's
target: <= 1.03x the baseline on the small preset on CPU, < 1.02 on a GPU; on CPU it is not reached, fused or
not: docs/results.md).

    .venv/bin/python bench/gate_step.py                       # small preset, CPU
    .venv/bin/python bench/gate_step.py --threads 1 --variants sdpa-elementwise   # a busy CPU machine
    .venv/bin/python bench/gate_step.py --threads 1 --variants sdpa-elementwise sdpa-headwise \
        diff-attention-matched diff-v2 forgetting-attention selective-attention sdpa-headwise-sparse \
        sink-learned                                          # the arms of the attention-2025 study
    .venv/bin/python bench/gate_step.py --threads 1 --variants sdpa-elementwise sdpa-headwise --compile
    .venv/bin/python bench/gate_step.py --device cuda --preset paper-dense-1.7b --layers 4 --seq 2048  # a GPU
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time

import torch

from ablate.ablations import ModelConfig, apply_variant, build_model, count_params
from ablate.ablations.gates import fuses_g1

MAIN_VARIANTS = [
    "baseline", "sdpa-elementwise", "sdpa-headwise", "sdpa-head-shared", "v-elementwise", "v-headwise",
    "sdpa-additive-silu", "dense-output", "sdpa-groupnorm", "switch-v-1top1",
    # the attention weights slot's arms
    "sink-learned", "softmax-off-by-one", "sigmoid-attention", "softpick",
    # the field's 2025-26 arms beside G1 (the attention-2025 study)
    "diff-attention", "diff-attention-matched", "diff-v2", "forgetting-attention",
    "forgetting-attention-rope", "selective-attention", "sdpa-headwise-sparse",
]


UNFUSED = "/unfused"
G1 = "sdpa-elementwise"


def step_fn(label: str, args: argparse.Namespace):
    """A closure doing one forward+backward of ``label`` (a variant, ``/unfused`` for its G1 gate's projection
    apart from the query's), synchronised so that wall time is device time."""
    name = label.removesuffix(UNFUSED)
    overrides = {"n_layers": args.layers} if args.layers else {}
    cfg = apply_variant(ModelConfig(preset=args.preset, **overrides), name)
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = build_model(cfg, device=device, fuse_g1=not label.endswith(UNFUSED))
    # as LitDecoder with train.compile
    forward = torch.compile(model.forward) if args.compile else model.forward
    idx = torch.randint(0, cfg.vocab_size, (args.batch, args.seq), device=device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def step() -> float:
        sync()
        t0 = time.perf_counter()
        with torch.autocast(device.type, dtype=dtype, enabled=device.type == "cuda"):
            out = forward(idx)
            loss = torch.nn.functional.cross_entropy(out.logits.flatten(0, 1).float(),
                                                     idx.flatten()) + out.aux_loss
        loss.backward()
        model.zero_grad(set_to_none=True)
        sync()
        return time.perf_counter() - t0

    return step, count_params(cfg).total


def quartiles(values: list[float]) -> str:
    """The first and third quartiles of the per-repetition ratios: how far one repetition strays, so how many
    repetitions a difference between two medians needs."""
    if len(values) < 2:
        return "-"
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return f"{q1:.3f}-{q3:.3f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="small")
    p.add_argument("--layers", type=int, default=0, help="override n_layers (0 = the preset's)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--variants", nargs="*", default=MAIN_VARIANTS)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile each model's forward (train.compile)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    names = ["baseline", *[n for n in args.variants if n != "baseline"]]
    names += [n + UNFUSED for n in names if fuses_g1(apply_variant(ModelConfig(preset=args.preset), n).gate)]
    steps, params = {}, {}
    for n in names:
        steps[n], params[n] = step_fn(n, args)
    for _ in range(args.warmup):
        for n in names:
            steps[n]()
    ratios: dict[str, list[float]] = {n: [] for n in names}
    base_s: list[float] = []
    rng = random.Random(0)
    for _ in range(args.reps):
        order = names[:]
        rng.shuffle(order)
        rep = {n: steps[n]() for n in order}
        base_s.append(rep["baseline"])
        for n in names:
            ratios[n].append(rep[n] / rep["baseline"])
    print(f"# {args.preset} ({args.layers or 'all'} layers), batch {args.batch} x seq {args.seq}, "
          f"{args.device}, {'compiled, ' if args.compile else ''}{torch.get_num_threads()} threads, "
          f"{args.reps} interleaved reps, load {os.getloadavg()[0]:.2f}; baseline step "
          f"{statistics.median(base_s) * 1e3:.1f} ms (median)")
    print(f"{'variant':<30} {'params':>12} {'step / baseline':>16} {'quartiles':>14} {'fused / unfused':>16}")
    for n in names:
        rel = ""
        if n + UNFUSED in names:  # per repetition, so drift between the two cancels
            pairs = zip(ratios[n], ratios[n + UNFUSED], strict=True)
            rel = f"{statistics.median(a / b for a, b in pairs):>16.3f}"
        median = statistics.median(ratios[n])
        print(f"{n:<30} {params[n]:>12,} {median:>16.3f} {quartiles(ratios[n]):>14} {rel}")
    if G1 in names:
        unfused = f", unfused {statistics.median(ratios[G1 + UNFUSED]):.3f}x" if G1 + UNFUSED in names else ""
        print(f"fused G1 ({G1}) step / baseline: {statistics.median(ratios[G1]):.3f}x{unfused}; "
              f"load {os.getloadavg()[0]:.2f}")

if __name__ == "__main__":
    main()
