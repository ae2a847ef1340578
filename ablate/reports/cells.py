"""A report table as data (columns, rows, cells), and how numbers become cell text.

Builders (``tables.py``) fill these; renderers (``render.py``) only read them. A cell keeps its unformatted
value (for CSV) beside its text (for markdown, LaTeX, HTML).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from ablate.stats import Delta, Summary

Kind = Literal["descriptor", "measured", "paper", "delta"]


@dataclass(frozen=True)
class Column:
    """One column of a report table. What it shows is in typed fields, never parsed back out of ``key``:

    - ``measured``: ``metric``, the runs-table column summarized over seeds (``val_ppl``, ``ppl/prose``,
      ``bench/niah``, Table 5's ``len/<L>``);
    - ``paper``: ``paper``, the column of the paper's packaged CSV (``avg_ppl``, ``len_32k``);
    - ``delta``: ``metric``, whose paired difference to the baseline it shows;
    - ``descriptor``: ``key`` names it (``act_func``, ``score_shape``, ``added_params``, ``max_lr``).

    ``key`` is only the column's name in the table (its cells' key and its CSV header): the metric for a
    measured column, ``paper:<col>``, ``delta:<metric>``; build columns with ``measured``, ``of_paper`` and
    ``delta``.
    """

    key: str
    label: str
    kind: Kind
    metric: str | None = None
    paper: str | None = None

    @classmethod
    def measured(cls, metric: str, label: str) -> Column:
        """The mean over seeds of the runs-table column ``metric``."""
        return cls(metric, label, "measured", metric=metric)

    @classmethod
    def of_paper(cls, paper: str, label: str) -> Column:
        """The paper's number from column ``paper`` of its CSV."""
        return cls(f"paper:{paper}", label, "paper", paper=paper)

    @classmethod
    def delta(cls, metric: str, label: str) -> Column:
        """The paired difference of ``metric`` to the table's baseline, with its CI."""
        return cls(f"delta:{metric}", label, "delta", metric=metric)


@dataclass(frozen=True)
class Cell:
    text: str = ""
    value: float | str | None = None  # the unformatted number (mean, paper number) or descriptor text
    std: float | None = None
    n: int = 0
    diverged: int = 0
    lo: float | None = None  # delta cells: the 95% CI (stats.py's method)
    hi: float | None = None
    p: float | None = None  # delta cells: the paired t p-value, and after the table's family correction
    p_adj: float | None = None
    significant: bool = False  # delta cells: resolved after the correction (bold in every format)


@dataclass
class Row:
    label: str
    group: str | None = None
    paper_row: int | None = None  # the paper's row number; None for a row the paper does not have
    run_ids: list[str] = field(default_factory=list)
    cells: dict[str, Cell] = field(default_factory=dict)


@dataclass
class Table:
    """A report table: the paper's Table ``number``, or (``number`` None) another report's, named ``slug``
    (``compare``). ``row_header`` heads the rows' labels. Bold, in every format, is a delta cell's
    ``significant`` and nothing else."""

    number: int | None
    title: str
    grid: str
    columns: list[Column]
    rows: list[Row]
    notes: list[str] = field(default_factory=list)
    # "G1 vs baseline (val_ppl): -0.05 ± 0.08, needs ≈ 9 seeds (Holm over 4 comparisons in this table)"
    unresolved: list[str] = field(default_factory=list)
    slug: str = ""
    row_header: str = "Method"
    # each delta cell as the grid's family reads it (``Comparison.as_row``, with its row): the JSON's
    comparisons: list[dict[str, Any]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.slug or f"table{self.number}"

    def cell(self, label: str, key: str, *, group: str | None = None) -> Cell:
        """The cell of the first row labelled ``label`` (in ``group`` when given) and column ``key``."""
        for row in self.rows:
            if row.label == label and (group is None or row.group == group):
                return row.cells.get(key, Cell())
        raise KeyError(f"no row {label!r} in {self.name}")


def fmt_num(x: float, d: int) -> str:
    """A number with ``d`` decimals (no '-0.00')."""
    s = f"{x:.{d}f}"
    return s[1:] if s.startswith("-") and float(s) == 0 else s


def fmt_count(n: float | None) -> str:
    """A parameter count in the unit that reads well: ``201.3M``, ``12.3K``, ``0``.

    >>> fmt_count(201_326_592), fmt_count(12_288), fmt_count(0)
    ('201.3M', '12.3K', '0')
    """
    if n is None or (isinstance(n, float) and not math.isfinite(n)):
        return ""
    n = float(n)
    for scale, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(n) >= scale:
            return f"{n / scale:.1f}{unit}"
    return f"{n:.0f}"


def fmt_lr(lr: float | None) -> str:
    """A learning rate as the paper writes it: ``4.0e-3``."""
    if lr is None:
        return ""
    mantissa, exp = f"{lr:.1e}".split("e")
    return f"{mantissa}e{int(exp)}"


def fmt_len(n: int) -> str:
    """A context length: ``4k`` for 4096, ``512`` for 512."""
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


def summary_cell(s: Summary, d: int, usual_n: int) -> Cell:
    """``mean ± std``; ``-`` when every run diverged; the n where it is 1 or differs from the table's usual n;
    empty when nothing was measured."""
    if s.empty:
        return Cell()
    mean = s.mean
    if mean is None:  # n == 0: every run diverged
        return Cell("-", None, None, 0, s.diverged)
    text = fmt_num(mean, d) if s.std is None else f"{fmt_num(mean, d)} ± {fmt_num(s.std, d)}"
    notes = []
    if s.n == 1 or s.n != usual_n:
        notes.append(f"n={s.n}")
    if s.diverged:
        notes.append(f"{s.diverged} diverged")
    if notes:
        text += f" ({', '.join(notes)})"
    return Cell(text, s.mean, s.std, s.n, s.diverged)


def delta_cell(delta: Delta, d: int, usual_n: int) -> Cell:
    """``-0.12 [-0.15, -0.09]``: the paired mean difference and its 95% CI (a ratio: ``×0.52 [0.40, 0.67]``,
    the geometric mean of the paired ratios); ``(n=1)`` with one pair (no interval); significant when the
    delta is resolved after its family's correction (``stats.correct``) or at the look that decided it."""
    if delta.mean is None:
        return Cell()
    if delta.scale == "log":
        d = 3  # a ratio reads the same whatever its metric's unit
        text = f"×{delta.mean:.{d}f}"
        if delta.lo is not None and delta.hi is not None:
            text += f" [{delta.lo:.{d}f}, {delta.hi:.{d}f}]"
    else:
        text = f"{delta.mean:+.{d}f}"
        if delta.lo is not None:
            text += f" [{delta.lo:+.{d}f}, {delta.hi:+.{d}f}]"
    said = []
    if delta.n == 1 or delta.n != usual_n:
        said.append(f"n={delta.n}")
    if delta.decision is not None:  # --until-resolved decided it: read at that look
        said.append(f"look {delta.decision.last_look} of {len(delta.decision.plan)}")
    if delta.identical:
        said.append("equal at every seed")
    elif delta.no_spread:
        said.append("no spread")
    if said:
        text += f" ({', '.join(said)})"
    return Cell(text, delta.mean, None, delta.n, 0, delta.lo, delta.hi, delta.p, delta.p_adj,
                delta.p_adj is not None and delta.resolved)


# ---------------------------------------------------------------- what every renderer reads the same way
TERMINAL = "terminal"  # not a --format: what `ablate report` prints at a terminal when none is given


def caption(table: Table) -> str:
    head = f"Table {table.number}: {table.title}" if table.number is not None else table.title
    return head + (f", grid '{table.grid}'" if table.grid else "")


def bold(col: Column, cell: Cell) -> bool:
    """What is bold, in every format: a delta that is significant after its correction, nothing else."""
    return col.kind == "delta" and cell.significant and bool(cell.text)
