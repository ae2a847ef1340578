"""Training throughput of the runner (Lightning, ``ablate.runner.run_one``) against a hand-written PyTorch
loop on the same model and batches, the compiled runner (``train.compile``) against the eager one, and each
main gated variant's step time over the baseline's, measured side by side.

Every round runs, in a shuffled order: the runner on the baseline (eager and compiled), the plain loop on the
baseline, and the runner on each variant. The compiled runs compile in their first steps, which are not timed.
A measurement is the steady-state time per step (steps ``warmup`` .. ``steps - 1``, from the per-step
callback), so process start-up, data loading, checkpoints and evaluation are not counted; the plain loop does
the same work per step (AdamW with the runner's parameter groups and schedule, gradient clipping, one
``loss.item()`` and one gradient-norm read per step). Figures are medians over rounds of per-round ratios.

    .venv/bin/python bench/train_throughput.py                          # small preset, wall clock
    .venv/bin/python bench/train_throughput.py --threads 1 --clock cpu  # a CPU machine shared with other jobs
    .venv/bin/python bench/train_throughput.py --preset paper-dense-1.7b --batch-size 4 --seq-len 2048  # GPU
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

import torch

from ablate.ablations import apply_variant, build_model
from ablate.config import RunConfig
from ablate.runner import run_one
from ablate.runner.data import load_data
from ablate.runner.evaluate import autocast_for
from ablate.runner.module import lr_factor, param_groups
from ablate.runner.tokenizers import get_tokenizer

MAIN_VARIANTS = ["sdpa-elementwise", "sdpa-headwise", "sdpa-head-shared", "v-elementwise"]


def config(args: argparse.Namespace, variant: str, compile: bool = False) -> RunConfig:
    return RunConfig.model_validate({
        "model": {"preset": args.preset}, "variant": variant,
        "data": {"seq_len": args.seq_len},
        "train": {"steps": args.steps, "batch_size": args.batch_size, "checkpoint_every": args.steps,
                  "compile": compile},
        "eval": {"heldout_tokens": args.seq_len, "probes": False},
    })


def steady_step_s(stamps: list[float], warmup: int) -> float:
    """Mean seconds per step after ``warmup`` steps, from per-step end timestamps."""
    return (stamps[-1] - stamps[warmup]) / (len(stamps) - 1 - warmup)


CLOCK = time.perf_counter  # --clock cpu: time.process_time, for a machine shared with other jobs


def time_runner(cfg: RunConfig, warmup: int) -> float:
    stamps: list[float] = []
    with tempfile.TemporaryDirectory() as d:
        run_one(cfg, Path(d) / "run", run_id="bench", on_step=lambda _: stamps.append(CLOCK()))
    return steady_step_s(stamps, warmup)


def time_plain_loop(cfg: RunConfig, warmup: int, cache: Path) -> float:
    """The same training, written by hand: no Lightning, no callbacks."""
    gpu = torch.cuda.is_available()
    device = torch.device("cuda" if gpu else "cpu")
    precision = "bf16-mixed" if gpu else "32-true"
    model_cfg = apply_variant(cfg.model, cfg.variant)
    tok = get_tokenizer(cfg.data, model_cfg, cache)
    data = load_data(cfg.data, batch_size=cfg.train.batch_size, seed=cfg.seed,
                     vocab_size=model_cfg.vocab_size, tokenizer=tok, cache_dir=cache)
    torch.manual_seed(cfg.seed)
    model = build_model(model_cfg).to(device)
    tc = cfg.train
    opt = torch.optim.AdamW(param_groups(model, tc.weight_decay), lr=tc.lr, betas=(tc.beta1, tc.beta2),
                            eps=tc.eps)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, tc))
    stamps = []
    for step in range(tc.steps):
        tokens = torch.from_numpy(data.train.batch(step)).to(device, non_blocking=True)
        with autocast_for(device, precision):
            out = model(tokens[:, :-1])
            loss = torch.nn.functional.cross_entropy(out.logits.flatten(0, 1), tokens[:, 1:].flatten())
        (loss + out.aux_loss).backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sched.step()
        loss.item(), norm.item()
        stamps.append(CLOCK())
    return steady_step_s(stamps, warmup)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="small")
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--variants", default=",".join(MAIN_VARIANTS))
    p.add_argument("--no-compile", action="store_true", help="leave out the compiled runner")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    p.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="wall time, or this process's CPU time (steadier on a busy CPU-only machine, with --threads 1)",
    )
    p.add_argument("--cache",
                   default=os.environ.get("ABLATE_CACHE", str(Path(tempfile.gettempdir()) / "ablate-cache")))
    args = p.parse_args()
    os.environ["ABLATE_CACHE"] = args.cache
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.clock == "cpu":
        global CLOCK
        CLOCK = time.process_time
    variants = [v for v in args.variants.split(",") if v]
    base = config(args, "baseline")
    cache = Path(args.cache)
    time_plain_loop(base, 1, cache)  # tokenize and cache the corpora once, outside the measurements
    tokens = args.batch_size * args.seq_len
    runner, plain, compiled, var = [], [], [], {v: [] for v in variants}
    for r in range(args.rounds):
        jobs = [("runner", None), ("plain", None), *((v, v) for v in variants)]
        jobs += [("compiled", None)] if not args.no_compile else []
        random.Random(r).shuffle(jobs)
        times = {}
        for name, variant in jobs:
            if name == "plain":
                times[name] = time_plain_loop(base, args.warmup, cache)
            elif name == "compiled":
                times[name] = time_runner(config(args, "baseline", compile=True), args.warmup)
            else:
                times[name] = time_runner(config(args, variant) if variant else base, args.warmup)
        runner.append(times["runner"])
        plain.append(times["plain"])
        if "compiled" in times:
            compiled.append(times["runner"] / times["compiled"])
        for v in variants:
            var[v].append(times[v] / times["runner"])
        print(f"round {r + 1}: runner {tokens / times['runner']:,.0f} tok/s, plain loop "
              f"{tokens / times['plain']:,.0f} tok/s, ratio "
              f"{times['plain'] / times['runner']:.3f}", flush=True)
    device = (
        torch.cuda.get_device_name()
        if torch.cuda.is_available()
        else f"cpu ({torch.get_num_threads()} threads)"
    )
    print(f"\n{args.preset}, batch {args.batch_size} x seq {args.seq_len}, {args.steps} steps ({args.warmup} "
          f"warm-up), {args.rounds} rounds, {device}, {args.clock} clock")
    ratios = [pl / ru for pl, ru in zip(plain, runner, strict=True)]
    print(f"runner tokens/s over plain loop: {statistics.median(ratios):.3f}x (rounds: "
          f"{', '.join(f'{x:.3f}' for x in ratios)}); runner {tokens / statistics.median(runner):,.0f} "
          f"tok/s, plain {tokens / statistics.median(plain):,.0f} tok/s")
    if compiled:
        print(f"compiled runner tokens/s over eager runner: {statistics.median(compiled):.3f}x (rounds: "
              f"{', '.join(f'{x:.3f}' for x in compiled)})")
    for v in variants:
        print(f"{v:>20} step time / baseline: {statistics.median(var[v]):.3f}x")


if __name__ == "__main__":
    main()
