"""A run's step time on a busy machine: alone, and beside CPU burners that occupy every core, before and after
issue 25's threads fix, measured side by side in one run.

- before: OpenMP's default wait (libgomp spins a while, ~300,000 iterations, before it sleeps) and
  ``os.cpu_count()`` torch threads, what a worker got until #25;
- after: passive waits, ``OMP_WAIT_POLICY=PASSIVE``, and ``usable_cpus()`` threads
  (``ablate.execute.devices``), what a worker gets on a machine already oversubscribed
  (``devices.quiet_threads``; on one with room it keeps OpenMP's default, the "before" wait with the usable
  threads).

Each measurement is a fresh process (OpenMP reads its wait policy when torch loads it) that trains the tiny
preset's G1 model (``sdpa-elementwise``) on ``--batch-size`` x ``--seq-len`` tokens and reports the
steady-state seconds per step (steps ``--warmup`` .. ``--steps``, wall clock: contention is what is measured).
The burners are plain busy loops, one per usable core, started before and stopped after each contended
measurement. Rounds run the arms in a shuffled order; figures are medians over rounds. Printed: each arm's
step time alone and contended, the slowdown ratios (contended / alone; fair share on N cores beside N burners
is about 2x), and the quiet-machine cost of the passive policy (after alone / before alone); ``--arm`` adds
arms (another spin count, one thread). The load average is printed before and after: on a machine that other
jobs share, "alone" means beside them.

    .venv/bin/python bench/contended.py                      # 3 rounds, ~4 min on 2 cores
    .venv/bin/python bench/contended.py --rounds 1 --steps 20
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time


def child(args: argparse.Namespace) -> None:
    """One measurement, in this process: print ``{"step_s", "threads", "policy"}`` as JSON."""
    import torch

    from ablate.ablations import apply_variant, build_model
    from ablate.ablations.config import ModelConfig

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = apply_variant(ModelConfig(preset=args.preset), "sdpa-elementwise")
    model = build_model(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, cfg.vocab_size, (args.batch_size, args.seq_len + 1))
    stamps = []
    for _ in range(args.steps):
        out = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(out.logits.flatten(0, 1), tokens[:, 1:].flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()
        stamps.append(time.perf_counter())
    step_s = (stamps[-1] - stamps[args.warmup]) / (len(stamps) - 1 - args.warmup)
    print(json.dumps({"step_s": step_s, "threads": torch.get_num_threads(),
                      "policy": os.environ.get("OMP_WAIT_POLICY", "default")}))


OPENMP_VARS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")


def measure(args: argparse.Namespace, *, openmp: dict[str, str], threads: int, burners: int) -> float:
    """Seconds per step of a fresh process with these OpenMP settings and thread count, beside ``burners``
    busy loops."""
    env = {k: v for k, v in os.environ.items() if k not in OPENMP_VARS} | openmp
    burning = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(burners)]
    try:
        out = subprocess.run([sys.executable, __file__, "--child", "--threads", str(threads),
                              "--steps", str(args.steps), "--warmup", str(args.warmup),
                              "--batch-size", str(args.batch_size), "--seq-len", str(args.seq_len),
                              "--preset", args.preset],
                             env=env, capture_output=True, text=True, check=True)
    finally:
        for proc in burning:
            proc.kill()
            proc.wait()
    return json.loads(out.stdout.splitlines()[-1])["step_s"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--preset", default="tiny")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--arm", action="append", default=[], metavar="NAME:THREADS:K=V,...",
                   help="another arm to measure beside before and after (1thread:1:, "
                        "spin:0:GOMP_SPINCOUNT=10000; 0 threads = the usable CPUs)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args)
        return
    from ablate.execute.devices import usable_cpus
    cores = usable_cpus()
    arms = {"before": ({}, os.cpu_count() or 1), "after": ({"OMP_WAIT_POLICY": "PASSIVE"}, cores)}
    for spec in args.arm:
        name, threads, settings = spec.split(":", 2)
        arms[name] = (dict(kv.split("=", 1) for kv in settings.split(",") if kv), int(threads) or cores)
    print(f"{cores} usable CPU(s), os.cpu_count() {os.cpu_count()}; burners: {cores}; {args.preset} G1, "
          f"batch {args.batch_size} x {args.seq_len}, steps {args.warmup}..{args.steps}; arms: " + "; ".join(
              f"{name} {threads} threads {settings or '(OpenMP defaults)'}" for name, (settings, threads)
              in arms.items()), flush=True)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    times: dict[tuple[str, str], list[float]] = {}
    for r in range(args.rounds):
        jobs = [(arm, where) for arm in arms for where in ("alone", "contended")]
        random.Random(r).shuffle(jobs)
        for arm, where in jobs:
            openmp, threads = arms[arm]
            t = measure(args, openmp=openmp, threads=threads, burners=cores if where == "contended" else 0)
            times.setdefault((arm, where), []).append(t)
        print(
            f"round {r + 1}: "
            + ", ".join(f"{a} {w} {times[(a, w)][-1] * 1e3:.0f} ms" for a, w in sorted(times)),
            flush=True,
        )
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for arm in arms:
        print(f"{arm:>6}: alone {med[(arm, 'alone')] * 1e3:.0f} ms/step, beside {cores} burner(s) "
              f"{med[(arm, 'contended')] * 1e3:.0f} ms/step: slowdown "
              f"{med[(arm, 'contended')] / med[(arm, 'alone')]:.2f}x")
    for arm in list(arms)[1:]:
        quiet = statistics.median(a / b for a, b in zip(times[(arm, "alone")], times[("before", "alone")],
                                                        strict=True))
        contended = statistics.median(a / b for a, b in zip(times[("before", "contended")],
                                                            times[(arm, "contended")], strict=True))
        print(f"{arm}: contended, {contended:.2f}x as fast as before; alone, {quiet:.3f}x before's step time "
              "(its cost when nothing else runs); medians of per-round ratios")


if __name__ == "__main__":
    main()
