"""Tables at a terminal fit its width: the real ``ablate`` command in a pseudo-terminal of 80 and 100 columns
(``pty``, the window size set with TIOCSWINSZ and COLUMNS), every line at most that wide and what a reader
needs on it; the report renderer at any width; ``ablate runs`` in its grid's order; off a terminal, markdown
and whole tables as before.

The store holds one grid of known runs: six arms (one with a long name, one a plugin arm), two learning
rates, three seeds, 300 steps each, held-out PPLs, probes and two benchmark tasks, and one failed run.
"""

from __future__ import annotations

import fcntl
import hashlib
import math
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ablate.cli import app
from ablate.config import RunConfig
from ablate.result import RunResult

ABLATE = str(Path(sys.executable).parent / "ablate")
GRID = "widths"
ARMS = {"baseline": 9.4, "sdpa-elementwise": 8.1, "sdpa-headwise": 9.0, "v-elementwise": 8.9,
        "forgetting-attention-rope": 9.2, "myattn:CappedSoftmax(cap=5)": 9.3}
LRS, SEEDS, STEPS = (3e-3, 1e-2), (0, 1, 2), 300
GATED = ("sdpa-elementwise", "sdpa-headwise", "v-elementwise")
DATA = "/data/corpora/a-folder-with-a-long-name/and-a-file-name-longer-than-a-terminal-shows-whole.txt"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


def _run(variant: str, seed: int, lr: float, ppl: float) -> tuple[dict[str, Any], RunResult]:
    config = RunConfig(variant="baseline", seed=seed, model={"preset": "tiny"},
                       train={"lr": lr, "steps": STEPS},
                       data={"train": [{"kind": "text", "path": DATA}]}).model_dump(mode="json")
    config["variant"] = variant  # a plugin arm's name, as RunConfig writes it
    rid = hashlib.sha256(f"{variant}/{seed}/{lr}".encode()).hexdigest()[:12]
    ppl += 0.05 * (seed - 1) + 0.01 * ((seed * 7 + len(variant)) % 5)  # a spread, and pairs that differ
    gated = variant in GATED
    summary = {"steps": STEPS, "tokens": STEPS * 4096, "params": 119168,
               "added_params": 8192 if gated else 0, "train_loss": math.log(ppl) - 0.1, "val_ppl": ppl,
               "ppl/code": ppl - 1.2, "ppl/prose": ppl + 1.2,
               "loss_spikes": 0, "f_attn": 0.1 if gated else 0.4 + 0.01 * seed,
               "m_act": (20.0 if gated else 300.0) * (1 + 0.1 * seed), "gate_score": 0.3 if gated else None,
               "bench/ablate_niah_multikey": 40.0 + seed, "bench/ablate_niah_single": 60.0 - seed,
               "tokens_per_s": 20000.0 + 100 * seed, "wall_s": 60.0}
    steps = list(range(STEPS))
    loss = [5.0 * math.exp(-s / 40) + math.log(ppl) for s in steps]
    result = RunResult(run_id=rid, config=config, status="done", summary=summary,
                       metrics={"step": steps, "loss": loss},
                       started="2025-01-01T10:00:00+00:00", finished="2025-01-01T10:01:00+00:00")
    planned = {"run_id": rid, "config": config, "params": 119168, "added_params": summary["added_params"],
               "axes": {"variant": variant, "seed": seed, "train.lr": lr}}
    return planned, result


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from ablate.store import Store

    runs = [_run(v, seed, lr, ppl) for v, ppl in ARMS.items() for lr in LRS for seed in SEEDS]
    failed_plan, failed = _run("sdpa-headwise", 3, LRS[0], 9.0)
    failed = failed.model_copy(update={"status": "failed", "summary": {}, "error": "RuntimeError: the "
                                       "gradient of a gate came back NaN at step 12 of 300 " + "x" * 60})
    url = f"sqlite:///{tmp_path_factory.mktemp('widths') / 'ablate.db'}"
    with Store.open(url) as store:
        planned = [p for p, _ in runs] + [failed_plan]
        store.register_grid(name=GRID, text=f"name: {GRID}\n", runs=planned)
        for _, result in runs:
            store.ingest(result)
        store.ingest(failed)
    return url


def at_terminal(args: list[str], width: int) -> tuple[int, list[str]]:
    """Run ``ablate ARGS`` in a pseudo-terminal ``width`` columns wide; its exit status and its lines (styles
    taken out). Reads until the command closes the terminal (it exited)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, width, 0, 0))
    env = {**os.environ, "COLUMNS": str(width), "LINES": "50", "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen([ABLATE, *args], stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: every writer of the terminal has closed it
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    status = proc.wait(timeout=120)
    text = ANSI.sub("", out.decode("utf-8", "replace")).replace("\r", "")
    return status, text.split("\n")


def _first(url: str, variant: str) -> str:
    """The id of ``variant``'s run at seed 0 and the lower learning rate."""
    where = f"variant == '{variant}' and seed == 0 and train.lr == {LRS[0]}"
    out = CliRunner().invoke(app, ["runs", "--store", url, "--where", where, "--format", "csv", "--columns",
                                   "run_id"])
    return out.stdout.splitlines()[1]


COMMANDS = {
    "report table1": (["report", "table1"], ["Table 1: Gating variants", "SDPA Elementwise G1", "Baseline",
                                            "Gating Position Variants", "rows have no runs in this grid"]),
    "report compare": (["report", "compare"], ["Every arm against baseline", "myattn:CappedSoftmax(cap=5)",
                                               "forgetting-attention-rope", "val_ppl (Avg PPL", "needs ≈",
                                               "Holm over"]),
    "report scorecard": (["report", "scorecard"], ["G1 lowers the attention sink", "holds"]),
    "runs": (["runs"], ["forgetting-attention-rope", "train.lr", "val_ppl", "left out to fit",
                        "--columns"]),
    "variants": (["variants"], ["sdpa-headwise-input-independent", "table2:2,4,8,10,13,14"]),
    "show": (["show", "G1"], ["loss by step (steps 0-299)", "data.train", "whole.txt", "300"]),
    "diff": (["diff", "BASE", "G1"], ["baseline, seed 0", "sdpa-elementwise, seed 0", "val_ppl"]),
}


@pytest.mark.parametrize("width", [80, 100])
@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_table_fits_a_terminal(url: str, name: str, width: int) -> None:
    args, wanted = COMMANDS[name]
    ids = {"G1": _first(url, "sdpa-elementwise"), "BASE": _first(url, "baseline")}
    args = [ids.get(a, a) for a in args] + (["--store", url] if name != "variants" else [])
    status, lines = at_terminal(args, width)
    text = "\n".join(lines)
    assert status == 0, text
    over = [line for line in lines if len(line) > width]
    assert not over, f"{len(over)} lines over {width} columns:\n" + "\n".join(over)
    assert "…" not in text  # nothing cut
    for want in wanted:
        assert want in text, f"{want!r} missing at {width} columns:\n{text}"


def test_markdown_when_asked_at_a_terminal(url: str) -> None:
    status, lines = at_terminal(["report", "table1", "--format", "markdown", "--store", url], 80)
    assert status == 0 and "| Method | Act Func |" in "\n".join(lines)


def test_runs_in_the_grids_order_and_whole_off_a_terminal(url: str) -> None:
    out = CliRunner().invoke(app, ["runs", "--store", url, "--format", "markdown"])
    assert out.exit_code == 0, out.output
    rows = [line.split(" | ") for line in out.stdout.splitlines()[2:]]
    head = out.stdout.splitlines()[0].split(" | ")
    at = {c.strip("| "): i for i, c in enumerate(head)}
    assert list(at)[:6] == ["run_id", "grid", "variant", "train.lr", "seed", "status"]  # the grid's axes
    keys = [(r[at["variant"]], float(r[at["train.lr"]]), int(r[at["seed"]])) for r in rows]
    assert keys == sorted(keys) and len(keys) == len(ARMS) * len(LRS) * len(SEEDS) + 1
    table = CliRunner().invoke(app, ["runs", "--store", url])  # off a terminal: every summary column, whole
    assert "bench/ablate_niah_multikey" in table.stdout and "left out" not in table.stdout


# ---------------------------------------------------------------- the report renderer at any width
@pytest.fixture(scope="module")
def tables(url: str) -> list[Any]:
    """Every report table of the grid: the paper's (with and without --paper), the comparison table (as the
    terminal shows it: its verdicts say the unresolved lines) and the scorecard."""
    from dataclasses import replace

    from ablate.reports.api import grid_scorecard, grid_table
    from ablate.reports.compare import build_compare
    from ablate.reports.compare_render import to_table
    from ablate.reports.data import load_grid_data
    from ablate.reports.scorecard_render import scorecard_table
    from ablate.store import Store

    with Store.open(url) as store:
        data = load_grid_data(store, GRID)
    tables = [grid_table(data, n, paper=paper) for n in range(1, 7) for paper in (False, True)]
    return [*tables, replace(to_table(build_compare(data)), unresolved=[]),
            scorecard_table(grid_scorecard(data))]


@pytest.mark.parametrize("width", [40, 60, 80, 100, 140])
def test_a_report_table_fits_any_width(tables: list[Any], width: int) -> None:
    from ablate.reports.terminal import shown_rows, to_terminal

    for table in tables:
        text = to_terminal(table, width, styled=False)
        lines = text.splitlines()
        assert max(map(len, lines)) <= width, (table.name, width)
        rows, hidden = shown_rows(table)
        if table.number is not None:  # a paper table: the rows the grid ran, and how many it left out
            assert all(r.run_ids for r in rows if r.paper_row is not None) and hidden
            assert f"{hidden} of the paper's" in " ".join(lines)
        first = rows[0].label.split()[0]
        assert any(line.startswith(first) for line in lines), (table.name, first)


def test_the_comparison_table_says_each_thing_once(url: str) -> None:
    from ablate.reports.compare import build_compare
    from ablate.reports.compare_render import render_compare, to_table
    from ablate.reports.data import load_grid_data
    from ablate.store import Store

    with Store.open(url) as store:
        report = build_compare(load_grid_data(store, GRID))
    table = to_table(report)
    assert table.unresolved  # the markdown's lines under the table, one per open comparison
    wide = ANSI.sub("", render_compare(report, "terminal", width=140))
    # its verdict column says what those lines would repeat: they are not printed again, nor the pairing note
    assert not any(line in wide for line in table.unresolved) and "needs ≈" in wide
    narrow = ANSI.sub("", render_compare(report, "terminal", width=60))
    assert "left out to fit 60 columns: pairing across seeds" in " ".join(narrow.split())
    assert "pairing: r is" not in narrow


def test_eval_headers_are_whole_task_names(url: str) -> None:
    from rich.console import Console

    from ablate.cli.evaluate import _table
    from ablate.scoring.harness import RunScores

    scores = {"bench/ablate_mqar": 12.5, "bench/ablate_niah_multikey": 40.0, "bench/ablate_niah_single": 55.0,
              "bench/ablate_vt": 3.0}
    table = _table([RunScores("1021ca96a5b6", scores, ["bench/ablate_mqar"])])
    assert [str(c.header) for c in table.columns][1:5] == [k.removeprefix("bench/") for k in scores]
    for width in (80, 100):
        console = Console(width=width, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
        console.print(table)
        text = console.export_text()
        assert "…" not in text and max(map(len, text.splitlines())) <= width
