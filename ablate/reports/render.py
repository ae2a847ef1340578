"""A Table as markdown, LaTeX (booktabs), CSV (unformatted numbers) or HTML.

Bold means one thing in every format: a delta that is significant after the table's family correction (or
at the ``--until-resolved`` look that decided it). No other number is ever bold, the best of a column
included: on a grid where nothing is significant, nothing is bold. The notes under the table say which
method, n and correction, then one line per unresolved delta with the seeds it needs and the family it was
worked out for.

HTML tables wrap rather than run off the page: text cells wrap at spaces, and a number cell breaks only
between its parts (the mean, its interval, its notes), never inside a number.

Renderers only read the Table; every number was formatted (or kept raw, for CSV) by the builder.
"""

from __future__ import annotations

import csv
import html
import io
import json
import math
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import asdict

from ablate.errors import UserInputError, one_of
from ablate.reports.cells import TERMINAL, Row, Table, bold, caption
from ablate.reports.terminal import to_terminal

FORMATS = ("markdown", "latex", "csv", "json", "html")
SUFFIX = {"markdown": ".md", "latex": ".tex", "csv": ".csv", "json": ".json", "html": ".html"}



def render(table: Table, fmt: str = "markdown", *, width: int = 100) -> str:
    """``table`` in format ``fmt`` (markdown, latex, csv, json, html; html is a standalone page), or
    ``terminal``: a rich table ``width`` columns wide (``reports.terminal``)."""
    if fmt == TERMINAL:
        return to_terminal(table, width)
    if fmt not in FORMATS:
        raise UserInputError(one_of(fmt, FORMATS, what="format") + " (option --format)")
    if fmt == "markdown":
        return to_markdown(table)
    if fmt == "json":
        return to_json(table)
    if fmt == "latex":
        return to_latex(table)
    if fmt == "csv":
        return to_csv(table)
    return html_document(f"ablate {table.name}: {table.title}", to_html(table))


def _segments(table: Table) -> Iterator[str | Row]:
    """Rows in order, with a group header (the group's name, a ``str``) wherever the group changes."""
    current: object = object()
    for row in table.rows:
        if row.group is not None and row.group != current:
            yield row.group
        current = row.group
        yield row


# ---------------------------------------------------------------- markdown
def _md(text: str) -> str:
    return text.replace("|", "\\|")


def to_markdown(table: Table) -> str:
    """A pipe table: group headers as bold rows, notes under it."""
    cols = table.columns
    lines = [f"**{_md(caption(table))}**", "",
             "| " + " | ".join([table.row_header, *(_md(c.label) for c in cols)]) + " |",
             "| " + " | ".join(["---"] + ["---:" if c.kind != "descriptor" else "---" for c in cols]) + " |"]
    for row in _segments(table):
        if isinstance(row, str):  # a group header
            lines.append("| " + " | ".join([f"**{_md(row)}**"] + [""] * len(cols)) + " |")
        else:
            texts = [_md(row.cells[c.key].text) for c in cols]
            texts = [f"**{t}**" if bold(c, row.cells[c.key]) else t for c, t in zip(cols, texts, strict=True)]
            lines.append("| " + " | ".join([_md(row.label), *texts]) + " |")
    lines += [""] + [f"*{_md(n)}*" for n in [*table.notes, *table.unresolved]]
    return "\n".join(lines).rstrip() + "\n"


# ---------------------------------------------------------------- LaTeX
# what pdflatex cannot take as it is: its special characters, and the symbols the reports write, as math (the
# default font encoding, OT1, draws < > | as other glyphs; utf8 input sets up none of ≈ Δ − · ≤ ≥ →)
_TEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
        "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "<": r"$<$", ">": r"$>$",
        "|": r"$|$", "`": "{`}", "±": r"$\pm$", "Δ": r"$\Delta$", "≈": r"$\approx$", "×": r"$\times$",
        "−": "$-$", "·": r"$\cdot$", "≤": r"$\leq$", "≥": r"$\geq$", "→": r"$\rightarrow$", "…": r"\ldots{}",
        "–": "--", "—": "---", "‘": "`", "’": "'", "“": "``", "”": "''", "\u00a0": "~"}
_CODE = re.compile(r"`([^`]+)`")  # `ablate report compare` in a note: typewriter type


# a letter beyond ASCII, as the default font encoding (OT1) draws it: its base letter under accent commands,
# or the letter's own command
_ACCENTS = {"\u0300": "`", "\u0301": "'", "\u0302": "^", "\u0303": "~", "\u0304": "=", "\u0306": "u",
            "\u0307": ".", "\u0308": '"', "\u030a": "r", "\u030b": "H", "\u030c": "v", "\u0327": "c"}
_LETTERS = {"ß": r"\ss{}", "æ": r"\ae{}", "Æ": r"\AE{}", "ø": r"\o{}", "Ø": r"\O{}", "œ": r"\oe{}",
            "Œ": r"\OE{}", "ł": r"\l{}", "Ł": r"\L{}", "ı": r"\i{}"}


def _tex_char(ch: str) -> str:
    if ch in _TEX:
        return _TEX[ch]
    if ch < "\x80":
        return ch
    if ch in _LETTERS:
        return _LETTERS[ch]
    decomposed = unicodedata.normalize("NFKD", ch)  # é -> e + acute, ﬁ -> f i, ² -> 2
    base, marks = decomposed[0], list(decomposed[1:])
    if all(c < "\x80" for c in (base, *marks)):
        return "".join(map(_tex_char, (base, *marks)))
    if base < "\x80" and all(unicodedata.combining(m) for m in marks):  # accents OT1 lacks (ą) are left off
        out = _tex_char(base)
        for mark in (m for m in marks if m in _ACCENTS):
            out = f"\\{_ACCENTS[mark]}{{{out}}}"
        return out
    return "?"


def tex_escape(text: str) -> str:
    """Text safe inside a LaTeX table cell, as pdflatex compiles it with the default fonts: special
    characters escaped, the reports' symbols as math, `code` in typewriter type, an accented letter as its
    accent commands (``é``: ``\\'{e}``) and any character the default fonts lack as ``?``.

    >>> print(tex_escape("needs ≈ 12 seeds; p < 0.001; `ablate report compare`: ×0.52 ± 0.1"))
    needs $\\approx$ 12 seeds; p $<$ 0.001; \\texttt{ablate report compare}: $\\times$0.52 $\\pm$ 0.1
    """
    parts = _CODE.split(str(text))
    out = "".join(f"\\texttt{{{''.join(map(_tex_char, p))}}}" if i % 2 else "".join(map(_tex_char, p))
                  for i, p in enumerate(parts))
    return "{}" + out if out.startswith("[") else out  # never read as the optional argument of a \\ before it


def to_latex(table: Table) -> str:
    """A booktabs ``table`` float (needs ``\\usepackage{booktabs}``), significant deltas in bold."""
    cols = table.columns
    spec = "l" + "".join("l" if c.kind == "descriptor" else "r" for c in cols)
    out = [f"% ablate {table.name}" + (f", grid {table.grid}" if table.grid else ""), r"\begin{table}[t]",
           r"\centering", r"\small", f"\\caption{{{tex_escape(caption(table))}}}",
           f"\\label{{tab:ablate-{table.name}}}", f"\\begin{{tabular}}{{{spec}}}", r"\toprule",
           " & ".join([tex_escape(table.row_header), *(tex_escape(c.label) for c in cols)]) + r" \\",
           r"\midrule"]
    first = True
    for row in _segments(table):
        if isinstance(row, str):  # a group header
            if not first:
                out.append(r"\midrule")
            out.append(f"\\multicolumn{{{len(cols) + 1}}}{{l}}{{\\textit{{{tex_escape(row)}}}}} \\\\")
        else:
            cells = []
            for c in cols:
                cell = row.cells[c.key]
                text = tex_escape(cell.text)
                cells.append(f"\\textbf{{{text}}}" if bold(c, cell) else text)
            out.append(" & ".join([tex_escape(row.label), *cells]) + r" \\")
        first = False
    out += [r"\bottomrule", r"\end{tabular}"]
    if table.notes:
        out.append(r"\par\smallskip{\footnotesize " + tex_escape("; ".join(table.notes)) + "}")
    for line in table.unresolved:
        out.append(r"\par{\footnotesize " + tex_escape(line) + "}")
    out.append(r"\end{table}")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- CSV
def csv_header(table: Table) -> list[str]:
    head = ["group", "method", "paper_row", "runs"]
    for c in table.columns:
        head.append(c.key)
        if c.kind == "measured":
            head += [f"{c.key}:std", f"{c.key}:n", f"{c.key}:diverged"]
        elif c.kind == "delta":
            head += [f"{c.key}:lo", f"{c.key}:hi", f"{c.key}:n", f"{c.key}:p", f"{c.key}:p_adj",
                     f"{c.key}:significant"]
    return head


def _raw(v: object) -> object:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return ""
    return v


def to_csv(table: Table) -> str:
    """One header row, one line per table row; numbers unformatted (means, std, n), empty where unmeasured."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(csv_header(table))
    for row in table.rows:
        line: list[object] = [row.group or "", row.label, row.paper_row or "", len(row.run_ids)]
        for c in table.columns:
            cell = row.cells[c.key]
            line.append(_raw(cell.value))
            if c.kind == "measured":
                line += [_raw(cell.std), cell.n, cell.diverged]
            elif c.kind == "delta":
                line += [_raw(cell.lo), _raw(cell.hi), cell.n, _raw(cell.p), _raw(cell.p_adj),
                         int(cell.significant) if cell.p_adj is not None else ""]
        w.writerow(line)
    return buf.getvalue()


# ---------------------------------------------------------------- JSON
def to_json(table: Table) -> str:
    """``{"table", "title", "grid", "columns", "rows", "notes", "unresolved", "comparisons"}``: each row's
    cells as plain values, and ``comparisons``, one per delta cell with the fields of ``report compare``'s
    JSON (its corrected p, significance, family, family size and seeds needed), plus its row's label."""
    rows = [{"label": r.label, "group": r.group, "paper_row": r.paper_row, "runs": r.run_ids,
             "cells": {c.key: asdict(r.cells[c.key]) for c in table.columns}} for r in table.rows]
    return json.dumps({"table": table.name, "title": table.title, "grid": table.grid,
                       "columns": [{"key": c.key, "label": c.label, "kind": c.kind} for c in table.columns],
                       "rows": rows, "notes": table.notes, "unresolved": table.unresolved,
                       "comparisons": table.comparisons}, indent=2, default=_plain) + "\n"


def _plain(v: object) -> object:
    """What ``json`` cannot write itself: numpy numbers as Python's, anything else as text."""
    item = getattr(v, "item", None)
    return item() if callable(item) else str(v)


# ---------------------------------------------------------------- HTML
STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2rem auto;max-width:1300px;color:#222;
  padding:0 1rem}
table.ablate{border-collapse:collapse;margin:1rem 0;font-size:.9rem;max-width:100%}
table.ablate caption{text-align:left;font-weight:600;padding:.3rem 0}
table.ablate th,table.ablate td{padding:.25rem .6rem;border-bottom:1px solid #ddd;text-align:right;
  vertical-align:top;overflow-wrap:break-word}
table.ablate .nw{white-space:nowrap}
table.ablate td.descriptor,table.ablate th.method,table.ablate td.method{text-align:left}
table.ablate td.method{min-width:9rem}
table.ablate th.descriptor{text-align:left}
table.ablate thead th{border-bottom:2px solid #333}
table.ablate tr.group th{text-align:left;font-style:italic;font-weight:normal;background:#f4f4f4}
table.ablate td.paper{color:#777}
p.note{color:#666;font-size:.85rem}
.holds{color:#1a7f37;font-weight:600}.contradicted{color:#b42318;font-weight:600}.unclear{color:#9a6700}
div.table-wrap{overflow-x:auto}figure{margin:1.5rem 0}figure img{max-width:100%}
"""


def wrappable(text: str) -> str:
    """A number cell's text as HTML that breaks only between its parts: before an interval ``[..]``, a
    spread ``± ..`` or a note ``(..)``, never inside a number.

    >>> wrappable("-0.20 [-0.25, -0.15] (n=4)")
    '<span class="nw">-0.20</span> <span class="nw">[-0.25, -0.15]</span> <span class="nw">(n=4)</span>'
    """
    parts = [p for p in re.split(r" (?=[\[(±])", text) if p]
    return " ".join(f'<span class="nw">{html.escape(p)}</span>' for p in parts)


def to_html(table: Table) -> str:
    """An HTML ``<table class="ablate" id="...">`` fragment (significant deltas in <strong>)."""
    cols = table.columns
    e = html.escape
    number = f' data-table="{table.number}"' if table.number is not None else ""
    out = ['<div class="table-wrap">',
           f'<table class="ablate" id="{table.name}"{number}>',
           f"<caption>{e(caption(table))}</caption>", "<thead><tr>",
           f'<th class="method">{e(table.row_header)}</th>']
    out += [f'<th class="{c.kind}">{e(c.label)}</th>' for c in cols]
    out += ["</tr></thead>", "<tbody>"]
    for row in _segments(table):
        if isinstance(row, str):  # a group header
            out.append(f'<tr class="group"><th colspan="{len(cols) + 1}">{e(row)}</th></tr>')
            continue
        tds = []
        for c in cols:
            cell = row.cells[c.key]
            text = e(cell.text) if c.kind == "descriptor" else wrappable(cell.text)
            if bold(c, cell):
                text = f"<strong>{text}</strong>"
            tds.append(f'<td class="{c.kind}">{text}</td>')
        out.append(f'<tr><td class="method">{e(row.label)}</td>{"".join(tds)}</tr>')
    out.append("</tbody></table></div>")
    out += [f'<p class="note">{e(n)}</p>' for n in [*table.notes, *table.unresolved]]
    return "\n".join(out) + "\n"


def html_document(title: str, body: str) -> str:
    """A self-contained HTML page around ``body``."""
    return ('<!DOCTYPE html>\n<html lang="en"><head><meta '
            f'charset="utf-8"><title>{html.escape(title)}</title>'
            f"<style>{STYLE}</style></head>\n<body>\n{body}</body></html>\n")
