"""The GPU check's measurements (``bench/gpu_check.sh`` runs the CUDA tests, this, then the fused gate's step
overhead), every training through the runner (``run_one``):

- ``mfu``: bf16 training (``torch.compile`` on a GPU) of the ``small`` preset and of a ~125M-parameter config,
  each as baseline and with the SDPA-output elementwise gate (G1, the paper's best): steady-state tokens/s
  (steps ``warmup`` .. ``steps - 1``, from the per-step callback: start-up, compilation, data loading,
  checkpoints and evaluation are not counted), MFU against the GPU's dense bf16 peak (H100/H200 SXM: 989
  TFLOP/s) with FLOPs per token = 6 N + 12 L H Q T (PaLM, appendix B), the gated over baseline step-time
  ratio, and each run's training peak memory (``torch.cuda.max_memory_allocated``) against the memory plan's
  estimate.
- ``memory``: the paper's dense 1.7B model at sequence length 4096 (one row per device per micro-batch, bf16):
  baseline, and G1 with activation checkpointing; measured training peak against the estimate.
- ``fsdp``: with two or more GPUs, the ``small`` preset sharded over all of them (``strategy: fsdp``) against
  the same run on one GPU: the losses agree, tokens/s per GPU, peak memory per GPU against the estimate. With
  one GPU there is nothing to shard over (FSDP on one device is plain training;
  tests/unit/runner/test_fsdp.py checks it with gloo).

    .venv/bin/python bench/gpu_check.py                       # on a GPU: every section
    .venv/bin/python bench/gpu_check.py --only mfu,memory     # some of them
    .venv/bin/python bench/gpu_check.py --cpu                 # a few tiny steps on CPU: the script works
    .venv/bin/python bench/gpu_check.py --set model.n_layers=16 --seq-len 2048   # the big config, changed
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import yaml

PEAK_BF16_TFLOPS = {"H200": 989.4, "H100": 989.4, "GH200": 989.4, "A100": 312.0, "L40S": 362.1, "A10G": 70.0,
                    "L4": 121.0, "RTX 4090": 165.2}
BIG = {"model.preset": "small", "model.n_layers": 14, "model.d_model": 768, "model.n_heads": 12,
       "model.n_kv_heads": 4, "model.head_dim": 64, "model.ffn_dim": 3072, "model.vocab_size": 512}
GATED = "sdpa-elementwise"
# the memory section's model and sequence length
MEMORY_MODEL, MEMORY_SEQ = {"preset": "paper-dense-1.7b"}, 4096
SECTIONS = ("mfu", "memory", "fsdp")
GiB = 2**30


def peak_tflops(name: str) -> float | None:
    """The dense bf16 peak of a GPU by its name (None when unknown: pass --peak-tflops)."""
    for key, value in PEAK_BF16_TFLOPS.items():
        if key in name:
            return value
    return None


def nested(flat: dict[str, object]) -> dict[str, dict[str, object]]:
    """``{"model.n_layers": 12}`` -> ``{"model": {"n_layers": 12}}``."""
    out: dict[str, dict[str, object]] = {}
    for key, value in flat.items():
        section, _, name = key.partition(".")
        out.setdefault(section, {})[name] = value
    return out


def run_config(model: dict[str, object], variant: str, args: argparse.Namespace, *, steps: int | None = None,
               batch_size: int | None = None, seq_len: int | None = None, compile: bool | None = None,
               **train):
    from ablate.config import RunConfig

    steps, batch_size = steps or args.steps, batch_size or args.batch_size
    seq_len = seq_len or args.seq_len
    flat = {**{f"model.{k}" if "." not in k else k: v for k, v in model.items()},
            "data.seq_len": seq_len, "data.train": [{"kind": "builtin", "name": "arithmetic"}],
            "data.heldout": {"arith": {"kind": "builtin", "name": "arithmetic"}},
            "data.stream_tokens": max(2_000_000, batch_size * (seq_len + 1) * (steps + 1)),
            "train.steps": steps, "train.batch_size": batch_size, "train.checkpoint_every": steps,
            "train.precision": "bf16-mixed", "train.compile": args.compile if compile is None else compile,
            **{f"train.{k}": v for k, v in train.items()},
            "eval.heldout_tokens": 2 * seq_len, "eval.probes": False}
    return RunConfig.model_validate({**nested(flat), "variant": variant})


def flops_per_token(cfg) -> tuple[int, float]:
    """(parameters N, training FLOPs per token) of a run config."""
    from ablate.ablations import apply_variant, count_params

    m = apply_variant(cfg.model, cfg.variant)
    n = count_params(m).total
    return n, 6.0 * n + 12.0 * m.n_layers * m.n_heads * m.head_dim * cfg.data.seq_len


def measure(cfg, warmup: int) -> tuple[float, float | None, list[float]]:
    """(steady-state seconds per optimizer step, training peak GPU memory in bytes or None on CPU, losses) of
    ``cfg`` trained by the runner. The peak is read after each step, so evaluation after training is not in
    it."""
    import torch

    from ablate.runner import run_one

    gpu = torch.cuda.is_available()
    stamps: list[float] = []
    peak = [0]

    def on_step(row: dict) -> None:
        if "loss" in row:
            stamps.append(time.perf_counter())
            if gpu:
                peak[0] = max(peak[0], torch.cuda.max_memory_allocated())

    if gpu:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    with tempfile.TemporaryDirectory() as d:
        result = run_one(cfg, Path(d) / "run", run_id="gpu-check", on_step=on_step)
    if result.status != "done":
        raise SystemExit(f"{cfg.variant}: the run ended {result.status}")
    step_s = (stamps[-1] - stamps[warmup]) / (len(stamps) - 1 - warmup)
    return step_s, (peak[0] if gpu else None), result.metrics["loss"]


def estimate_gb(cfg) -> float:
    from ablate.runner.run_memory import run_memory

    return run_memory(cfg, gpu=True).gb


def memory_line(peak: float | None, est: float) -> str:
    if peak is None:
        return f"memory est. {est:.2f} GB"
    return f"memory peak {peak / GiB:.2f} GB, est. {est:.2f} GB ({est / (peak / GiB) - 1:+.0%})"


def mfu_section(args, sizes, peak, rows: list) -> None:
    tokens = args.batch_size * args.seq_len
    for size, model in sizes.items():
        times = {}
        for variant in ("baseline", GATED):
            cfg = run_config(model, variant, args)
            n, fpt = flops_per_token(cfg)
            step_s, mem, _ = measure(cfg, args.warmup)
            tps = tokens / step_s
            mfu = tps * fpt / (peak * 1e12) if peak else None
            times[variant] = step_s
            est = estimate_gb(cfg)
            rows.append({"size": size, "variant": variant, "params": n, "flops_per_token": fpt,
                         "step_s": step_s, "tokens_per_s": tps, "tflops": tps * fpt / 1e12, "mfu": mfu,
                         "compile": cfg.train.compile, "memory_peak_gb": None if mem is None else mem / GiB,
                         "memory_est_gb": est})
            print(f"{size:>9} {variant:<17} {n / 1e6:8.2f}M params  {step_s * 1e3:8.2f} ms/step  "
                  f"{tps:12,.0f} tok/s  {tps * fpt / 1e12:7.2f} TFLOP/s  MFU "
                  f"{'n/a' if mfu is None else f'{mfu:.1%}'}  {memory_line(mem, est)}", flush=True)
        ratio = times[GATED] / times["baseline"]
        rows.append({"size": size, "gated_over_baseline_step_time": ratio})
        print(f"{size:>9} {GATED} / baseline step time: {ratio:.3f}", flush=True)


def memory_section(args, out: list) -> None:
    cases = [("baseline", {}), (GATED, {"activation_checkpointing": True})]
    name = MEMORY_MODEL["preset"]
    for variant, train in cases:
        cfg = run_config(MEMORY_MODEL, variant, args, steps=args.memory_steps, batch_size=1,
                         seq_len=MEMORY_SEQ, compile=False, **train)
        _, mem, _ = measure(cfg, 1)
        est = estimate_gb(cfg)
        out.append({"model": name, "variant": variant, "seq_len": MEMORY_SEQ, "rows": 1, **train,
                    "memory_peak_gb": None if mem is None else mem / GiB, "memory_est_gb": est})
        print(f"{name} {variant:<17} seq {MEMORY_SEQ}, 1 "
              f"row{' + activation checkpointing' if train else ''}: {memory_line(mem, est)}", flush=True)


def fsdp_section(args, out: list) -> None:
    import torch

    n = torch.cuda.device_count()
    if n < 2:
        print(f"fsdp: {n} GPU visible; FSDP over one device is plain training "
              "(tests/unit/runner/test_fsdp.py shards over two CPU processes with gloo)", flush=True)
        return
    batch = args.batch_size * n
    one = run_config({"preset": "small"}, GATED, args, batch_size=batch, micro_batch_size=args.batch_size)
    many = run_config({"preset": "small"}, GATED, args, batch_size=batch, devices=n, strategy="fsdp")
    s1, m1, l1 = measure(one, args.warmup)
    sn, mn, ln = measure(many, args.warmup)
    diff = max(abs(a - b) / abs(b) for a, b in zip(ln, l1, strict=True))
    tokens = batch * args.seq_len
    row = {"gpus": n, "one_gpu_tokens_per_s": tokens / s1, "fsdp_tokens_per_s_per_gpu": tokens / sn / n,
           "max_relative_loss_difference": diff, "memory_peak_gb_rank0": None if mn is None else mn / GiB,
           "memory_est_gb": estimate_gb(many)}
    out.append(row)
    print(f"fsdp over {n} GPUs (small, {GATED}, batch {batch}): {tokens / sn / n:,.0f} tok/s per GPU vs "
          f"{tokens / s1:,.0f} on one GPU; losses within {diff:.1e} relative of one GPU's (bf16); rank 0 "
          f"{memory_line(mn, row['memory_est_gb'])}", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cpu", action="store_true",
                   help="tiny sizes and few steps on CPU (checks the script, no figures)")
    p.add_argument("--only", default=",".join(SECTIONS), help=f"sections to run, of {', '.join(SECTIONS)} "
                   "(--cpu: mfu only)")
    p.add_argument("--steps", type=int, default=None, help="steps per run [60; --cpu: 8]")
    p.add_argument("--warmup", type=int, default=None, help="steps not timed [15; --cpu: 3]")
    p.add_argument("--batch-size", type=int, default=None, help="[16; --cpu: 2]")
    p.add_argument("--seq-len", type=int, default=None, help="[1024; --cpu: 16]")
    p.add_argument("--memory-steps", type=int, default=4, help="steps of each paper-size memory run")
    p.add_argument("--set", dest="sets", action="append", default=[],
                   help="K=V: override a field of the big config")
    p.add_argument("--no-compile", dest="compile", action="store_false",
                   help="eager throughput runs (compiled on a GPU by default, never with --cpu)")
    p.add_argument("--peak-tflops", type=float, default=None,
                   help="the GPU's dense bf16 peak, if not known by name")
    p.add_argument("--out", default=None, help="also write the figures here as JSON")
    args = p.parse_args()
    cpu = args.cpu
    args.steps = args.steps or (8 if cpu else 60)
    args.warmup = args.warmup if args.warmup is not None else (3 if cpu else 15)
    args.batch_size = args.batch_size or (2 if cpu else 16)
    args.seq_len = args.seq_len or (16 if cpu else 1024)
    args.compile = args.compile and not cpu
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    if unknown := only - set(SECTIONS):
        raise SystemExit(
            f"--only: unknown section(s) {', '.join(sorted(unknown))}; allowed: {', '.join(SECTIONS)}"
        )
    os.environ.setdefault("ABLATE_CACHE", str(Path(tempfile.gettempdir()) / "ablate-cache"))

    import torch

    if cpu:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        if torch.cuda.is_available():
            raise SystemExit("--cpu: set CUDA_VISIBLE_DEVICES= before starting Python")
        only = {"mfu"}
    elif not torch.cuda.is_available():
        raise SystemExit("no CUDA device visible (use --cpu to check the script on CPU)")
    device = torch.cuda.get_device_name() if not cpu else "cpu"
    peak = args.peak_tflops or (peak_tflops(device) if not cpu else None)
    big = dict(BIG)
    for kv in args.sets:
        key, _, value = kv.partition("=")
        big[key if key.startswith("model.") else f"model.{key}"] = yaml.safe_load(value)
    sizes = {"tiny": {"preset": "tiny"}, "tiny-3l": {"preset": "tiny", "n_layers": 3}} if cpu else \
        {"small": {"preset": "small"}, "125M": {k.removeprefix("model."): v for k, v in big.items()}}
    print(f"device {device}; peak bf16 {peak or 'unknown'} TFLOP/s; batch {args.batch_size} x seq "
          f"{args.seq_len}; {args.steps} steps ({args.warmup} untimed); compile {args.compile}", flush=True)
    figures: dict = {"device": device, "peak_tflops": peak, "batch_size": args.batch_size,
                     "seq_len": args.seq_len, "rows": [], "memory": [], "fsdp": []}
    for name, section in (("mfu", lambda: mfu_section(args, sizes, peak, figures["rows"])),
                          ("memory", lambda: memory_section(args, figures["memory"])),
                          ("fsdp", lambda: fsdp_section(args, figures["fsdp"]))):
        if name in only:
            t0 = time.monotonic()
            section()
            print(f"== {name}: {time.monotonic() - t0:.0f} s", flush=True)
            # after each section, so that a check cut by its time limit keeps what it measured
            if args.out:
                Path(args.out).write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
