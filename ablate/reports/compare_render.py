"""``ablate report compare`` written out: markdown, LaTeX and HTML through the tables' renderer
(``render.py``: one meaning of bold everywhere), CSV and JSON as one flat row per comparison.

A row reads: each arm's mean ± std, the paired Δ (× for a ratio metric) with its 95% interval, p and the p
corrected over its family (named), n pairs, the verdict or the seeds an unresolved comparison needs, and what
pairing by seed did (the arms' correlation; the unpaired seeds it was worth, or that it cost).
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from ablate.errors import UserInputError, one_of
from ablate.reports.cells import Cell, Column, Row, Table, delta_cell, summary_cell
from ablate.reports.compare import CompareReport
from ablate.reports.family import Comparison
from ablate.reports.render import html_document, to_html, to_latex, to_markdown
from ablate.reports.spec import LABELS, digits
from ablate.reports.tables import SPREAD_NOTE
from ablate.reports.terminal import TERMINAL, to_terminal
from ablate.stats import method_note
from ablate.stats.power import NEEDS_MEANING

FORMATS = ("markdown", "latex", "csv", "json", "html")
SUFFIX = {"markdown": ".md", "latex": ".tex", "csv": ".csv", "json": ".json", "html": ".html"}
PAIRING_NOTE = ("pairing: r is the two arms' correlation across the paired seeds (from 3 pairs); the "
                "n pairs are as precise as the unpaired seeds per arm it names. A negative r makes the "
                "paired Δ noisier than independent seeds would: the pairing costs, and the paired t is kept "
                "all the same (it holds its coverage at any correlation; an unpaired test of runs paired by "
                "seed does not)")


def _p(x: float | None) -> str:
    """A p-value as a reader needs it: two digits, ``< 0.001`` below that (CSV and JSON keep the number)."""
    if x is None:
        return ""
    return "< 0.001" if x < 0.001 else f"{x:.2g}"


def _p_adj(c: Comparison) -> str:
    """The corrected p; its family is named once, under the table."""
    d = c.delta
    if d.p_adj is None:
        return ""
    if d.decision is not None:
        return f"{_p(d.p_adj)} (look {d.decision.last_look} of {len(d.decision.plan)}, level {d.level:.2g})"
    return _p(d.p_adj)


def _group(c: Comparison) -> str:
    better = f", {c.better} is better" if c.better else ""
    label = LABELS.get(c.metric)
    name = f"{c.metric} ({label}{better})" if label else f"{c.metric}{f' ({better[2:]})' if better else ''}"
    ratio = ", compared as a ratio" if c.scale == "ratio" else ""
    return f"{name}{ratio}" + (f" at {c.cell}" if c.cell else "")


def to_table(report: CompareReport) -> Table:
    """The comparisons as a report ``Table``: a group per metric (and cell), a row per arm."""
    cols = [Column("arm", "arm: mean ± std", "measured"),
            Column("reference", f"{report.reference}: mean ± std", "measured"),
            Column("delta", "Δ [95% CI] (× ratio)", "delta"), Column("p", "p", "measured"),
            Column("p_adj", "p corrected", "measured"), Column("n", "n pairs", "measured"),
            Column("verdict", "verdict / seeds needed", "descriptor"),
            Column("pairing", "pairing across seeds", "descriptor")]
    ns = [c.arm_runs.n for c in report.comparisons] + [c.reference_runs.n for c in report.comparisons]
    usual = max(set(ns), key=lambda k: (ns.count(k), k)) if ns else 0
    rows = []
    for c in report.comparisons:
        k = digits(c.metric)
        d = c.delta
        rows.append(Row(c.arm, _group(c), None, [], {
            "arm": summary_cell(c.arm_runs, k, usual), "reference": summary_cell(c.reference_runs, k, usual),
            "delta": delta_cell(d, k, d.n), "p": Cell(_p(d.p), d.p), "p_adj": Cell(_p_adj(c), d.p_adj),
            "n": Cell(str(d.n) if d.n else "", d.n), "verdict": Cell(c.verdict),
            "pairing": Cell(c.pairing_text)}))
    notes = [SPREAD_NOTE] if report.comparisons else []
    for name in report.metrics:
        deltas = [c.delta for c in report.comparisons if c.metric == name]
        if any(x.mean is not None for x in deltas):
            ratio = any(c.scale == "ratio" for c in report.comparisons if c.metric == name)
            what = (f"× {name} (the geometric mean of the paired ratios; t interval of their mean log)"
                    if ratio else f"Δ {name}")
            family = next((c.family for c in report.comparisons
                           if c.metric == name and c.delta.decision is None and c.m), None)
            notes.append(method_note(deltas, report.stats, what=what, family=family))
    if any(c.delta.pairing is not None and c.delta.pairing.r is not None for c in report.comparisons):
        notes.append(PAIRING_NOTE)
    notes += report.notes
    if any(c.needs is not None and not c.delta.resolved for c in report.comparisons):
        notes.append(NEEDS_MEANING)
    unresolved = [f"{_name(c)}: {delta_cell(c.delta, digits(c.metric), c.delta.n).text}, "
                  f"{c.verdict}" for c in report.comparisons
                  if c.delta.mean is not None and not c.delta.resolved and c.delta.n >= 2
                  and not c.delta.identical]
    return Table(None, f"Every arm against {report.reference}", report.grid, cols, rows, notes, unresolved,
                 slug="compare", row_header="Arm")


def _name(c: Comparison) -> str:
    return f"{c.arm} vs {c.reference} ({c.metric}{f', {c.cell}' if c.cell else ''})"


def as_rows(report: CompareReport) -> list[dict[str, Any]]:
    """One plain row per comparison (JSON's ``comparisons``; CSV's lines, the cell flattened)."""
    return [c.as_row() for c in report.comparisons]


def to_json(report: CompareReport) -> str:
    """``{"grid", "reference", "interval", "correction", "metrics", "notes", "comparisons": [...]}``."""
    table = to_table(report)
    return json.dumps({"grid": report.grid, "reference": report.reference, "interval": report.stats.interval,
                       "correction": report.stats.correction, "metrics": report.metrics,
                       "notes": table.notes, "unresolved": table.unresolved,
                       "comparisons": as_rows(report)}, indent=2, default=str) + "\n"


def to_csv(report: CompareReport) -> str:
    """One line per comparison; the cell's fields as ``cell:<field>`` columns, numbers unformatted."""
    rows = as_rows(report)
    fields = sorted({f for r in rows for f in r["cell"]})
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["grid", *(f"cell:{f}" for f in fields), *ROW_FIELDS])
    for r in rows:
        w.writerow([report.grid, *(r["cell"].get(f, "") for f in fields),
                    *("" if r[k] is None else r[k] for k in ROW_FIELDS)])
    return buf.getvalue()


# a comparison's fields after its cell, in CSV's order (``as_rows``)
ROW_FIELDS = ("arm", "reference", "metric", "scale", "arm_mean", "arm_std", "arm_n", "arm_diverged",
              "reference_mean", "reference_std", "reference_n", "reference_diverged", "delta", "lo", "hi",
              "n", "p", "p_perm", "p_adj", "significant", "family", "family_size", "verdict", "needs_seeds",
              "identical", "correlation", "worth_unpaired_seeds", "resolved_at_look", "looks")


# on a narrow terminal, the columns that leave first: the pairing's reading, the reference's mean (the same
# on every row of a cell), the uncorrected p, then the verdict (then its unresolved lines say the seeds
# needed)
TERMINAL_LEAVES = ("pairing", "reference", "p", "verdict")


def render_compare(report: CompareReport, fmt: str = "markdown", *, width: int = 100) -> str:
    """The report in ``fmt``: markdown, latex, csv, json, html (a standalone page), or ``terminal`` (a table
    ``width`` columns wide, whose verdict column says what the unresolved lines would repeat)."""
    if fmt == TERMINAL:
        return to_terminal(to_table(report), width, leave_out=TERMINAL_LEAVES, said_by="verdict",
                           column_notes={"pairing": PAIRING_NOTE})
    if fmt not in FORMATS:
        raise UserInputError(one_of(fmt, FORMATS, what="format") + " (option --format)")
    if fmt == "json":
        return to_json(report)
    if fmt == "csv":
        return to_csv(report)
    table = to_table(report)
    if fmt == "markdown":
        return to_markdown(table)
    if fmt == "latex":
        return to_latex(table)
    return html_document(f"ablate compare: {report.grid}", to_html(table))
