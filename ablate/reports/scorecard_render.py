"""The scorecard written out: markdown, HTML, CSV, JSON, and the terminal's ``Table``; the note under it and
the lines of the claims more seeds could settle.
"""

from __future__ import annotations

import csv
import html
import io
import json

from ablate.reports.cells import Cell, Column, Row, Table
from ablate.reports.render import wrappable
from ablate.reports.scorecard import CONTRADICTED, HOLDS, UNCLEAR, Verdict
from ablate.stats import ALPHA, DEFAULT, Stats, method_note
from ablate.stats.power import needs_text


def scorecard_note(verdicts: list[Verdict], stats: Stats = DEFAULT) -> str:
    """The line under the scorecard: method, n, and the families the claims' p were corrected in."""
    note = method_note([v.delta for v in verdicts], stats, what="CIs").replace("(bold)", "(holds)")
    families = sorted({v.family for v in verdicts if v.family and v.delta.decision is None})
    if not families:
        return note
    head = note.split("; significant")[0]
    return (f"{head}; a claim holds when significant after its family's correction at alpha={ALPHA:g}: "
            + "; ".join(families))


def unresolved_lines(verdicts: list[Verdict]) -> list[str]:
    """One line per claim without enough evidence that more seeds could resolve."""
    return [f"{v.claim.text}: {v.effect} {v.ci}, {needs_text(v.needs, v.delta)} ({v.family})"
            for v in verdicts if v.verdict == UNCLEAR and v.delta.n >= 2]


def _css(verdict: str) -> str:
    return {HOLDS: "holds", CONTRADICTED: "contradicted"}.get(verdict, "unclear")


def scorecard_html(verdicts: list[Verdict], stats: Stats = DEFAULT) -> str:
    """The scorecard as an HTML table (``id="scorecard"``)."""
    e = html.escape
    out = ['<table class="ablate" id="scorecard"><caption>The paper\'s claims, as measured in this grid '
           '(paired by config and seed; 95% paired t CI)</caption>',
           "<thead><tr><th class=\"method\">Claim</th><th>Effect</th><th>95% "
           "CI</th><th>n</th><th>Verdict</th>"
           '<th class="method">Detail</th><th class="method">Pairing</th><th class="method">Paper</th>'
           "</tr></thead><tbody>"]
    for v in verdicts:
        out.append(f'<tr><td class="method">{e(v.claim.text)}</td><td>{wrappable(v.effect)}</td>'
                   f'<td>{wrappable(v.ci)}</td><td>{v.delta.n}</td>'
                   f'<td class="{_css(v.verdict)}">{e(v.verdict)}</td><td class="method">{e(v.detail)}</td>'
                   f'<td class="method">{e(v.pairing)}</td><td class="method">{e(v.claim.paper)}</td></tr>')
    if not verdicts:
        out.append(
            '<tr><td class="method" colspan="8">the grid runs no pair of arms that a claim compares</td></tr>'
        )
    out.append("</tbody></table>")
    out += [f'<p class="note">{e(line)}</p>' for line in _footer(verdicts, stats)]
    return "\n".join(out) + "\n"


def _footer(verdicts: list[Verdict], stats: Stats) -> list[str]:
    return [scorecard_note(verdicts, stats), *unresolved_lines(verdicts)] if verdicts else []


def scorecard_markdown(verdicts: list[Verdict], stats: Stats = DEFAULT) -> str:
    """The scorecard as a markdown table."""
    lines = ["| Claim | Effect | 95% CI | n | Verdict | Detail | Pairing | Paper |",
             "| --- | ---: | ---: | ---: | --- | --- | --- | --- |"]
    for v in verdicts:
        lines.append(f"| {v.claim.text} | {v.effect} | {v.ci} | {v.delta.n} | {v.verdict} | {v.detail} | "
                     f"{v.pairing} | {v.claim.paper} |")
    footer = _footer(verdicts, stats)
    lines += [""] + [f"*{line}*" for line in footer] if footer else []
    return "\n".join(lines) + "\n"


# on a narrow terminal, the columns that leave first; the detail says what the unresolved lines would repeat
TERMINAL_LEAVES = ("pairing", "paper", "detail")


def scorecard_table(verdicts: list[Verdict], stats: Stats = DEFAULT) -> Table:
    """The scorecard as a report ``Table`` (a row per claim; bold: a claim that holds), for the terminal's
    renderer."""
    cols = [Column("effect", "Effect", "measured"), Column("ci", "95% CI", "measured"),
            Column("n", "n", "measured"), Column("verdict", "Verdict", "descriptor"),
            Column("detail", "Detail", "descriptor"), Column("pairing", "Pairing", "descriptor"),
            Column("paper", "Paper", "descriptor")]
    rows = [Row(v.claim.text, None, None, [], {
        "effect": Cell(v.effect, v.delta.mean), "ci": Cell(v.ci), "n": Cell(str(v.delta.n), v.delta.n),
        "verdict": Cell(v.verdict), "detail": Cell(v.detail), "pairing": Cell(v.pairing),
        "paper": Cell(v.claim.paper)}) for v in verdicts]
    notes = [scorecard_note(verdicts, stats)] if verdicts else ["the grid runs no pair of arms that a claim "
                                                                "compares"]
    return Table(None, "The paper's claims, as measured in this grid (paired by config and seed; 95% paired "
                 "t CI)", "", cols, rows, notes, unresolved_lines(verdicts), slug="scorecard",
                 row_header="Claim")


def scorecard_csv(verdicts: list[Verdict], stats: Stats = DEFAULT) -> str:
    """The scorecard as CSV: the JSON rows' fields, the CI as ``ci_lo``/``ci_hi``."""
    buf = io.StringIO()
    fields = ["key", "claim", "effect", "ci_lo", "ci_hi", "scale", "n", "verdict", "detail", "kind", "metric",
              "paper", "p", "p_adj", "p_perm", "method", "needs_seeds", "family", "correlation",
              "worth_unpaired_seeds", "resolved_at_look"]
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for v in verdicts:
        row = v.as_dict()
        ci = row.pop("ci") or (None, None)
        writer.writerow({**row, "ci_lo": ci[0], "ci_hi": ci[1]})
    return buf.getvalue()


def scorecard_json(verdicts: list[Verdict], stats: Stats = DEFAULT) -> str:
    """The scorecard as a JSON list of ``Verdict.as_dict()`` rows."""
    return json.dumps([v.as_dict() for v in verdicts], indent=2) + "\n"


SCORECARD_FORMATS = {"markdown": scorecard_markdown, "json": scorecard_json, "csv": scorecard_csv,
                     "html": scorecard_html}
