"""docs/results.md's measured tables, generated from stored results, so that a table and its numbers cannot
drift apart.

A table's numbers live in ``docs/measured/<grid>.json``: each run's id, variant, seed, held-out
perplexity (``val_ppl``, the reports' Avg PPL) and whole resolved config, with the date, commit, command,
machine and wall time of the measurement. ``capture`` writes it from a store that ran the grid; ``render``
turns it into the markdown table; ``write`` puts each table into docs/results.md between ``<!-- measured:
<grid> -->`` and ``<!-- /measured -->``, and ``check`` says where the docs differ from the JSON.
``tests/unit/reports/test_doc_tables.py`` holds docs/results.md to ``render``, the JSON's runs to the shipped
study's run ids, and retrains one stored run (G1 at seed 0, about a minute on one CPU thread): its first
losses to the stored ones anywhere, its perplexity exactly on a machine like the one that measured it (the
JSON names the CPU and torch's kernels for it: another CPU rounds differently, and the numbers move by
tenths).

    ablate run quickstart --jobs 2 --home /tmp/qs-home --no-mlflow
    .venv/bin/python bench/doc_tables.py capture quickstart --home /tmp/qs-home \\
        --command "ablate run quickstart --jobs 2" --load 0.7-3.0 --wall 363
    .venv/bin/python bench/doc_tables.py write      # docs/results.md's tables from docs/measured/*.json
    .venv/bin/python bench/doc_tables.py check      # exit 1 when a table differs from its JSON
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import subprocess
import sys
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MEASURED = ROOT / "docs" / "measured"
DOC = ROOT / "docs" / "results.md"
METRIC = "val_ppl"
REFERENCE = "baseline"
HEAD_STEPS = 21  # the losses stored per run: steps 0-20, which another CPU's rounding leaves within 1e-5
BLOCK = re.compile(r"(<!-- measured: (?P<grid>[\w./-]+) -->\n)(?P<body>.*?)(<!-- /measured -->)", re.S)


# ------------------------------------------------------------ the JSON
def capture(grid: str, *, home: Path, store: str | None, command: str, load: str, wall_s: float | None
            ) -> dict[str, Any]:
    """What ``docs/measured/<grid>.json`` holds, read from the store (the runs, their perplexity) and from
    each run's ``result.json`` under ``home`` (its resolved config, its first ``HEAD_STEPS`` losses): the
    grid's finished runs in the study's order (variant as the grid lists them, then seed), and the machine
    (``machine()``)."""
    from ablate.grid import expand, load_grid
    from ablate.result import read_result
    from ablate.store import Store
    from ablate.studies import resolve

    planned = expand(load_grid(resolve(grid)))
    order = {p.run_id: i for i, p in enumerate(planned)}
    with Store.open(store, home=home) as opened:
        frame = opened.runs_frame(grid=grid, current=True)
    runs = []
    for row in frame.sort_values("run_id").itertuples():
        if row.status != "done" or row.run_id not in order:
            continue
        result = read_result(home / "runs" / row.run_id)
        runs.append({"run_id": row.run_id, "variant": row.variant, "seed": int(row.seed),
                     METRIC: float(getattr(row, METRIC)), "config": result.config,
                     "loss_head": result.metrics["loss"][:HEAD_STEPS],
                     "provenance": {k: result.provenance.get(k) for k in ("ablate", "torch", "model_code",
                                                                          "git_commit", "device")}})
    runs.sort(key=lambda r: order[r["run_id"]])
    commits = {r["provenance"].get("git_commit") for r in runs}  # what the runs trained with
    commit = str(commits.pop())[:7] if len(commits) == 1 and None not in commits else _commit()
    return {"grid": grid, "metric": METRIC, "reference": REFERENCE,
            "measured": {"date": date.today().isoformat(), "commit": commit, "command": command,
                         "load": load, "wall_s": wall_s, "machine": machine()},
            "runs": runs}


def machine() -> dict[str, Any]:
    """What a trained number depends on besides the code and the data: the CPU and the kernels torch picks for
    it (training is deterministic on one machine, but another CPU's vector kernels round differently, and 300
    steps at a high learning rate grow that to a tenth of a PPL), torch's version, the cores."""
    import platform

    import torch

    from ablate.execute.devices import usable_cpus

    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu, "kernels": torch.backends.cpu.get_cpu_capability(), "torch": torch.__version__,
            "cores": usable_cpus()}


def _commit() -> str:
    out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True)
    return out.stdout.strip() or "unknown"


def load(grid: str) -> dict[str, Any]:
    """``docs/measured/<grid>.json``."""
    data: dict[str, Any] = json.loads((MEASURED / f"{grid}.json").read_text())
    return data


# ------------------------------------------------------------ the table
def _num(x: float, digits: int = 2, sign: bool = False) -> str:
    return f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"


def render(data: dict[str, Any]) -> str:
    """The markdown table of a measurement: per variant, the metric's mean ± std over seeds, each seed's
    value, and the paired difference to the reference arm (same seed) with its 95% Student t interval; a
    caption line says what was measured where."""
    from ablate.stats import t_interval

    metric, reference = data["metric"], data["reference"]
    by_variant: dict[str, dict[int, float]] = {}
    for r in data["runs"]:
        by_variant.setdefault(r["variant"], {})[r["seed"]] = r[metric]
    seeds = sorted({r["seed"] for r in data["runs"]})
    head = ["variant", f"{metric}, mean ± std", *(f"seed {s}" for s in seeds),
            f"Δ vs {reference} (paired) [95% CI]"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    base = by_variant.get(reference, {})
    for variant, values in by_variant.items():
        xs = [values[s] for s in seeds if s in values]
        spread = f" ± {_num(statistics.stdev(xs))}" if len(xs) > 1 else ""
        delta = ""
        diffs = [values[s] - base[s] for s in seeds if s in values and s in base]
        if variant != reference and diffs:
            lo, hi = t_interval(diffs)
            ci = f" [{_num(lo, sign=True)}, {_num(hi, sign=True)}]" if lo is not None else ""
            delta = f"{_num(statistics.fmean(diffs), sign=True)}{ci}"
        cells = [f"`{variant}`", f"{_num(statistics.fmean(xs))}{spread}",
                 *(_num(values[s]) if s in values else "" for s in seeds), delta]
        lines.append("| " + " | ".join(cells) + " |")
    m = data["measured"]
    host = m["machine"]
    wall = f", {m['wall_s']:.0f} s" if m.get("wall_s") is not None else ""
    n = len(data["runs"])
    lines += ["", f"{n} runs of `{data['grid']}`, measured {m['date']} at commit {m['commit']} "
                  f"(`{m['command']}`{wall}, load {m['load']}) on {host['cpu']}, {host['cores']} cores, "
                  f"torch {host['torch']} with its {host['kernels']} kernels; mean ± sample std over seeds; "
                  f"Δ: paired by seed, Student t (n-1 df). Generated by `bench/doc_tables.py` from "
                  f"`docs/measured/{data['grid']}.json`."]
    assert all(math.isfinite(r[metric]) for r in data["runs"]), "a run without its metric"
    return "\n".join(lines) + "\n"


def write(text: str) -> str:
    """``text`` (docs/results.md) with each measured block rendered from its JSON."""
    return BLOCK.sub(lambda m: m.group(1) + render(load(m.group("grid"))) + m.group(4), text)


def blocks(text: str) -> dict[str, str]:
    """Each measured block of ``text`` by grid: what the docs say now."""
    return {m.group("grid"): m.group("body") for m in BLOCK.finditer(text)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    cap = sub.add_parser("capture", help="a store's runs of GRID -> docs/measured/GRID.json")
    cap.add_argument("grid")
    cap.add_argument("--home", type=Path, required=True)
    cap.add_argument("--store", default=None)
    cap.add_argument("--command", required=True, help="the command that trained them, as the caption says it")
    cap.add_argument("--load", required=True, help="the load average while it ran, e.g. 0.7-3.0")
    cap.add_argument("--wall", type=float, default=None, help="its wall time in seconds")
    ren = sub.add_parser("render", help="the markdown table of docs/measured/GRID.json")
    ren.add_argument("grid")
    sub.add_parser("write", help="rewrite docs/results.md's measured tables from their JSON")
    sub.add_parser("check", help="exit 1 when a table of docs/results.md differs from its JSON")
    args = parser.parse_args(argv)
    if args.cmd == "capture":
        data = capture(args.grid, home=args.home, store=args.store, command=args.command, load=args.load,
                       wall_s=args.wall)
        MEASURED.mkdir(parents=True, exist_ok=True)
        (MEASURED / f"{args.grid}.json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        print(render(data), end="")
    elif args.cmd == "render":
        print(render(load(args.grid)), end="")
    elif args.cmd == "write":
        DOC.write_text(write(DOC.read_text()))
    else:
        text = DOC.read_text()
        stale = [grid for grid, body in blocks(text).items() if body != render(load(grid))]
        for grid in stale:
            print(f"docs/results.md: the {grid} table differs from docs/measured/{grid}.json "
                  "(bench/doc_tables.py write)", file=sys.stderr)
        return 1 if stale else 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
