"""Many writers at once: N processes (a Ray cluster's tasks, a Slurm array's) record live metrics and results
into one store, as each run's lifecycle does. Prints the write latency percentiles per backend and N, and
checks that every row arrived.

Each writer process owns one run: it marks it running, then ``--writes`` times records a batch of ``--rows``
step rows (``Store.record_progress``, the live writer's one transaction: heartbeat, latest step, the step
table) from two threads, as a task's training thread and its live writer both write, then ingests the run's
``result.json`` (``Store.ingest``: the whole curve, the summary). All writers start together. After they end
the parent reads every run back: status ``done``, the curve's every step once, the heartbeat step of the
last live write; a writer whose store call raised counts an error (nothing is retried here but what the store
retries itself: a lock timeout or deadlock).

    .venv/bin/python bench/store_writers.py --url postgresql+psycopg://postgres@127.0.0.1:5432/bench
    .venv/bin/python bench/store_writers.py --writers 8 32 64 --writes 20 --rows 25   # SQLite and PG

Aim: nothing lost at 64 writers on either backend, p99 of a live write well under the live writer's 2-s
period.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from ablate.result import RunResult
from ablate.store import Store

BASE = {"model": {"preset": "tiny"}, "train": {"steps": 1000, "lr": 0.001}, "seed": 0, "variant": "baseline"}


def run_id(i: int) -> str:
    return f"w{i:05d}"


def register(url: str, n: int) -> None:
    """Register ``n`` runs (one per writer) in the grid ``writers``."""
    with Store.open(url) as store:
        runs = [{"run_id": run_id(i), "config": {**BASE, "seed": i}, "axes": {"seed": i}, "params": 1,
                 "added_params": 0} for i in range(n)]
        store.register_grid(name="writers", text="name: writers", runs=runs)


def writer(url: str, i: int, writes: int, rows: int, start: Any, out: Any) -> None:
    """One run's writes; puts ``(i, progress latencies, ingest latency, errors)`` on ``out``."""
    rid, lat, errors = run_id(i), [], []
    lock = threading.Lock()
    try:
        store = Store.open(url)
        start.wait()
        store.mark_running(run_id=rid, host=f"node{i % 4}", device="cpu")

        def live(first: int, count: int) -> None:
            for w in range(first, first + count):
                batch = [{"step": w * rows + k, "loss": 3.0 - 1e-4 * (w * rows + k), "tokens_per_s": 1e4}
                         for k in range(rows)]
                t0 = time.perf_counter()
                try:
                    store.record_progress({rid: batch})
                except Exception as exc:  # noqa: BLE001 - counted
                    errors.append(f"record_progress: {type(exc).__name__}: {str(exc).splitlines()[0]}")
                with lock:
                    lat.append(time.perf_counter() - t0)

        half = writes // 2
        other = threading.Thread(target=live, args=(half, writes - half))
        other.start()
        live(0, half)
        other.join()
        steps = writes * rows
        curve = {"step": list(range(steps)), "loss": [3.0 - 1e-4 * s for s in range(steps)]}
        result = RunResult(run_id=rid, config={**BASE, "seed": i}, status="done", metrics=curve,
                           summary={"steps": steps, "tokens": steps * 128, "train_loss": 2.0, "wall_s": 1.0},
                           started="2025-01-01T00:00:00", finished="2025-01-01T00:01:00", host="n",
                           device="cpu")
        t0 = time.perf_counter()
        try:
            store.ingest(result)
        except Exception as exc:  # noqa: BLE001 - counted
            errors.append(f"ingest: {type(exc).__name__}: {str(exc).splitlines()[0]}")
        ingest_s = time.perf_counter() - t0
        store.close()
    except Exception:  # noqa: BLE001 - the writer could not even start
        out.put((i, lat, None, [traceback.format_exc().splitlines()[-1]]))
        return
    out.put((i, lat, ingest_s, errors))


def check(url: str, n: int, steps: int) -> list[str]:
    """What did not arrive: a run not ``done``, a curve not every step once."""
    with Store.open(url) as store:
        ids = [run_id(i) for i in range(n)]
        statuses = store.statuses(run_ids=ids)
        curves = store.curves(run_ids=ids, metrics=["loss"])
    missing = [f"{rid}: {statuses.get(rid)}" for rid in ids if statuses.get(rid) != "done"]
    for rid, group in curves.groupby("run_id"):
        if sorted(group["step"]) != list(range(steps)):
            missing.append(f"{rid}: {len(group)} of {steps} steps")
    missing += [f"{rid}: no curve" for rid in set(ids) - set(curves["run_id"])]
    return missing


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def bench(url: str, n: int, writes: int, rows: int) -> dict[str, Any]:
    register(url, n)
    ctx = mp.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=writer, args=(url, i, writes, rows, start, out)) for i in range(n)]
    for p in procs:
        p.start()
    time.sleep(2.0)  # let them import and connect (each waits on `start`)
    t0 = time.perf_counter()
    start.set()
    got = [out.get(timeout=900) for _ in procs]
    wall = time.perf_counter() - t0
    for p in procs:
        p.join()
    lat = [x for _, ls, _, _ in got for x in ls]
    ingests = [s for _, _, s, _ in got if s is not None]
    errors = [e for _, _, _, es in got for e in es]
    return {"writers": n, "writes": len(lat), "p50": pct(lat, 50), "p95": pct(lat, 95), "p99": pct(lat, 99),
            "max": max(lat), "ingest_p50": pct(ingests, 50), "ingest_max": max(ingests), "wall": wall,
            "errors": errors, "missing": check(url, n, writes * rows)}


def fresh_url(base: str | None, tag: str) -> str:
    """A new empty store: a SQLite file, or a new schema on the PostgreSQL server at ``base``."""
    if base is None:
        return f"sqlite:///{Path(tempfile.mkdtemp(prefix='writers-')) / 'ablate.db'}"
    import psycopg
    from sqlalchemy.engine import make_url

    url = make_url(base)
    with psycopg.connect(url.set(drivername="postgresql").render_as_string(hide_password=False),
                         autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{tag}"')
    return url.update_query_dict({"options": f"-csearch_path={tag}"}).render_as_string(hide_password=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--writers", type=int, nargs="+", default=[8, 32, 64])
    ap.add_argument("--writes", type=int, default=20, help="live writes per writer")
    ap.add_argument("--rows", type=int, default=25, help="step rows per live write")
    ap.add_argument("--url", help="a PostgreSQL server (postgresql+psycopg://...); SQLite is always run")
    ap.add_argument("--no-sqlite", action="store_true")
    args = ap.parse_args()
    backends = [] if args.no_sqlite else [("sqlite", None)]
    backends += [("postgresql", args.url)] if args.url else []
    print(f"{args.writes} live writes of {args.rows} rows per writer (from 2 threads), then one ingest")
    print("| backend | writers | live writes | p50 ms | p95 ms | p99 ms | max ms | ingest p50 ms | "
          "ingest max ms | wall s | errors | rows missing |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, base in backends:
        for n in args.writers:
            url = fresh_url(base, f"writers_{n}_{int(time.time())}")
            r = bench(url, n, args.writes, args.rows)
            print(f"| {name} | {n} | {r['writes']} | {1e3 * r['p50']:.1f} | {1e3 * r['p95']:.1f} | "
                  f"{1e3 * r['p99']:.1f} | {1e3 * r['max']:.0f} | {1e3 * r['ingest_p50']:.0f} | "
                  f"{1e3 * r['ingest_max']:.0f} | {r['wall']:.1f} | {len(r['errors'])} | "
                  f"{len(r['missing'])} |",
                  flush=True)
            for e in sorted(set(r["errors"]))[:3]:
                print(f"    error: {e}")
            for m in r["missing"][:3]:
                print(f"    missing: {m}")


if __name__ == "__main__":
    main()
