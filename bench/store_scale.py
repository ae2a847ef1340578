"""The results store at scale: ingest N runs (each a K-step loss curve, per-layer probes, PPL and benchmark
scores), then time the runs-table query and a filtered one. Prints seconds and rows/s per backend.

    .venv/bin/python bench/store_scale.py                       # 10,000 runs x 1,000 steps on SQLite
    .venv/bin/python bench/store_scale.py --runs 1000 --steps 200
    .venv/bin/python bench/store_scale.py --url postgresql+psycopg://postgres@127.0.0.1:55432/bench

Aim: the 10,000-run summary query (``Store.runs_frame``) in under a second.
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

from ablate.config import RunConfig
from ablate.result import RunResult
from ablate.store import Store

VARIANTS = ("baseline", "sdpa-elementwise", "sdpa-headwise", "value-elementwise", "sdpa-headwise-shared")
PROBES = ("gate_score", "f_attn", "m_act")


def make_result(i: int, steps: int, layers: int, base: dict) -> RunResult:
    """Run i: its config differs in variant, lr and seed; a decaying loss curve; probes on every layer."""
    config = {**base, "variant": VARIANTS[i % len(VARIANTS)], "seed": i // 100,
              "train": {**base["train"], "lr": 1e-3 * (1 + i % 7)}}
    loss = [3.0 * math.exp(-s / (steps / 5)) + 2.0 + 1e-4 * i for s in range(steps)]
    return RunResult(
        run_id=f"r{i:06d}", config=config, status="done",
        summary={"steps": steps, "tokens": steps * 4096, "train_loss": loss[-1], "ppl/code": 8 + i % 13,
                 "ppl/prose": 12 + i % 11, "bench/arith": (i % 100) / 100, "loss_spikes": i % 3,
                 "gate_score": 0.1 + (i % 9) / 100, "f_attn": 0.01, "m_act": 5.0 + i % 50, "wall_s": 60.0,
                 "tokens_per_s": 5e4, "params": 1_700_000_000, "added_params": 0},
        metrics={"step": list(range(steps)), "loss": loss},
        probes={name: [0.1 * (k + 1) for k in range(layers)] for name in PROBES},
        started="2025-01-01T00:00:00", finished="2025-01-01T01:00:00", host="node", device="cuda:0")


def bench(url: str, runs: int, steps: int, layers: int) -> list[tuple[str, float, float, int]]:
    """(what, wall seconds, CPU seconds of this process, rows) for ingest and the queries on the store at
    ``url`` (which should be empty). CPU seconds show the cost on a busy machine, where wall time mostly
    waits."""
    base = RunConfig().model_dump(mode="json")
    out = []
    with Store.open(url) as store:
        t0, c0 = time.perf_counter(), time.process_time()
        store.register_grid(name="scale", text="name: scale\n",
                            runs=[{"run_id": f"r{i:06d}", "config": make_result(i, 1, 1, base).config,
                                   "params": 1_700_000_000, "added_params": 0} for i in range(runs)])
        out.append(("register_grid (runs)", time.perf_counter() - t0, time.process_time() - c0, runs))
        build_s = build_cpu = 0.0
        t0, c0 = time.perf_counter(), time.process_time()
        for i in range(runs):  # one transaction per run, as the executor does; building results not counted
            b0, bc0 = time.perf_counter(), time.process_time()
            result = make_result(i, steps, layers, base)
            build_s, build_cpu = build_s + time.perf_counter() - b0, build_cpu + time.process_time() - bc0
            store.ingest(result)
        wall, cpu = time.perf_counter() - t0 - build_s, time.process_time() - c0 - build_cpu
        rows = runs * (steps + layers * len(PROBES) + 3)
        out.append(("ingest (curve+probe+score rows)", wall, cpu, rows))
        for label, kwargs in (("runs_frame, all runs", {}),
                              ("runs_frame, filtered", {"where": "variant == 'sdpa-elementwise' and "
                                                                 "train.lr >= 0.004 and ppl/code < 12"})):
            store.runs_frame(**kwargs)  # warm: imports and caches out of the timing
            t0, c0 = time.perf_counter(), time.process_time()
            frame = store.runs_frame(**kwargs)
            out.append((f"{label} ({len(frame)} rows)", time.perf_counter() - t0, time.process_time() - c0,
                        len(frame)))
        ids = [f"r{i:06d}" for i in range(0, runs, max(1, runs // 20))]
        t0, c0 = time.perf_counter(), time.process_time()
        curves = store.curves(run_ids=ids, metrics=["loss"])
        out.append((f"curves of {len(ids)} runs", time.perf_counter() - t0, time.process_time() - c0,
                    len(curves)))
    print(f"  (building {runs} RunResults took {build_s:.1f}s, not counted)")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--steps", type=int, default=1_000, help="points on each run's loss curve")
    parser.add_argument("--layers", type=int, default=28, help="layers probed per run")
    parser.add_argument("--url", action="append", default=[], help="also a PostgreSQL store (empty database)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        urls = [f"sqlite:///{Path(tmp) / 'ablate.db'}", *args.url]
        print(f"{args.runs} runs x {args.steps} steps, {args.layers} layers x {len(PROBES)} probes")
        for url in urls:
            print(f"\n{url.split('://')[0]}:")
            print(f"  {'what':<44} {'seconds':>9} {'cpu s':>9} {'rows/s':>12}")
            for what, secs, cpu, rows in bench(url, args.runs, args.steps, args.layers):
                print(f"  {what:<44} {secs:>9.3f} {cpu:>9.3f} {rows / secs:>12,.0f}")


if __name__ == "__main__":
    main()
