"""The ladder report (``ablate.reports.ladder.analyse``'s data) as markdown, CSV or JSON, and its figure; and
``report_ladder``, what ``ablate report ladder`` does with a store (query, analyse, write).

No number from an unreliable fit is printed: its predictions read "unreliable" with the reasons, and a
predicted difference whose interval holds zero reads "unresolved" with the interval only.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from matplotlib.ticker import LogLocator, ScalarFormatter

from ablate.errors import UserInputError, one_of
from ablate.layout import atomic_path, atomic_write
from ablate.reports.cells import TERMINAL
from ablate.reports.data import current_runs, resolve_grid
from ablate.reports.figure_kit import pyplot
from ablate.reports.ladder import MAX_EXTRAPOLATION, MIN_SEEDS, analyse, parse_targets
from ablate.reports.registry import Output, Request

if TYPE_CHECKING:
    from ablate.store.api import Store

FORMATS = ("markdown", "json", "csv")
SUFFIX = {"markdown": ".md", "json": ".json", "csv": ".csv"}
FIGURE = "ladder.png"


def public(report: dict[str, Any]) -> dict[str, Any]:
    """The report without its in-memory fits (keys starting with ``_``): what ``--format json`` prints."""
    return {**report, "variants": {k: {f: v for f, v in s.items() if not f.startswith("_")}
                                   for k, s in report["variants"].items()}}


def _num(x: float | None, digits: int = 4) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _sci(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def _iv(d: dict[str, Any], fmt: Callable[[float | None], str] = _sci) -> str:
    if d.get("value") is None:
        return "-"
    if d.get("low") is None:
        return fmt(d["value"])
    return f"{fmt(d['value'])} [{fmt(d['low'])}, {fmt(d['high'])}]"


def _signed(x: float) -> str:
    return f"{x:+.4f}"


def _prediction(p: dict[str, Any]) -> str:
    if p["refused"]:
        return f"none: {p['refused']}"
    text = _iv({"value": p["loss"], "low": p["low"], "high": p["high"]}, _num)
    return text if p["resolved"] else f"{text} (unresolved: interval wider than the gain over the ladder)"


def _delta(d: dict[str, Any] | None) -> str:
    if d is None:
        return ""
    if d.get("refused"):
        return f"none: {d['refused']}"
    if d["low"] is None:
        return "- (no interval)"
    if not d["resolved"]:
        return f"unresolved [{_signed(d['low'])}, {_signed(d['high'])}]"
    return f"{_signed(d['value'])} [{_signed(d['low'])}, {_signed(d['high'])}]"


def _mean_delta(s: dict[str, Any]) -> float:
    deltas = [r["delta"]["value"] for r in s["rungs"] if r.get("delta") and r["delta"]["value"] is not None]
    return sum(deltas) / len(deltas) if deltas else 0.0


def to_markdown(report: dict[str, Any]) -> str:
    """Fits, measured rungs, predictions at the targets, crossovers and notes, as markdown."""
    series = report["variants"]
    lo, hi = report["measured_flops"]
    far = max((t["flops"] for t in report["targets"]), default=hi)
    lines = [f"**Scaling ladder, grid '{report['grid']}'**: L(C) = E + A·C^(-alpha), loss = "
             f"{report['metric']}; C = training FLOPs (6N + 12·L·H·Q·T per token). Measured from {lo:.2e} to "
             f"{hi:.2e} FLOPs; the farthest target is {far / hi:.1e} times the largest rung.", "",
             "| variant | runs | rungs | seeds | E | A | alpha | fit |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    for name, s in series.items():
        f = s["fit"]
        values = [_iv(f[k]) for k in ("E", "A", "alpha")] if f["reliable"] else ["-", "-", "-"]
        verdict = "ok" if f["reliable"] else "unreliable: " + "; ".join(f["problems"])
        lines.append(f"| {name} | {s['n_runs']} | {len(s['rungs'])} | {len(s['seeds'])} | "
                     f"{' | '.join(values)} | {verdict} |")
    lines += ["", f"Measured final loss per rung (mean ± std over seeds), and the difference to "
                  f"{report['baseline']} (paired over seeds, 95% bootstrap CI):", ""]
    rungs = list(dict.fromkeys(r["rung"] for s in series.values() for r in s["rungs"]))
    head = ["rung", "FLOPs"]
    for name, s in series.items():
        head += [name] + (["Δ"] if any("delta" in r for r in s["rungs"]) else [])
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for rung in rungs:
        cells = [rung, ""]
        for s in series.values():
            r = next((x for x in s["rungs"] if x["rung"] == rung), None)
            cells[1] = cells[1] or (f"{r['flops']:.2e}" if r else "")
            has_delta = any("delta" in x for x in s["rungs"])
            if r is None:
                cells += ["-"] + (["-"] if has_delta else [])
                continue
            std = f" ± {r['loss_std']:.4f}" if r["loss_std"] is not None else ""
            cells.append(f"{r['loss_mean']:.4f}{std}")
            if has_delta:
                d = r.get("delta") or {}
                cells.append(
                    "-"
                    if d.get("value") is None
                    else (
                        _signed(d["value"])
                        + (f" [{_signed(d['low'])}, {_signed(d['high'])}]" if d["low"] is not None else "")
                    )
                )
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for name, s in series.items():
        t = s.get("delta_trend")
        if t is None or t["per_decade"]["value"] is None:
            continue
        d = t["per_decade"]
        if d["low"] is None:
            verdict = "no interval"
        elif len(s["seeds"]) < MIN_SEEDS:
            verdict = f"unresolved: {len(s['seeds'])} seeds are too few"
        elif not t["resolved"]:
            verdict = "no resolved trend: the interval holds zero"
        else:
            shrinks = (d["value"] > 0) == (_mean_delta(s) < 0)
            verdict = "the difference shrinks with scale" if shrinks else "the difference grows with scale"
        lines.append(f"- {name} − {report['baseline']}, measured: {_signed(d['value'])} per decade of compute"
                     + (f" [{_signed(d['low'])}, {_signed(d['high'])}]" if d["low"] is not None else "")
                     + f" ({verdict}).")
    lines += ["", "Predicted loss at each target (95% interval over seed resamples) and the difference to "
                  f"{report['baseline']} at equal compute:", ""]
    head = ["target", "FLOPs"]
    for name, s in series.items():
        head += [name] + (["Δ"] if s["predictions"] and s["predictions"][0]["delta"] is not None else [])
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for i, t in enumerate(report["targets"]):
        cells = [t["name"], f"{t['flops']:.2e}"]
        for s in series.values():
            p = s["predictions"][i]
            cells.append(_prediction(p))
            if p["delta"] is not None:
                cells.append(_delta(p["delta"]))
        lines.append("| " + " | ".join(cells) + " |")
    crossings = [(n, s["crossover"]) for n, s in series.items() if s["variant"] != report["baseline"]]
    if crossings:
        lines.append("")
        for name, c in crossings:
            if c is None:
                lines.append(f"- {name} vs {report['baseline']}: no crossover (or no reliable pair of fits).")
            else:
                where = "extrapolated" if c["extrapolated"] else "within the measured range"
                lines.append(f"- {name} vs {report['baseline']}: the fitted curves cross at {c['flops']:.2e} "
                             f"FLOPs ({where}).")
    if report["notes"]:
        lines += [""] + [f"*{n}*" for n in report["notes"]]
    return "\n".join(lines) + "\n"


def to_csv(report: dict[str, Any]) -> str:
    """One row per (series, target): prediction, difference to the baseline, the fit; unreliable ones
    empty."""
    buf = io.StringIO()
    w = csv.writer(buf)
    params = [f"{k}{s}" for k in ("E", "A", "alpha") for s in ("", "_low", "_high")]
    w.writerow(["series", "variant", "target", "flops", "loss", "low", "high", "delta", "delta_low",
                "delta_high", "delta_resolved", *params, "reliable", "problems"])
    for name, s in report["variants"].items():
        f, ok = s["fit"], s["fit"]["reliable"]
        fit = [f[k][s2] if ok else None for k in ("E", "A", "alpha") for s2 in ("value", "low", "high")]
        for p in s["predictions"]:
            d = p["delta"] or {}
            show = d.get("resolved")
            w.writerow([name, s["variant"], p["target"], p["flops"], p["loss"], p["low"], p["high"],
                        d.get("value") if show else None, d.get("low"), d.get("high"), d.get("resolved"),
                        *fit, ok, "; ".join(f["problems"])])
    return buf.getvalue()


def render_ladder(report: dict[str, Any], fmt: str) -> str:
    """``report`` as ``markdown``, ``json`` or ``csv`` text."""
    if fmt == "json":
        return json.dumps(public(report), indent=1, default=float) + "\n"
    if fmt == "csv":
        return to_csv(report)
    return to_markdown(report)


def ladder_figure(report: dict[str, Any], path: str | Path) -> Path:
    """Loss against compute on log axes: each rung's mean ± std over seeds, the fitted curves, the
    extrapolation band (95% over seed resamples) out to the targets, and the targets marked. An unreliable fit
    is drawn dotted over the measured range only."""
    plt = pyplot()
    lo, hi = report["measured_flops"]
    far = min(max([hi, *(t["flops"] for t in report["targets"])]), hi * MAX_EXTRAPOLATION)
    fig, ax = plt.subplots(figsize=(9.0, 4.6), dpi=100)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    ys: list[float] = []
    for i, (name, s) in enumerate(report["variants"].items()):
        color = colors[i % len(colors)]
        c = np.array([r["flops"] for r in s["rungs"]])
        m = np.array([r["loss_mean"] for r in s["rungs"]])
        e = np.array([r["loss_std"] or 0.0 for r in s["rungs"]])
        ax.errorbar(c, m, yerr=e, fmt="o", color=color, ms=4, capsize=2, label=f"{name} (measured)")
        ys += list(m - e) + list(m + e)
        law, ok = s["_law"], s["fit"]["reliable"]
        if law is None:
            continue
        xs = np.logspace(math.log10(lo / 2), math.log10((far if ok else hi) * 2), 200)
        if ok:
            curves = np.array([f(xs) for f in s["_fits"] if f is not None])
            if len(curves):
                band_lo, band_hi = np.quantile(curves, [0.025, 0.975], axis=0)
                ax.fill_between(xs, band_lo, band_hi, color=color, alpha=0.15, lw=0)
            ax.plot(xs, law(xs), color=color, lw=1.2, label=f"{name}: alpha={law.alpha:.3f}")
            ys += list(law(xs))
        else:
            ax.plot(xs, law(xs), ":", color=color, lw=1.2, label=f"{name}: fit unreliable")
    if far > hi:
        ax.axvspan(hi, far, color="0.5", alpha=0.06, lw=0)  # where the fit extrapolates
    placed: list[float] = []
    for t in sorted(report["targets"], key=lambda t: t["flops"]):
        ax.axvline(t["flops"], color="0.4", ls="--", lw=0.8)
        near = sum(abs(math.log10(t["flops"] / x)) < 0.6 for x in placed)  # stagger labels of close targets
        placed.append(t["flops"])
        ax.text(t["flops"], 0.98 - 0.4 * near, t["name"] + " ", rotation=90, va="top", ha="right", fontsize=7,
                color="0.3", transform=ax.get_xaxis_transform())
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 1.5, 2.0, 3.0, 5.0, 7.0)))
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.yaxis.set_minor_formatter(ScalarFormatter())
    finite = [y for y in ys if math.isfinite(y) and y > 0]
    if finite:
        ax.set_ylim(min(finite) * 0.95, max(finite) * 1.05)
    ax.set_xlabel("training compute C (FLOPs)")
    ax.set_ylabel("final held-out loss (nats/token)")
    ax.set_title(f"Scaling ladder '{report['grid']}': L(C) = E + A·C^(-alpha)", fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    ax.grid(True, which="both", lw=0.3, alpha=0.5)
    fig.tight_layout()
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")
    plt.close(fig)
    return path


def report_ladder(store: Store, *, grid: str | None = None, target: str = "paper", fmt: str = "markdown",
                  out: str | Path | None = None, baseline: str = "baseline",
                  warn: Callable[[str], None] | None = None) -> tuple[str, list[Path]]:
    """``ablate report ladder``: the report as text in ``fmt``; with ``out`` (a directory) also written there
    as ``ladder.<md|json|csv>`` with its figure ``ladder.png``. Returns the text and the files written.
    ``warn`` gets the line saying how many runs of older configurations of the grid were left out."""
    if fmt not in FORMATS:  # before any query
        raise UserInputError(one_of(fmt, FORMATS, what="format for the ladder report") + " (option --format)")
    targets = parse_targets(target)
    name = resolve_grid(list(store.grids()), grid)
    report = analyse(current_runs(store, name, warn=warn), targets, baseline=baseline, grid=name)
    text = render_ladder(report, fmt)
    written: list[Path] = []
    if out is not None:
        out = Path(out)
        written.append(atomic_write(out / f"ladder{SUFFIX[fmt]}", text))
        written.append(ladder_figure(report, out / FIGURE))
    return text, written


def ladder_report(store: Store, r: Request, name: str) -> Output:
    """``ablate report ladder`` (the registry's maker): the text, or a line on the files ``--out`` got."""
    fmt = "markdown" if r.fmt == TERMINAL else r.fmt  # the ladder has no terminal table of its own yet
    text, written = report_ladder(store, grid=r.grid, target=r.target, fmt=fmt, out=r.out, warn=r.warn)
    if r.out is None:
        return Output(text)
    return Output(note=f"wrote {', '.join(str(p) for p in written)}", note_err=True)
