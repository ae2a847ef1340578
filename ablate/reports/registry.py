"""Every report ``ablate report`` can make, in one registry: ``REPORTS`` (name -> ``Report``).

The CLI's choices and help come from ``names.REPORT_HELP`` (light: read at start-up), its dispatch from here:
adding a report is one entry in each. Each entry names its maker as ``module:function`` in the module that
builds the report, imported when that report is asked for (as ``execute.registry`` names the executors), so
a table never loads Optuna (``lr``), matplotlib (``figures``) or the ladder's fits. A maker
``(store, request, name)`` returns an ``Output``: ``text`` (for stdout, or the file ``--out`` names) and a
``note`` (what it wrote, where a report writes files itself: figures, ``all``, ``ladder --out DIR``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from importlib import import_module
from pathlib import Path
from typing import cast

from ablate.errors import UserInputError
from ablate.reports.names import REPORT_HELP, TARGETS
from ablate.stats import DEFAULT, Stats
from ablate.store.api import Store
from ablate.trainers.registry import MODEL, TRAINERS, Trainer, text_trainer

DEFAULT_DIR = Path("report")  # where figures and `all` write when --out is not given


@dataclass(frozen=True)
class Request:
    """What a report is asked for (``ablate report``'s options)."""

    grid: str | None = None
    paper: bool = False
    fmt: str = "markdown"
    out: Path | None = None
    where: str | None = None
    warn: Callable[[str], None] | None = None
    stats: Stats = DEFAULT
    target: str = "paper"  # ladder: where to predict
    reference: str | None = None  # compare (and all's compare table): the reference arm; None: baseline
    metrics: tuple[str, ...] = ()  # compare: the metrics shown; empty: every one the runs have
    width: int = 100  # fmt "terminal" (a rich table, what a terminal shows without --format): its columns


@dataclass(frozen=True)
class Output:
    """``text`` for stdout (or ``--out``'s file), and ``note``, a line on what the report wrote itself (on
    stderr when ``note_err``)."""

    text: str | None = None
    note: str | None = None
    note_err: bool = False


@dataclass(frozen=True)
class Report:
    """One report: its name, what it is (the CLI's help), and its maker. ``table``: the paper table it is."""

    name: str
    help: str
    maker: str  # "module:function", a Maker
    table: int | None = None

    def make(self, store: Store, request: Request) -> Output:
        """This report of ``store``'s runs, as ``request`` asks (its maker's module imported now)."""
        module, _, function = self.maker.partition(":")
        return cast(Maker, getattr(import_module(module), function))(store, request, self.name)


Maker = Callable[[Store, Request, str], Output]


MAKERS = {"compare": "ablate.reports.api:compare_report", "lr": "ablate.reports.lr:lr_report",
          "scorecard": "ablate.reports.api:scorecard_report",
          "ladder": "ablate.reports.ladder_render:ladder_report",
          "figures": "ablate.reports.files:figures_report", "all": "ablate.reports.files:all_report"}
REPORTS: dict[str, Report] = {
    name: Report(name, REPORT_HELP[name], MAKERS.get(name, "ablate.reports.api:table_report"),
                 table=int(name[5:]) if name.startswith("table") else None)
    for name in TARGETS}

COMPARING = ("compare", "all")  # the reports that take --reference and --metric


def make_report(store: Store, name: str, request: Request, *, say: Callable[[str], None]) -> Output:
    """``ablate report NAME``: the options checked against the report, the grid chosen when none is named
    (with several in the store, the study run last, said through ``say`` with the others; ``lr`` reads the
    grid with tuning studies itself), then the report."""
    for given, option in ((request.reference, "--reference"), (request.metrics, "--metric")):
        if given and name not in COMPARING:
            raise UserInputError(f"option {option} is for `ablate report compare` and `ablate report all`, "
                                 f"not {name}")
    if request.grid is None and name != "lr" and (last := store.last_study()) is not None:
        others = [g for g in store.grids() if g != last]
        say(f"report of grid {last}, the one run last; the store also holds {', '.join(others)} "
            "(--grid names one)")
        request = replace(request, grid=last)
    if name != "lr":
        trainer = grid_trainer(store, request.grid)
        if not trainer.can_report(name):
            raise UserInputError(trainer.refusal(f"ablate report {name}"))
    return REPORTS[name].make(store, request)


def grid_trainer(store: Store, grid: str | None) -> Trainer:
    """The trainer of the grid a report reads (the store's only grid when none is named): the one its
    registered file names."""
    names = store.grids()
    name = grid if grid is not None else names[0] if len(names) == 1 else None
    text = store.grid_text(name) if name is not None else None
    return TRAINERS[MODEL] if text is None else text_trainer(text)
