"""``ablate plan`` at scale: a second plan of a grid whose models were counted before never imports torch (the
counts are kept on disk per version of the model code), and a plan of more rows than rich lays out quickly
prints as plain columns with the same cells. The CPU time itself is measured in bench/grid_overhead.py, not
here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tiny_grids import tiny_grid
from typer.testing import CliRunner

from ablate.ablations.meta_counts import counts_file
from ablate.cli import app
from ablate.cli.views import RICH_ROWS

PLAN = ("import atexit, sys; atexit.register(lambda: print('torch imported:', 'torch' in sys.modules, "
        "file=sys.stderr)); sys.argv = ['ablate', 'plan', sys.argv[1], '--format', 'json']; "
        "from ablate.cli import main; main()")


def test_a_second_plan_counts_nothing_and_never_imports_torch(tmp_path):
    path = tmp_path / "g.yaml"
    path.write_text(tiny_grid("counted", variants=["baseline", "sdpa-elementwise", "sdpa-headwise"]))
    env = {**os.environ, "ABLATE_CACHE": str(tmp_path / "cache"), "ABLATE_HOME": str(tmp_path / "home")}

    def plan() -> tuple[str, str]:
        out = subprocess.run([sys.executable, "-c", PLAN, str(path)], env=env, capture_output=True, text=True,
                             timeout=300)
        assert out.returncode == 0, out.stderr
        return out.stdout, out.stderr

    first, first_err = plan()
    assert "torch imported: True" in first_err  # counted on the meta device
    kept = list((tmp_path / "cache").glob("meta_counts-*.json"))
    assert len(kept) == 1 and kept[0].name == counts_file().name  # named after this version of the model code
    again, again_err = plan()
    assert "torch imported: False" in again_err
    assert again == first  # the same parameters, added parameters and FLOPs


def test_a_long_plan_prints_plain_columns_with_the_same_cells(tmp_path, monkeypatch):
    monkeypatch.setenv("ABLATE_HOME", str(tmp_path / "home"))
    path = tmp_path / "g.yaml"
    seeds = list(range(RICH_ROWS // 2 + 1))  # two variants: just over the rich table's limit
    path.write_text(tiny_grid("long", seeds=seeds))
    out = CliRunner().invoke(app, ["plan", str(path)])
    assert out.exit_code == 0, out.output
    lines = out.stdout.splitlines()
    assert lines[0] == f"grid long: {2 * len(seeds)} runs"
    assert lines[1].split() == ["run", "id", "variant", "seed", "params", "added", "tokens", "FLOPs",
                                "memory", "status"]
    assert set(lines[2]) == {"-", " "} and len(lines) == 4 + 2 * len(seeds)
    assert lines[-1].startswith("ablate run here: 1 worker on cpu")  # what `ablate run` would start
    first = lines[3].split()
    assert first[1:3] == ["baseline", "0"] and first[-1] == "new" and "│" not in out.stdout
    short = tmp_path / "short.yaml"
    short.write_text(tiny_grid("short", seeds=[0]))
    table = CliRunner().invoke(app, ["plan", str(short)]).stdout
    # a short plan is a rich table, with the same parameter count cells
    assert "│" in table and first[3] in table
    assert Path(counts_file()).name.startswith("meta_counts-")
