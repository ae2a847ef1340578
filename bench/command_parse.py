"""How fast a command trainer reads a run's metrics (issue #44's goal: parsing never the bottleneck, at
100,000 lines a second): lines per second of each parser on synthetic lines, each through ``MetricsReader``
as a run feeds it (the stream kept, the first lines kept for a failure message).

- ``regex, every line``: nanoGPT-style lines, each a match (the worst case: a record per line);
- ``regex, 1 in 100``: the same lines among 99 lines of other output (a chatty script);
- ``key: value``: ``val_loss: 2.31 (step N)`` lines (``stdout: true``);
- ``jsonl``: a file of JSON objects, tailed in polls of 10,000 lines.

    .venv/bin/python bench/command_parse.py [--lines 1000000]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ablate.trainers.command.parse import MetricsReader
from ablate.trainers.command.spec import CommandSpec, load_spec

PATTERN = r"step (?P<step>\d+): train (?P<train_loss>[\d.]+), val (?P<val_loss>[\d.]+)"


def spec(metrics: dict[str, object]) -> CommandSpec:
    return load_spec({"command": "python train.py {args}", "metrics": metrics,
                      "objective": {"metric": "val_loss", "better": "lower"}})


Rates = tuple[float, float, int]  # lines per second of wall time, per second of CPU time; records kept


def stdout_rate(metrics: dict[str, object], line: Callable[[int], str], n: int) -> Rates:
    lines = [line(i) for i in range(n)]
    reader = MetricsReader(spec(metrics))
    feed = reader.stdout_line
    wall, cpu = time.perf_counter(), time.process_time()
    for text in lines:
        feed(text)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return n / wall, n / cpu, len(reader.stream.series.get("val_loss", []))


def jsonl_rate(n: int, chunk: int = 10_000) -> Rates:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "metrics.jsonl"
        reader = MetricsReader(spec({"jsonl": str(path)}), path)
        wall = cpu = 0.0
        with open(path, "w") as f:
            for start in range(0, n, chunk):
                f.write("".join(json.dumps({"step": i, "train_loss": 2.0 + i * 1e-6, "val_loss": 2.1})
                                + "\n" for i in range(start, min(n, start + chunk))))
                f.flush()
                began, began_cpu = time.perf_counter(), time.process_time()
                reader.poll()
                wall += time.perf_counter() - began
                cpu += time.process_time() - began_cpu
        return n / wall, n / cpu, len(reader.stream.series.get("val_loss", []))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    n = parser.parse_args().lines
    nano = "step {i}: train {a:.4f}, val {b:.4f}"
    cases: list[tuple[str, Callable[[], Rates]]] = [
        ("regex, every line", lambda: stdout_rate(
            {"stdout": PATTERN}, lambda i: nano.format(i=i, a=2 + i * 1e-6, b=2.1), n)),
        ("regex, 1 in 100", lambda: stdout_rate(
            {"stdout": PATTERN},
            lambda i: nano.format(i=i, a=2.0, b=2.1) if i % 100 == 0 else f"iter {i}: time 12.3ms, mfu 4.1%",
            n)),
        ("key: value", lambda: stdout_rate(
            {"stdout": True}, lambda i: f"val_loss: {2 + i * 1e-6:.5f} (step {i})", n)),
        ("jsonl", lambda: jsonl_rate(n)),
    ]
    print(f"{n:,} lines each; goal >= 100,000 lines/s. CPU: lines per second of this process's CPU time, "
          f"the figure a busy machine moves least")
    print(f"{'parser':<20} {'lines/s':>12} {'lines/CPU s':>12} {'records':>10}")
    for name, case in cases:
        wall, cpu, records = case()
        print(f"{name:<20} {wall:>12,.0f} {cpu:>12,.0f} {records:>10,}")


if __name__ == "__main__":
    main()
