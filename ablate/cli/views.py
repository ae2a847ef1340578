"""The rich tables the commands print. Pure: each takes plain data and returns a renderable."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

RICH_ROWS = 500  # a longer table prints as plain columns (text_table): rich lays out ~1,000 rows a second

if TYPE_CHECKING:
    import pandas as pd
    from rich.table import Table


def paper_cell(paper: list[str], source: str) -> str:
    """A variant's paper rows grouped by table (``table2:2,4,8``), else the short name of the paper it comes
    from (its authors and year).

    >>> paper_cell(["table1:5", "table3:2", "table2:2", "table2:4"], "Qiu et al. 2025, Gated Attention")
    'table1:5 table2:2,4 table3:2'
    >>> paper_cell([], "Miller 2023, Attention Is Off By One (blog post)")
    'Miller 2023'
    """
    tables: dict[str, list[str]] = {}
    for ref in paper:
        name, _, row = ref.partition(":")
        tables.setdefault(name, []).append(row)
    if not tables:
        return source.split(",")[0] or "-"
    return " ".join(f"{name}:{','.join(rows)}" for name, rows in sorted(tables.items()))


def variants_table(rows: list[dict[str, Any]], preset: str | None, *, wide: bool = False) -> Table:
    """``ablate variants``: one row per catalogue entry (and the parameters it adds at ``preset``). By
    default the name, the paper rows and the description (wrapped: readable at 100 columns); ``wide``: every
    field, on one line each."""
    from rich import box
    from rich.table import Table

    if not wide:
        table = Table(title="ablate variants (--wide: activation, score shape, source)", box=box.SIMPLE_HEAD,
                      title_justify="left")
        papers = [paper_cell(row["paper"], row["source"]) for row in rows]
        longest = max((len(word) for p in papers for word in p.split()), default=1)  # table2:2,4,8,10,13,14
        table.add_column("variant", no_wrap=True, style="bold")
        table.add_column("paper rows (or source)", overflow="fold", min_width=min(longest, 22), max_width=22)
        table.add_column("description", overflow="fold", ratio=1)
        if preset is not None:
            table.add_column(f"added @ {preset}", justify="right", no_wrap=True)
        for row in rows:
            cells = [row["name"], paper_cell(row["paper"], row["source"]), row["description"]]
            if preset is not None:
                cells.append("-" if row["added_params"] is None else f"{row['added_params'] / 1e6:,.2f}M")
            table.add_row(*cells)
        return table
    table = Table(title="ablate variants")
    table.add_column("variant", no_wrap=True, style="bold")
    for col in ("paper rows", "act", "score shape", "description", "source", "rev",
                "reference code it equals (repo@commit:file)"):
        table.add_column(col)
    if preset is not None:
        table.add_column(f"added @ {preset}", justify="right")
    for row in rows:
        ref = row.get("reference")
        cells = [row["name"], " ".join(row["paper"]) or "-", row["act_func"], row["score_shape"],
                 row["description"], row["source"], str(row.get("revision", "-")),
                 "-" if ref is None else ref["pin"]]
        if preset is not None:
            cells.append("-" if row["added_params"] is None else f"{row['added_params'] / 1e6:,.2f}M")
        table.add_row(*cells)
    return table


def rich_table(title: str, columns: list[tuple[str, str]], rows: list[list[str]]) -> Table:
    """A rich ``Table`` of text cells; ``columns``: (name, ``left``/``right``); the first column bold, the
    first two never wrapped."""
    from rich.table import Table

    table = Table(title=title)
    for i, (col, justify) in enumerate(columns):
        table.add_column(col, justify=justify, no_wrap=i < 2, style="bold" if i == 0 else None)  # type: ignore[arg-type]
    for cells in rows:
        table.add_row(*cells)
    return table


def text_table(title: str, columns: list[tuple[str, str]], rows: list[list[str]]) -> str:
    """The same table as plain aligned columns (a title line, a header, a rule, one line per row): what a
    10,000-row table is printed as, in milliseconds instead of rich's seconds.

    >>> print(text_table("t", [("a", "left"), ("n", "right")], [["x", "1"], ["yy", "10"]]))
    t
    a    n
    --  --
    x    1
    yy  10
    """
    names = [c for c, _ in columns]
    widths = [max([len(n), *(len(r[i]) for r in rows)]) for i, n in enumerate(names)]
    pads = [str.rjust if j == "right" else str.ljust for _, j in columns]

    def line(cells: list[str]) -> str:
        return "  ".join(pad(c, w) for pad, c, w in zip(pads, cells, widths, strict=True)).rstrip()

    return "\n".join([title, line(names), "  ".join("-" * w for w in widths), *(line(r) for r in rows)])


def runs_cells(frame: pd.DataFrame, cols: list[str]) -> tuple[list[tuple[str, str]], list[list[str]]]:
    """``ablate runs``' columns of ``frame`` as text: (name, ``left``/``right``), one row of cells per run."""
    from pandas.api.types import is_numeric_dtype

    from ablate.store import render

    columns = [(c, "right" if is_numeric_dtype(frame[c]) else "left") for c in cols]
    return columns, [[render.text(v) for v in row] for row in frame[cols].itertuples(index=False)]


ERROR_WIDTH = 40  # at a terminal, a run's error wraps in this many columns (`ablate show` has it whole)
GAP = 2  # spaces between two columns of a table fitted to a terminal, and of a plain text table


def runs_table(frame: pd.DataFrame, title: str, cols: list[str], *, fit: bool = False) -> tuple[Table, int]:
    """``ablate runs``: the columns ``cols`` of ``frame``; also the width that shows every cell whole.
    ``fit``: for a terminal the columns ``fit_columns`` chose, borderless (two spaces apart) and the error
    wrapped at ``ERROR_WIDTH``."""
    from rich.table import Table

    columns, cells = runs_cells(frame, cols)
    table = (Table(title=title, title_justify="left", box=None, padding=(0, 1), pad_edge=False,
                   header_style="bold underline") if fit else Table(title=title))
    for c, justify in columns:
        wrap = fit and c == "error"
        table.add_column(c, no_wrap=not wrap, justify=justify, overflow="fold" if wrap else "ellipsis",  # type: ignore[arg-type]
                         max_width=ERROR_WIDTH if wrap else None)
    for row in cells:
        table.add_row(*row)
    width = sum(max([len(c), *(len(r[i]) for r in cells)]) + 3 for i, c in enumerate(cols)) + 1
    return table, width


def fit_columns(frame: pd.DataFrame, cols: list[str], width: int, keep: int) -> tuple[list[str], list[str]]:
    """``ablate runs`` at a terminal ``width`` columns wide: of ``cols``, the first ``keep`` (who the run is)
    and as many of the others as fit, ``GAP`` apart: the held-out perplexities first (what every paper table
    compares), then the other outcomes ``ablate.metrics`` compares (in their declared order), then the other
    numbers (counts, throughput), then the error; returned in ``cols``' order, with the columns left out (in
    that order of what matters)."""
    from ablate.metrics import metric
    from ablate.store.render import text

    def need(c: str) -> int:
        widest = max([len(c), *(len(text(v)) for v in frame[c].tolist())])
        return min(widest, ERROR_WIDTH) if c == "error" else widest

    def rank(c: str) -> int:
        m = metric(c)
        if c == "error":
            return 3
        if m is None or m.compare is None or m.timing:
            return 2
        return 0 if m.name in ("val_ppl", "ppl/") else 1

    shown = set(cols[:keep])
    room = width - sum(need(c) for c in cols[:keep]) - GAP * (keep - 1)
    left = []
    for c in sorted(cols[keep:], key=rank):
        if need(c) + GAP <= room:
            shown.add(c)
            room -= need(c) + GAP
        else:
            left.append(c)
    return [c for c in cols if c in shown], left


def left_out_line(left: list[str], width: int) -> str:
    """The line under a table that left columns out for room: which (the first few), and how to get them."""
    named = ", ".join(left[:8]) + (f" and {len(left) - 8} more" if len(left) > 8 else "")
    return (f"left out to fit {width} columns: {named} (--columns picks columns, e.g. --columns "
            f"'run_id,variant,{left[0]}'; --format csv or json has every one)")


def status_tables(summary: dict[str, Any], statuses: tuple[str, ...]) -> list[Table]:
    """``ablate status``: runs by status per grid, then the running runs (step / total, latest loss and
    tokens/s, ETA, heartbeat age) and the runs in Slurm (when any)."""
    from rich.table import Table

    from ablate.execute.display import duration

    table = Table(title="runs by status")
    for col in ("grid", *statuses, "total"):
        table.add_column(col, justify="left" if col == "grid" else "right")
    for row in summary["grids"]:
        table.add_row(row["grid"] or "(no grid)", *(str(row.get(s, 0)) for s in (*statuses, "total")))
    out = [table]
    if summary["running"]:
        table = Table(title="running")
        for col in ("run_id", "variant", "seed", "host", "device", "step", "loss", "tok/s", "ETA",
                    "heartbeat age"):
            table.add_column(col, justify="right" if col in ("step", "loss", "tok/s", "ETA") else "left")
        for r in summary["running"]:
            age = "-" if r["age_s"] is None else f"{r['age_s']:.0f}s"
            age += (" ENDED" if r.get("ended") else " FAILED" if r.get("failed") else " GONE" if r.get("gone")
                    else " STALE" if r["stale"] else "")
            step = "-" if r["step"] is None else f"{r['step'] + 1}/{r.get('total_steps') or '?'}"
            loss, tps, eta = r.get("train_loss"), r.get("tokens_per_s"), r.get("eta_s")
            table.add_row(r["run_id"], r["variant"], str(r["seed"]), r["host"] or "-", r["device"] or "-",
                          step, "-" if loss is None else f"{loss:.4f}", "-" if tps is None else f"{tps:,.0f}",
                          "-" if eta is None or r["stale"] or r.get("ended") else duration(eta), age)
        out.append(table)
    if summary.get("jobs"):
        table = Table(title="in executors' jobs")
        for col in ("run_id", "grid", "variant", "seed", "status", "executor", "job", "state"):
            table.add_column(col)
        for r in summary["jobs"]:
            table.add_row(r["run_id"], r["grid"] or "-", r["variant"], str(r["seed"]), r["status"],
                          r["executor"], r["job"], r["state"] or "-")
        out.append(table)
    return out
