"""The learning-rate report of ``ablate tune``: the sensitivity figure and the table of best and largest
stable LR.

Read from the grid's tuning studies in the store's database (``ablate.tune.storage``): one row per study (a
cell of the grid, in practice a variant), from its trials and bracketing probes (``ablate.tune.protocol``
defines best and stable). ``ablate report lr --grid NAME`` prints the table; ``ablate report all`` adds the
table and the figure when the grid (or, for ``NAME/tuned``, the grid it was tuned from) has studies.
"""

from __future__ import annotations

import html
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ablate.errors import UserInputError, one_of
from ablate.reports.cells import TERMINAL, Cell, Column, Row, Table, fmt_lr, fmt_num
from ablate.reports.figure_kit import pyplot, save
from ablate.reports.page import img_src
from ablate.reports.registry import Output, Request
from ablate.reports.render import FORMATS, SUFFIX, render, to_html
from ablate.tune.protocol import (
    DEFAULT_TOLERANCE,
    Point,
    best_point,
    first_unstable_above,
    max_stable,
    worse_cell,
    worse_header,
)
from ablate.tune.storage import has_study_tables, optuna_storage
from ablate.tune.studies import stored_studies, study_points

if TYPE_CHECKING:
    from ablate.store.api import Store

log = logging.getLogger(__name__)

FIGURE = "lr_sensitivity.png"
CAPTION = ("Learning-rate sensitivity: final metric vs learning rate per variant (trials and bracketing "
           "probes at one seed); x = diverged, v = pruned, * = best, dotted line = largest stable")
TUNED = "/tuned"
TUNE = "/tune"  # the trials' grid, as `ablate tune` names it


@dataclass
class StudyLR:
    """One study's points and what the protocol makes of them."""

    label: str
    variant: str
    param: str
    metric: str
    tolerance: float
    log_scale: bool
    points: list[Point]
    higher: bool = False  # its metric is higher-is-better (a command grid's objective may be)

    @property
    def best(self) -> Point | None:
        return best_point(self.points, higher=self.higher)

    @property
    def stable(self) -> Point | None:
        return max_stable(self.points, self.tolerance, higher=self.higher)

    @property
    def unstable(self) -> Point | None:
        top = self.stable
        return (first_unstable_above(self.points, top.value, self.tolerance, higher=self.higher)
                if top is not None else None)


class LRTable(Table):
    """A report Table named ``lr_table`` (its caption reads "Table LR")."""

    @property
    def name(self) -> str:
        return "lr_table"


def tuned_from(grid: str) -> str:
    """The grid whose studies a grid reports: ``g/tuned`` (``--then-run``'s runs) and ``g/tune`` (the trials,
    the name ``ablate tune`` prints) report ``g``'s."""
    for suffix in (TUNED, TUNE):
        if grid.endswith(suffix):
            return grid.removesuffix(suffix)
    return grid


def load_studies(store: Store, grid: str) -> list[StudyLR]:
    """The tuning studies of ``grid`` (or of the grid it was tuned from) in an open Store; [] when none."""
    out = []
    for study in stored_studies(store, tuned_from(grid)):
        a = study.user_attrs
        out.append(StudyLR(a.get("cell", study.study_name), a.get("variant", "?"), a["param"],
                           a.get("metric", "val_ppl"), float(a.get("tolerance", DEFAULT_TOLERANCE)),
                           bool(a.get("log", True)), study_points(study, a["param"]),
                           higher=a.get("better") == "higher"))
    return out


def grid_with_studies(store: Store, grid: str | None) -> str:
    """The grid to report: ``grid``, or the only grid with tuning studies."""
    if grid is not None:
        return grid
    names = sorted({s.user_attrs.get("grid") for s in optuna_storage(store.url).get_all_studies()
                    if s.user_attrs.get("grid")}) if has_study_tables(store.engine) else []
    if len(names) == 1:
        return str(names[0])
    if not names:
        raise UserInputError("the store has no tuning studies: run `ablate tune GRID ...` first")
    raise UserInputError(f"the store has tuning studies for {len(names)} grids; name one with --grid: "
                         f"{', '.join(names)}")


# ---------------------------------------------------------------- the table
def _counts(points: list[Point]) -> str:
    n = {k: sum(p.outcome == k for p in points) for k in ("ok", "diverged", "pruned", "failed")}
    return ", ".join(f"{v} {k}" for k, v in n.items() if v) or "none"


def _lr_cell(p: Point | None) -> Cell:
    return Cell() if p is None else Cell(fmt_lr(p.value), p.value, None, 1, 0)


def _worse_cell(p: Point | None, best: Point | None) -> Cell:
    """The value that did worse and how (``3.2e-2 (diverged)``, ``3.2e-2 (+7%)``)."""
    if p is None:
        return Cell()
    return Cell(f"{fmt_lr(p.value)} {worse_cell(p, best).split(' ', 1)[1]}", p.value, None, 1, 0)


def lr_table(studies: list[StudyLR], grid: str) -> LRTable:
    """Per study: best value and its metric, largest stable value, the first value above it that did worse
    (diverged, or ended more than the tolerance over the best), trials."""
    metric = studies[0].metric if studies else "val_ppl"
    param = studies[0].param if studies else "train.lr"
    tol = {s.tolerance for s in studies}
    columns = [Column("best", f"best {param}", "measured"),
               Column(metric, f"{metric} at best", "measured"),
               Column("max_stable", "largest stable", "measured"),
               Column("first_unstable", worse_header(next(iter(tol))) if len(tol) == 1 else "first worse",
                      "measured"),
               Column("trials", "trials", "descriptor")]
    rows = []
    for s in studies:
        best = s.best
        cells = {"best": _lr_cell(best), "max_stable": _lr_cell(s.stable),
                 # the best point has a finite metric
                 "first_unstable": _worse_cell(s.unstable, best),
                 metric: Cell() if best is None or best.metric is None
                 else Cell(fmt_num(best.metric, 2), best.metric, None, 1, 0),
                 "trials": Cell(_counts(s.points), _counts(s.points))}
        rows.append(Row(s.label, run_ids=[p.run_id for p in s.points if p.run_id], cells=cells))
    within = ", ".join(f"{t:.0%}" for t in sorted(tol))
    notes = [f"Best: lowest {metric} among trials that did not diverge. Largest stable: the largest value "
             f"that did not diverge and ended within {within} of the best. First >{within} worse: the "
             "smallest value above it that diverged or ended more than that over the best (the bracket's "
             "upper end), and how."]
    return LRTable(number="LR", title=f"best and largest stable {param} per variant (ablate tune)",  # type: ignore[arg-type]
                   grid=tuned_from(grid), columns=columns, rows=rows, notes=notes)


# ---------------------------------------------------------------- the figure
def lr_figure(studies: list[StudyLR], path: str | Path) -> Path:
    """Final metric vs value per study (a line through the finished points), diverged (x) and pruned (v)
    marked along the top, the best starred, the largest stable value as a dotted line."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    done = [p.metric for s in studies for p in s.points if p.outcome == "ok" and p.metric is not None]
    top = max(done) * 1.15 if done else 1.0
    for i, s in enumerate(studies):
        color = f"C{i % 10}"
        ok = sorted((p.value, p.metric) for p in s.points if p.outcome == "ok" and p.metric is not None)
        if ok:
            ax.plot(*zip(*ok, strict=True), "o-", color=color, label=s.label, ms=4)
        else:
            ax.plot([], [], "o-", color=color, label=s.label)
        for outcome, marker in (("diverged", "x"), ("pruned", "v")):
            xs = [p.value for p in s.points if p.outcome == outcome]
            if xs:
                ax.scatter(xs, [top] * len(xs), marker=marker, color=color, s=36, clip_on=False,
                           facecolors="none" if marker == "v" else color)
        if (b := s.best) is not None:
            ax.scatter([b.value], [b.metric], marker="*", s=160, color=color, zorder=3, edgecolors="black")
        if (st := s.stable) is not None:
            ax.axvline(st.value, color=color, ls=":", lw=1.2)
    if studies and all(s.log_scale for s in studies):
        ax.set_xscale("log")
    ax.set_ylim(top=top * 1.03)
    if done and max(done) / max(min(done), 1e-12) > 20:
        ax.set_yscale("log")
    param, metric = (studies[0].param, studies[0].metric) if studies else ("train.lr", "val_ppl")
    ax.set_xlabel(param)
    ax.set_ylabel(f"final {metric}")
    ax.set_title("learning-rate sensitivity" if param == "train.lr" else f"{param} sensitivity")
    if not studies:
        ax.text(0.5, 0.5, "no tuning studies for this grid", ha="center", va="center", transform=ax.transAxes)
    else:
        ax.legend(fontsize=8)
    return save(fig, Path(path))


# ---------------------------------------------------------------- ablate report lr / all
def report_lr(store: Store, *, grid: str | None = None, fmt: str = "markdown", width: int = 100) -> str:
    """``ablate report lr``: the table of best and largest stable LR as text in ``fmt`` (``terminal``: a rich
    table ``width`` columns wide)."""
    if fmt not in FORMATS and fmt != TERMINAL:
        raise UserInputError(one_of(fmt, FORMATS, what="format") + " (option --format)")
    name = grid_with_studies(store, grid)
    studies = load_studies(store, name)
    if not studies:
        raise UserInputError(
            f"grid {tuned_from(name)!r} has no tuning studies: run `ablate tune` on it first"
        )
    return render(lr_table(studies, name), fmt, width=width)


def write_lr_report(store: Store, grid: str, out_dir: str | Path) -> tuple[dict[str, Path], str]:
    """The table (.md, .tex, .csv) and the figure into ``out_dir`` when ``grid`` has studies; returns the
    files and an HTML section for the report page (``({}, "")`` when there are no studies)."""
    studies = load_studies(store, grid)
    if not studies:
        return {}, ""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    table = lr_table(studies, grid)
    written = {}
    for fmt in ("markdown", "latex", "csv"):
        path = out / f"{table.name}{SUFFIX[fmt]}"
        path.write_text(render(table, fmt))
        written[path.name] = path
    (out / "figures").mkdir(exist_ok=True)
    fig = lr_figure(studies, out / "figures" / FIGURE)
    written[fig.name] = fig
    e = html.escape
    section = (f'<section id="lr"><h2>Learning rate (ablate tune)</h2>{to_html(table)}'
               f'<figure id="fig-lr"><img alt="{e(CAPTION)}" src="{img_src(fig)}"><figcaption>{e(CAPTION)} '
               f"({e(FIGURE)})</figcaption></figure></section>")
    log.info("learning-rate report for %s: %d studies", grid, len(studies))
    return written, section


def lr_report(store: Store, r: Request, name: str) -> Output:
    """``ablate report lr`` (the registry's maker)."""
    return Output(report_lr(store, grid=r.grid, fmt=r.fmt, width=r.width))
