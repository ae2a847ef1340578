"""One run and two runs: ``ablate show RUN_ID`` and ``ablate diff RUN_A RUN_B`` (``ablate.store.inspect``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from ablate.cli.common import HomeOpt, StoreOpt, app, echo_json, handles_errors, open_store

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.table import Table

RunArg = Annotated[str, typer.Argument(help="a run id, or its first characters", show_default=False)]
FormatOpt = Annotated[Literal["table", "json"], typer.Option("--format", help="table or json")]
PLOT_WIDTH, PLOT_HEIGHT = 64, 12


@app.command("show")
@handles_errors
def show_cmd(run: RunArg, fmt: FormatOpt = "table", home: HomeOpt = None, store: StoreOpt = None) -> None:
    """One run: its config (the fields that differ from the defaults), results, events (spikes, resumes,
    divergence) and loss curve drawn in the terminal; while it trains, its step, ETA and live curve."""
    from ablate.store.inspect import show

    with open_store(home, store) as opened:
        view = show(opened, run)
    if fmt == "json":
        echo_json(view)
        return
    from ablate.cli.common import print_wide

    for part in _show_parts(view):
        print_wide(part)


@app.command("diff")
@handles_errors
def diff_cmd(run_a: RunArg, run_b: RunArg, fmt: FormatOpt = "table", home: HomeOpt = None,
             store: StoreOpt = None) -> None:
    """Two runs side by side: the config fields whose values differ, then their results (and b - a)."""
    from ablate.store.inspect import diff

    with open_store(home, store) as opened:
        d = diff(opened, run_a, run_b)
    if fmt == "json":
        echo_json(d)
        return
    from ablate.cli.common import print_wide

    for part in _diff_parts(d):
        print_wide(part)


# ---------------------------------------------------------------- rendering (pure: data in, renderables out)
def _text(value: object) -> str:
    from ablate.store.render import text

    return text(value)


def _pairs(title: str, rows: Mapping[str, object]) -> Table:
    from rich.table import Table

    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column("field", style="bold", no_wrap=True)
    table.add_column("value", overflow="fold")  # a long value (data.train's list) wraps whole, never cut
    for key, value in rows.items():
        table.add_row(key, _text(value))
    return table


def _show_parts(view: dict[str, Any]) -> list[RenderableType]:
    from rich.table import Table

    head = {k: view[k] for k in ("status", "grid", "variant", "seed", "host", "device", "started", "finished",
                                 "resumed_from", "mlflow_run_id", "executor", "job_id",
                                 "error") if view.get(k) is not None}
    if "progress" in view:
        p = view["progress"]
        eta = f", ETA {p['eta_s'] / 60:.1f} min" if p["eta_s"] is not None else ""
        head["progress"] = f"step {p['step']} / {p['total']}{eta}"
    parts: list[RenderableType] = [_pairs(f"run {view['run_id']}", head)]
    parts.append(_pairs("config (fields that differ from the defaults)",
                        view["config"] or {"(all defaults)": ""}))
    if view["results"]:
        parts.append(_pairs("results", view["results"]))
    if view["events"]:
        table = Table(title="events", title_justify="left")
        for col in ("step", "kind", "data"):
            table.add_column(col)
        for e in view["events"]:
            data = ", ".join(f"{k} {_text(v)}" for k, v in (e["data"] or {}).items())
            table.add_row(str(e["step"]), e["kind"], data)
        parts.append(table)
    if view.get("provenance"):
        parts.append(_pairs("provenance", view["provenance"]))
    points = view["curve"]["points"]
    if len(points) >= 2:
        parts.append(loss_plot(points))
    return parts


def loss_plot(points: list[tuple[int, float]]) -> str:
    """The loss curve as unicode block characters (uniplot), for a terminal or a log. The x axis reaches a
    little past the last step, so that its last label (300 of 0..299) is drawn; the title names the last
    step."""
    from uniplot import plot_to_string

    steps, losses = [s for s, _ in points], [v for _, v in points]
    first, last = min(steps), max(steps)
    return plot_to_string(losses, steps, title=f"loss by step (steps {first}-{last})", width=PLOT_WIDTH,
                          height=PLOT_HEIGHT, lines=True, color=False, x_min=first,
                          x_max=last + max(1, (last - first) // 16))


def _who(d: dict[str, Any], side: str) -> str:
    """``a: 1021ca96a5b6`` over ``sdpa-elementwise, seed 1``: which run a column of ``ablate diff`` is."""
    variant, seed = d.get("variants", {}).get(side), d.get("seeds", {}).get(side)
    return f"{side}: {d[side]}\n{variant or '?'}, seed {'?' if seed is None else seed}"


def _diff_parts(d: dict[str, Any]) -> list[Table]:
    from rich.table import Table

    parts = []
    sections = [("", d["lifecycle"], "field"), ("config fields that differ", d["config"], "field")]
    if d.get("provenance"):
        sections.append(("provenance that differs", d["provenance"], "field"))
    a, b = (_who(d, side) for side in ("a", "b"))  # a column's head: the run, its variant and seed
    for title, rows, key in sections:
        table = Table(title=title or f"{d['a']} vs {d['b']}", title_justify="left")
        table.add_column(key, overflow="fold")
        for col in (a, b):
            table.add_column(col, overflow="fold")
        for r in rows:
            table.add_row(r[key], _text(r["a"]), _text(r["b"]))
        if not rows and title:
            table.add_row("(none: the same config)", "", "")
        parts.append(table)
    table = Table(title="results", title_justify="left")
    for col, justify in (("metric", "left"), (a, "right"), (b, "right"), ("b - a", "right")):
        table.add_column(col, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for r in d["results"]:
        table.add_row(r["metric"], _text(r["a"]), _text(r["b"]),
                      "" if r["b_minus_a"] is None else f"{r['b_minus_a']:+.4g}")
    parts.append(table)
    return parts
