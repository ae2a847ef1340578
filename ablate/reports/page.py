"""The report page: one self-contained HTML file (scorecard, Tables 1-6, Figures 1-7 embedded as base64
PNG, each with the caption its file carries)."""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from PIL import Image

from ablate import __version__
from ablate.reports.cells import Table
from ablate.reports.figures import FIGURES, TITLES
from ablate.reports.render import html_document, to_html
from ablate.reports.scorecard import Verdict
from ablate.reports.scorecard_render import scorecard_html
from ablate.stats import DEFAULT, Stats


def img_src(path: Path) -> str:
    """A PNG file as an ``<img src>`` that holds it (base64): the page stands alone."""
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f"data:image/png;base64,{data}"


def _caption(n: int, path: Path) -> tuple[str, str]:
    """Figure ``n``'s title and the caption its PNG carries (``figures.write_figures``: what is drawn, the
    band, what coincides by construction); no caption where the file has none."""
    with Image.open(path) as im:
        text = getattr(im, "text", {}).get("Description", "")
    return f"Figure {n}: {TITLES[n]}", text


def report_page(grid: str, tables: list[Table], figures: dict[int, Path], verdicts: list[Verdict], *,
                counts: dict[str, int] | None = None, sections: Sequence[str] = (),
                stats: Stats = DEFAULT, compare: Table | str | None = None) -> str:
    """The whole report as one HTML document; figures are read from ``figures`` and embedded. ``compare``:
    every arm against the reference (``report compare``'s table), or the line saying why there is none.
    ``sections``: extra HTML sections appended at the end (``ablate tune``'s learning-rate report)."""
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
        '<section id="scorecard-section"><h2>Scorecard</h2>',
        scorecard_html(verdicts, stats),
        "</section>",
        '<section id="tables"><h2>Tables</h2>',
    ]
    parts += [to_html(t) for t in tables]
    parts += ["</section>", '<section id="figures"><h2>Figures</h2>']
    for n, path in sorted(figures.items()):
        title, caption = _caption(n, path)
        parts.append(f'<figure id="fig{n}"><img alt="{e(title)}" src="{img_src(path)}">'
                     f"<figcaption>{e(title)}. {e(caption)} ({e(FIGURES[n])}; "
                     f"{e(Path(FIGURES[n]).with_suffix('.pdf').name)} beside it)</figcaption></figure>")
    parts.append("</section>")
    parts += list(sections)
    return html_document(f"ablate report: {grid}", "\n".join(parts) + "\n")
