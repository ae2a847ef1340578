"""The thin layer between the store and the pure report builders: which grid, and everything a report reads of
it.

``load_grid_data(store, grid)`` does every query once; tables, figures and the scorecard are pure functions of
the ``GridData`` it returns.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pandas as pd

from ablate.ablations import VARIANTS, ModelConfig, added_params
from ablate.errors import AblateError, UserInputError, one_of
from ablate.metrics import SUMMARY
from ablate.provenance import spread_warning
from ablate.reports.configs import one_configuration
from ablate.reports.rows import context_key
from ablate.reports.spec import VariantInfo
from ablate.result import RESULT_STATUSES
from ablate.store.queries import OWN_METRICS
from ablate.trainers.registry import KEY as TRAINER
from ablate.trainers.registry import MODEL, TRAINERS

if TYPE_CHECKING:
    from ablate.stats import Decision
    from ablate.store.api import Store

log = logging.getLogger(__name__)


@dataclass
class GridData:
    """A grid's runs (CLI.md's columns; every status) and, for its finished runs, curves, probes, histograms,
    events; the variant catalogue; ``added_params(variant)`` at the grid's scale; the config paths the grid
    varies (``axes``); and what ``ablate run --until-resolved`` decided for its comparisons (``decisions``,
    read by every report at the look that decided them)."""

    grid: str
    runs: pd.DataFrame
    curves: pd.DataFrame
    probes: pd.DataFrame
    histograms: pd.DataFrame
    events: pd.DataFrame
    catalogue: Mapping[str, VariantInfo] = field(default_factory=dict)
    added_params: Callable[[str], int | None] | None = None
    axes: list[str] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    # a trainer's own metrics (a command's: what it reported) -> which way is better ("lower", "higher",
    # None), the objective first; empty for ablate's own model, whose metrics ablate.metrics declares
    outcomes: dict[str, str | None] = field(default_factory=dict)
    trainer: str = MODEL  # what trained the runs (ablate.trainers.registry)
    # what is computed once per grid data and read by every page (``reports.family.families``)
    memo: dict[tuple[object, ...], object] = field(default_factory=dict, repr=False, compare=False)

    @property
    def finished(self) -> pd.DataFrame:
        """The runs with a result (done, diverged, pruned)."""
        return self.runs[self.runs["status"].isin(RESULT_STATUSES)]


def resolve_grid(grids: list[str], grid: str | None) -> str:
    """The grid to report: ``grid`` if the store has it; the only grid when none is named; else a clear
    error."""
    if grid is not None:
        if grid not in grids:
            msg = one_of(grid, grids,
                         what="grid") if grids else f"unknown grid {grid!r}: the store has no grids yet"
            raise UserInputError(msg + " (option --grid)")
        return grid
    if len(grids) == 1:
        return grids[0]
    if not grids:
        raise UserInputError("the store has no grids yet: run one first (`ablate run GRID`), or point "
                             "--store at the store that has them")
    raise UserInputError(f"the store has {len(grids)} grids; name one with --grid: "
                         f"{', '.join(sorted(grids))}")


def load_grid_data(store: Store, grid: str | None = None, *, where: str | None = None,
                   warn: Callable[[str], None] | None = None) -> GridData:
    """Read one grid's runs and their curves, probes, histograms and events from ``store`` (an ablate Store).

    The runs are those of the grid's current configuration (what its last ``ablate run`` planned: the rule of
    ``ablate status`` too), satisfying ``where`` (a ``--where`` expression); among them one configuration
    (``reports.configs``, for runs ``--append`` joined). ``warn`` gets one line for each thing left out."""
    name = resolve_grid(list(store.grids()), grid)
    axes = store.grid_axes(name)
    runs, left_out = one_configuration(current_runs(store, name, where=where, warn=warn), axes, grid=name)
    if left_out is not None:
        log.info(left_out)
        if warn is not None:
            warn(left_out)
    done = list(runs.loc[runs["status"].isin(RESULT_STATUSES), "run_id"])
    trainer, outcomes = own_outcomes(runs)
    data = GridData(
        grid=name, runs=runs,
        curves=store.curves(run_ids=done, metrics=["loss", *outcomes]),
        probes=store.probes(run_ids=done), histograms=store.histograms(run_ids=done),
        events=store.events(run_ids=done), catalogue=catalogue_info(), axes=list(axes),
        decisions=store.decisions(name), outcomes=outcomes, trainer=trainer,
    )
    data.added_params = _added_params_at_scale(runs)
    log.info("grid %s: %d runs (%d finished)", name, len(runs), len(done))
    return data


def own_outcomes(runs: pd.DataFrame) -> tuple[str, dict[str, str | None]]:
    """The trainer of a grid's runs and its own metrics (``GridData.outcomes``): for a trainer that names its
    own (a command), its objective (and which way is better, read where ``Trainer.objective`` says) first,
    then every other metric its runs reported."""
    named = runs[TRAINER].dropna() if TRAINER in runs.columns else pd.Series(dtype=object)
    if named.empty:
        return MODEL, {}
    trainer = TRAINERS.get(str(named.iloc[0]), TRAINERS[MODEL])
    out: dict[str, str | None] = {}
    mine = runs[runs[TRAINER] == trainer.name]
    metric_at, better_at = trainer.objective or ("", "")
    for metric_name, better in zip(mine.get(metric_at, []), mine.get(better_at, []), strict=False):
        if isinstance(metric_name, str):
            out.setdefault(metric_name, str(better) if better in ("lower", "higher") else None)
    for name in runs.attrs.get(OWN_METRICS, []):
        out.setdefault(str(name), None)
    done = mine[mine["status"] == "done"]
    for m in SUMMARY:  # what the trainer reported under a name ablate.metrics declares (train_loss)
        if not m.family and m.compare is not None and m.name in done.columns and done[m.name].notna().any():
            out.setdefault(m.name, m.better)
    return trainer.name, out


def current_runs(store: Store, name: str, *, where: str | None = None,
                 warn: Callable[[str], None] | None = None) -> pd.DataFrame:
    """The runs of grid ``name``'s current configuration (``ablate status`` counts the same) that satisfy
    ``where``; ``warn`` gets one line saying how many runs of older configurations were left out, if any, and
    one line when the finished runs were trained under different config versions or model code
    (``ablate.provenance.spread_warning``)."""
    runs = store.runs_frame(grid=name, where=where, current=True)
    older = store.older_runs(name)
    lines = []
    if older:
        lines.append(f"report of grid {name}: {older} run(s) of older configurations of the grid left out "
                     "(runs its last `ablate run` did not plan: an edited grid file, changed data)")
    finished = list(runs.loc[runs["status"].isin(RESULT_STATUSES), "run_id"])
    if (spread := spread_warning(store.provenance(finished).values(), what=f"the report of grid {name}")):
        lines.append(spread)
    for line in lines:
        log.info(line)
        if warn is not None:
            warn(line)
    return runs


def catalogue_info() -> dict[str, VariantInfo]:
    """The live variant catalogue (``ablate.ablations.VARIANTS``) as VariantInfo, by name."""
    out = {}
    for name, v in VARIANTS.items():
        out[name] = VariantInfo(
            name=name, paper=tuple(getattr(v, "paper", ()) or ()), act_func=getattr(v, "act_func", None),
            score_shape=getattr(v, "score_shape", None), description=getattr(v, "description", "") or "",
        )
    return out


def _unflatten(flat: Mapping[str, object]) -> dict[str, object]:
    """``{"a.b": 1}`` -> ``{"a": {"b": 1}}``; a key under a path that holds a value is dropped."""
    out: dict[str, object] = {}
    for key, value in flat.items():
        parts = key.split(".")
        node = out
        for p in parts[:-1]:
            child = node.setdefault(p, {})
            if not isinstance(child, dict):
                break
            node = child
        else:
            node[parts[-1]] = value
    return out


def _added_params_at_scale(runs: pd.DataFrame) -> Callable[[str], int | None] | None:
    """``added_params(variant)`` for the grid's base model (its most common one), or None if it has no
    runs."""
    if not len(runs):
        return None
    keys = [context_key(r) for _, r in runs.iterrows()]
    modal = max(set(keys), key=keys.count)
    rows = [i for i, k in enumerate(keys) if k == modal]
    # The baseline's own model: under match_params a gated run's FFN was re-widened.
    row = runs.iloc[next((i for i in rows if runs.iloc[i]["variant"] == "baseline"), rows[0])]
    model = {k[len("model."):]: (v.item() if hasattr(v, "item") else v)
             for k, v in row.items() if str(k).startswith("model.")}
    model = {k: v for k, v in model.items()
             if not (isinstance(v,
                                float) and math.isnan(v)) and v is not None and not k.startswith(("gate",
                                                                                                  "switch"))}

    @functools.cache
    def added(variant: str) -> int | None:
        try:
            base = ModelConfig(**_unflatten(model))
            return added_params(base, variant)
        except (AblateError, ValueError, TypeError) as exc:
            log.debug("added params of %s: %s", variant, exc)
            return None

    return added
