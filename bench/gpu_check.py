"""The GPU check's measurements (``bench/gpu_check.sh`` runs the CUDA tests, then this): bf16 training through the
runner (``run_one``) of the ``small`` preset and of a ~125M-parameter config, each as baseline and with the
SDPA-output elementwise gate (G1, the paper's best), with

- throughput: steady-state tokens/s (steps ``warmup`` .. ``steps - 1``, from the per-step callback, so start-up,
  data loading, checkpoints and evaluation are not counted);
- MFU: achieved FLOP/s over the GPU's dense bf16 peak (H100/H200 SXM: 989 TFLOP/s), with FLOPs per token
  = 6 N + 12 L H Q T (PaLM, appendix B: N parameters, L layers, H query heads, Q head dim, T sequence length);
- the gated over baseline step-time ratio, per size.

    .venv/bin/python bench/gpu_check.py                       # on a GPU
    .venv/bin/python bench/gpu_check.py --cpu                 # a few tiny steps on CPU: the script itself works
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


def run_config(model: dict[str, object], variant: str, args: argparse.Namespace):
    from ablate.config import RunConfig

    flat = {**{f"model.{k}" if "." not in k else k: v for k, v in model.items()},
            "data.seq_len": args.seq_len, "data.train": [{"kind": "builtin", "name": "arithmetic"}],
            "data.heldout": {"arith": {"kind": "builtin", "name": "arithmetic"}},
            "data.stream_tokens": max(2_000_000, args.batch_size * (args.seq_len + 1) * (args.steps + 1)),
            "train.steps": args.steps, "train.batch_size": args.batch_size, "train.checkpoint_every": args.steps,
            "train.precision": "bf16-mixed", "train.compile": args.compile,
            "eval.heldout_tokens": 2 * args.seq_len, "eval.probes": False, "variant": variant}
    cfg = nested({k: v for k, v in flat.items() if k != "variant"})
    return RunConfig.model_validate({**cfg, "variant": variant})


def flops_per_token(cfg) -> tuple[int, float]:
    """(parameters N, training FLOPs per token) of a run config."""
    from ablate.ablations import apply_variant, count_params

    m = apply_variant(cfg.model, cfg.variant)
    n = count_params(m).total
    return n, 6.0 * n + 12.0 * m.n_layers * m.n_heads * m.head_dim * cfg.data.seq_len


def measure(cfg, warmup: int) -> float:
    """Steady-state seconds per optimizer step of ``cfg`` trained by the runner."""
    from ablate.runner import run_one

    stamps: list[float] = []
    with tempfile.TemporaryDirectory() as d:
        result = run_one(cfg, Path(d) / "run", run_id="gpu-check", on_step=lambda _: stamps.append(time.perf_counter()))
    if result.status != "done":
        raise SystemExit(f"{cfg.variant}: the run ended {result.status}")
    return (stamps[-1] - stamps[warmup]) / (len(stamps) - 1 - warmup)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cpu", action="store_true", help="tiny sizes and few steps on CPU (checks the script, no figures)")
    p.add_argument("--steps", type=int, default=None, help="steps per run [60; --cpu: 8]")
    p.add_argument("--warmup", type=int, default=None, help="steps not timed [15; --cpu: 3]")
    p.add_argument("--batch-size", type=int, default=None, help="[16; --cpu: 2]")
    p.add_argument("--seq-len", type=int, default=None, help="[1024; --cpu: 16]")
    p.add_argument("--set", dest="sets", action="append", default=[], help="K=V: override a field of the big config")
    p.add_argument("--compile", action="store_true", help="torch.compile the model (slower start, higher MFU)")
    p.add_argument("--peak-tflops", type=float, default=None, help="the GPU's dense bf16 peak, if not known by name")
    p.add_argument("--out", default=None, help="also write the figures here as JSON")
    args = p.parse_args()
    cpu = args.cpu
    args.steps = args.steps or (8 if cpu else 60)
    args.warmup = args.warmup if args.warmup is not None else (3 if cpu else 15)
    args.batch_size = args.batch_size or (2 if cpu else 16)
    args.seq_len = args.seq_len or (16 if cpu else 1024)
    os.environ.setdefault("ABLATE_CACHE", str(Path(tempfile.gettempdir()) / "ablate-cache"))

    import torch

    if cpu:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        if torch.cuda.is_available():
            raise SystemExit("--cpu: set CUDA_VISIBLE_DEVICES= before starting Python")
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
    tokens = args.batch_size * args.seq_len
    print(f"device {device}; peak bf16 {peak or 'unknown'} TFLOP/s; batch {args.batch_size} x seq {args.seq_len}; "
          f"{args.steps} steps ({args.warmup} untimed)", flush=True)
    rows = []
    for size, model in sizes.items():
        times = {}
        for variant in ("baseline", GATED):
            cfg = run_config(model, variant, args)
            n, fpt = flops_per_token(cfg)
            step_s = measure(cfg, args.warmup)
            tps = tokens / step_s
            mfu = tps * fpt / (peak * 1e12) if peak else None
            times[variant] = step_s
            rows.append({"size": size, "variant": variant, "params": n, "flops_per_token": fpt, "step_s": step_s,
                         "tokens_per_s": tps, "tflops": tps * fpt / 1e12, "mfu": mfu})
            print(f"{size:>9} {variant:<17} {n / 1e6:8.2f}M params  {step_s * 1e3:8.2f} ms/step  {tps:12,.0f} tok/s  "
                  f"{tps * fpt / 1e12:7.2f} TFLOP/s  MFU {'n/a' if mfu is None else f'{mfu:.1%}'}", flush=True)
        ratio = times[GATED] / times["baseline"]
        rows.append({"size": size, "gated_over_baseline_step_time": ratio})
        print(f"{size:>9} {GATED} / baseline step time: {ratio:.3f}", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps({"device": device, "peak_tflops": peak, "batch_size": args.batch_size,
                                              "seq_len": args.seq_len, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
