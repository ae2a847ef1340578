"""The report page: one self-contained HTML file (the comparison, the scorecard, Tables 1-6, Figures 1-7
embedded as base64 PNG, each with the title and caption its file carries; a command grid's page has its
comparison and curve figures only)."""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

from PIL import Image

from ablate import __version__
from ablate.reports.cells import Table
from ablate.reports.render import html_document, to_html
from ablate.reports.scorecard import Verdict
from ablate.reports.scorecard_render import scorecard_html
from ablate.stats import DEFAULT, Stats


def img_src(path: Path) -> str:
    """A PNG file as an ``<img src>`` that holds it (base64): the page stands alone."""
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f"data:image/png;base64,{data}"


def _caption(path: Path) -> tuple[str, str]:
    """The title and the caption a figure's PNG carries (``figure_kit.write_figure``: what is drawn, the
    band, what coincides by construction); the file's name where it has no title, nothing where it has no
    caption."""
    with Image.open(path) as im:
        text = getattr(im, "text", {})
    return text.get("Title", path.stem), text.get("Description", "")


def report_page(grid: str, tables: list[Table], figures: Mapping[int, Path] | Mapping[str, Path],
                verdicts: list[Verdict] | None, *, counts: dict[str, int] | None = None,
                sections: Sequence[str] = (), stats: Stats = DEFAULT,
                compare: Table | str | None = None) -> str:
    """The whole report as one HTML document; figures are read from ``figures`` (Figures 1-7 by number, a
    command grid's by metric) and embedded in their keys' order. ``compare``: every arm against the reference
    (``report compare``'s table), or the line saying why there is none. No tables: no tables section; no
    ``verdicts`` (None, a command grid's page): no scorecard section. ``sections``: extra HTML sections
    appended at the end (``ablate tune``'s learning-rate report)."""
    e = html.escape
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    status = ", ".join(f"{n} {s}" for s, n in sorted((counts or {}).items()))
    parts = [
        f"<h1>ablate report: grid <code>{e(grid)}</code></h1>",
        f'<p class="note">ablate {e(__version__)}, {e(when)}. Runs: {e(status or "none")}. Cells: mean ± std '
        "over seeds (n where it differs); '-' = diverged; Δ = paired difference to the baseline "
        "(same config and seed) with its 95% CI (the method, n and family correction are under each "
        "table; bold: significant after the correction, or at the --until-resolved look that decided it, "
        "and nothing else).</p>",
        '<section id="compare-section"><h2>Every arm against the reference</h2>',
        to_html(compare) if isinstance(compare, Table) else f'<p class="note">{e(compare or "")}</p>',
        "</section>",
    ]
    if verdicts is not None:
        parts += ['<section id="scorecard-section"><h2>Scorecard</h2>', scorecard_html(verdicts, stats),
                  "</section>"]
    if tables:
        parts += ['<section id="tables"><h2>Tables</h2>', *(to_html(t) for t in tables), "</section>"]
    parts.append('<section id="figures"><h2>Figures</h2>')
    for key, path in figures.items():
        title, caption = _caption(path)
        figure_id = f"fig{key}" if isinstance(key, int) else path.stem
        parts.append(f'<figure id="{e(figure_id)}"><img alt="{e(title)}" src="{img_src(path)}">'
                     f"<figcaption>{e(title)}. {e(caption)} ({e(path.name)}; "
                     f"{e(path.with_suffix('.pdf').name)} beside it)</figcaption></figure>")
    parts.append("</section>")
    parts += list(sections)
    return html_document(f"ablate report: {grid}", "\n".join(parts) + "\n")
