"""Tables 1-6 from a grid's runs: pure functions over the store's ``runs`` DataFrame (CLI.md's columns).

``build_table(n, runs, catalogue)`` matches each of the paper's rows to runs (``rows.py``), then fills the
descriptor columns, the measured columns (mean ± spread over seeds, "-" for diverged), the paper's numbers
(``paper=True``) and the paired delta to the table's baseline with its 95% CI, the deltas corrected together
as one family (``stats.py``); the notes under the table name the method, the n, the correction and the
family's size, and ``Table.unresolved`` says what each unresolved delta needs.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from ablate.metrics import metric
from ablate.reports.cells import (
    Cell,
    Column,
    Row,
    Table,
    delta_cell,
    fmt_count,
    fmt_len,
    fmt_lr,
    summary_cell,
)
from ablate.reports.data import GridData
from ablate.reports.family import REFERENCE, Comparison, Families, own_family
from ablate.reports.family import families as grid_families
from ablate.reports.rows import RowPlan, cell_value, finished, plan_rows, trained_len
from ablate.reports.spec import (
    BENCH_NAMES,
    LABELS,
    PAPER_DESCRIPTOR,
    SPECS,
    TableSpec,
    VariantInfo,
    digits,
    paper_label,
    paper_length,
    paper_number,
    paper_rows,
)
from ablate.reports.verdict import paired
from ablate.stats import (
    DEFAULT,
    Decision,
    Delta,
    Stats,
    Summary,
    family_size,
    family_text,
    method_note,
    summarize,
)
from ablate.stats.power import NEEDS_MEANING, unresolved_line

log = logging.getLogger(__name__)

LEN_COLUMN = re.compile(r"^bench/(?P<task>.+)@(?P<len>\d+)(?P<yarn>/yarn)?$")  # the store's names of them
LEN = "len/"  # Table 5's columns: the mean retrieval score at one length (with_length_columns)
# Paper columns that are not measurements.
_NOT_MEASURED = {"row", "group", "method", "setting", "act_func", "score_shape", "added_param_m", "max_lr"}
SPREAD_NOTE = "cells: mean ± standard deviation over seeds (sample std, n-1); '-': every seed diverged"


@dataclass(frozen=True)
class Measure:
    """A measured quantity a table can show: the runs-frame column ``key``, its family (a declared family of
    ``ablate.metrics``, ``ppl/`` or ``bench/``, or ``len/``) with the member it names (a held-out set, a
    task), and for ``len/`` the context length and whether it is YaRN-scaled."""

    key: str
    family: str | None = None
    member: str = ""
    length: int | None = None
    yarn: bool = False


def measure(key: str) -> Measure:
    """What a runs-frame column measures (``ppl/code`` -> family ``ppl/``, member ``code``)."""
    m = metric(key)
    if m is not None and m.family:
        return Measure(key, m.name, key.removeprefix(m.name))
    return Measure(key)


def length_measure(length: int, yarn: bool = False) -> Measure:
    """Table 5's column at ``length`` (``len/<L>``, ``len/<L>/yarn``)."""
    return Measure(f"{LEN}{length}{'/yarn' if yarn else ''}", LEN, "", length, yarn)


def build_table(number: int, runs: pd.DataFrame, catalogue: Mapping[str, VariantInfo], *, grid: str = "",
                paper: bool = False, added_params: Callable[[str], int | None] | None = None,
                stats: Stats = DEFAULT, decisions: Sequence[Decision] = (),
                families: Families | None = None) -> Table:
    """The paper's table ``number`` rebuilt from ``runs`` (a DataFrame with CLI.md's ``runs`` columns).

    ``catalogue`` maps variant names to VariantInfo (their ``tableN:R`` refs); ``added_params(variant)`` gives
    the added parameter count of a variant at the grid's scale for rows with no runs. Only ``done`` and
    ``diverged`` runs count. Rows keep the paper's order; a row with no runs stays, empty. Each delta reads
    the grid's family (``families``, made from ``runs`` when not given: ``reports.family``): its corrected p,
    significance and seeds needed are those of every other page; a delta that ``ablate run
    --until-resolved`` decided (``decisions``) is read at the look that decided it.
    """
    if families is None:
        families = grid_families(GridData(grid, runs, None, None, None, None, catalogue,
                                          decisions=list(decisions)), REFERENCE, stats)
    spec = SPECS[number]
    prows = paper_rows(number)
    runs = with_length_columns(finished(runs))
    plans, notes = plan_rows(spec, prows, runs, catalogue)
    if paper and spec.layout == "settings":  # say which of the paper's settings each of the grid's stands for
        settings = {p.group_index: p.paper["setting"] for p in plans if p.paper}
        for p in plans:
            if p.group_index in settings and p.group != settings[p.group_index]:
                p.group = f"{p.group} (paper: {settings[p.group_index]})"
    measured = _measured(spec, plans)
    columns = _columns(spec, prows, measured, paper, plans)
    usual_n = _usual_n(plans)
    ref_plans = [p for p in plans if p.is_reference]
    found = {col.key: [_found(families, col.metric or "", p, ref_plans, runs) for p in plans]
             for col in columns if col.kind == "delta"}
    deltas = {key: own_family([_delta(key.removeprefix("delta:"), p, ref_plans, runs, stats, decisions)
                               for p in plans], found[key], stats) for key in found}
    rows = []
    for i, plan in enumerate(plans):
        row = Row(plan.label, plan.group, plan.paper_row, list(plan.runs["run_id"]) if len(plan.runs) else [])
        for col in columns:
            row.cells[col.key] = (delta_cell(deltas[col.key][i], digits(col.metric or ""), usual_n)
                                  if col.key in deltas else
                                  _cell(spec, col, plan, ref_plans, runs, catalogue, added_params, usual_n))
        rows.append(row)
    if spec.layout == "lengths" and not measured:
        notes.append("no retrieval scores at lengths (bench/<task>@<len>) in this grid yet")
    if measured:
        notes.append(SPREAD_NOTE)
    notes += _not_in_paper(runs, plans)
    unresolved = []
    comparisons = []
    labels = Counter(p.label for p in plans)
    for key, shown in deltas.items():
        metric = key.removeprefix("delta:")
        notes += _family_notes(shown, found[key], families, metric, stats)
        own_m = family_size(d for d, c in zip(shown, found[key], strict=True) if c is None)
        own_text = family_text(stats, own_m, "of those rows in this table")
        for p, d, c in zip(plans, shown, found[key], strict=True):
            if d.mean is not None:
                read = c if c is not None else _own(p, d, metric, own_m, own_text, stats)
                comparisons.append({"row": p.label, "group": p.group, "paper_row": p.paper_row,
                                    **read.as_row()})
            name = f"{_name(p, labels)} vs baseline ({metric})"
            if d.mean is not None and not d.resolved and not d.identical:
                unresolved.append(unresolved_line(name, d, digits(metric), stats, c.m, f"of {metric} against "
                                                  f"{REFERENCE} in this grid") if c is not None else
                                  unresolved_line(name, d, digits(metric), stats, own_m))
            elif d.decision is not None:
                notes.append(f"{name}: {d.decision.reading()} ({d.decision.family_text()})")
    if unresolved:
        notes.append(NEEDS_MEANING)
    return Table(number, spec.title, grid, columns, rows, notes, unresolved, comparisons=comparisons)


def _own(plan: RowPlan, d: Delta, metric: str, m: int, family: str, stats: Stats) -> Comparison:
    """A row's delta that is not one of the grid's comparisons, as a comparison of the table's own family."""
    values = [cell_value(r, metric) for _, r in plan.runs.iterrows() if r.get("status") == "done"]
    return Comparison("", {}, plan.variant or plan.label, REFERENCE, metric, "ratio" if d.scale == "log" else
                      "diff", summarize(values), Summary(), d, m, family, stats=stats)


def _family_notes(shown: list[Delta], found: list[Comparison | None], families: Families, metric: str,
                  stats: Stats) -> list[str]:
    """The method line under a delta column: the grid's family its rows read, and the family of the rows
    that are not one of the grid's comparisons (their own, corrected in this table)."""
    fam = families.of(metric)
    in_grid = [d for d, c in zip(shown, found, strict=True) if c is not None]
    own = [d for d, c in zip(shown, found, strict=True) if c is None and d.p is not None]
    notes = []
    if in_grid and fam is not None:
        notes.append(method_note(in_grid, stats, family=fam.text))
    if own:
        what = "Δ of the rows that are not one of the grid's comparisons"
        notes.append(method_note(own, stats, what=what, family=family_text(stats, family_size(own),
                                                                            "of those rows in this table")))
    return notes


def _found(families: Families, metric: str, plan: RowPlan, refs: list[RowPlan],
           runs: pd.DataFrame) -> Comparison | None:
    """The grid family's comparison that a row's delta is (the same runs paired), or None."""
    if plan.is_reference or not len(plan.runs):
        return None
    ref_variants = {v for r in refs for v in r.variants}
    if ref_variants != {families.reference}:
        return None
    return families.read(metric, plan.runs, runs[runs["variant"].isin(ref_variants)])


def _not_in_paper(runs: pd.DataFrame, plans: list[RowPlan]) -> list[str]:
    """A note naming the grid's arms that no row of the table shows (a plugin arm, an arm of another
    table)."""
    shown = {v for p in plans for v in p.variants}
    left = sorted({str(v) for v in runs["variant"]} - shown) if len(runs) else []
    if not left:
        return []
    return [f"arms this table has no row for: {', '.join(left)} (`ablate report compare` shows every arm "
            "against the baseline)"]


def _name(plan: RowPlan, labels: Counter[str]) -> str:
    """A row's label, with its group where another row has the same label."""
    return f"{plan.label} ({plan.group})" if labels[plan.label] > 1 and plan.group else plan.label


def with_length_columns(runs: pd.DataFrame) -> Any:
    """Add ``len/<L>`` columns: per run, the mean retrieval score over the tasks measured at length L;
    likewise ``len/<L>/yarn`` from the YaRN-scaled scores (``bench/<task>@<L>/yarn``); and ``trained_len``,
    the run's final training length."""
    by_len = _by_length(runs.columns)
    runs = runs.copy()
    for (length, yarn), cols in sorted(by_len.items()):
        runs[length_measure(length, yarn).key] = runs[cols].apply(lambda s: s.astype(float)).mean(axis=1,
                                                                                                  skipna=True)
    for length, yarn in by_len:
        if yarn and length_measure(length).key not in runs:
            runs[length_measure(length).key] = float("nan")
    runs["trained_len"] = [trained_len(r) for _, r in runs.iterrows()] if len(runs) else []
    return runs


def _measured(spec: TableSpec, plans: list[RowPlan]) -> list[Measure]:
    """The table's measured columns that some of its runs have: Table 5's plain per-length scores, by length;
    the others' extra columns, PPL per set, the mean PPL, then benchmark scores (not those at a length)."""
    frames = [p.runs for p in plans if len(p.runs)]
    runs = pd.concat(frames) if frames else None
    if runs is None:
        return []
    if spec.layout == "lengths":
        lengths = sorted({length for length, _yarn in _by_length(runs.columns)})
        return [m for m in map(length_measure, lengths) if m.key in runs and runs[m.key].notna().any()]
    have = [measure(str(c)) for c in runs.columns if runs[c].notna().any()]
    ppl = sorted((m for m in have if m.family == "ppl/"), key=lambda m: m.key)
    bench = sorted((m for m in have if m.family == "bench/" and not LEN_COLUMN.match(m.key)),
                   key=lambda m: m.key)
    return [*map(Measure, spec.extra_measured), *ppl, Measure("val_ppl"), *bench]


def _by_length(columns: Any) -> dict[tuple[int, bool], list[str]]:
    """The store's per-length benchmark columns (``bench/<task>@<L>[/yarn]``) by ``(L, yarn)``."""
    by_len: dict[tuple[int, bool], list[str]] = {}
    for c in columns:
        m = LEN_COLUMN.match(str(c))
        if m:
            by_len.setdefault((int(m["len"]), bool(m["yarn"])), []).append(str(c))
    return by_len


def _paper_counterpart(spec: TableSpec, m: Measure, paper_cols: list[str],
                       plans: list[RowPlan]) -> str | None:
    """The paper's column beside a measured one: the same metric, the same benchmark, or (Table 5) the length
    at the same multiple of the training length."""
    if m.key == "val_ppl":
        return spec.paper_ppl
    if m.key in paper_cols:
        return m.key
    if m.family == "bench/" and m.member.lower() in paper_cols:
        return m.member.lower()
    if m.family == LEN and spec.paper_trained_len and m.length is not None:  # a len/ measure has its length
        trained = _trained_len(plans)
        for c in paper_cols:
            length = paper_length(c)
            if trained and length is not None and length / spec.paper_trained_len == m.length / trained:
                return c
    return None


def _trained_len(plans: list[RowPlan]) -> int | None:
    lengths = [
        n for p in plans if len(p.runs) and "trained_len" in p.runs for n in p.runs["trained_len"] if n
    ]
    return Counter(lengths).most_common(1)[0][0] if lengths else None


def _label(spec: TableSpec, m: Measure, trained: int | None = None) -> str:
    if m.key == "val_ppl":
        return spec.ppl_label
    if m.family == "ppl/":
        return f"PPL {m.member}"
    if m.family == "bench/":
        return BENCH_NAMES.get(m.member.lower(), m.member)
    if m.family == LEN and m.length is not None:  # and its multiple of the training length, as the paper's
        return f"{fmt_len(m.length)} ({m.length / trained:g}x)" if trained else fmt_len(m.length)
    return LABELS.get(m.key, m.key)


def _columns(spec: TableSpec, prows: list[dict[str, str]], measured: list[Measure], paper: bool,
             plans: list[RowPlan]) -> list[Column]:
    paper_cols = [c for c in prows[0] if c not in _NOT_MEASURED]
    cols: list[Column] = []
    used: set[str] = set()
    for key in spec.descriptors:
        cols.append(Column(key, LABELS[key], "descriptor"))
        if paper and key in ("added_params", "max_lr"):
            unit = ", M" if key == "added_params" else ""  # the paper counts added parameters in millions
            cols.append(Column.of_paper(PAPER_DESCRIPTOR[key], f"{LABELS[key]} (paper{unit})"))
    trained = _trained_len(plans) if spec.layout == "lengths" else None
    for m in measured:
        cols.append(Column.measured(m.key, _label(spec, m, trained)))
        twin = _paper_counterpart(spec, m, paper_cols, plans)
        if paper and twin and twin not in used:
            used.add(twin)
            plabel = paper_label(twin) if paper_length(twin) is not None else _label(spec, m)
            cols.append(Column.of_paper(twin, f"{plabel} (paper)"))
    if paper:
        for c in paper_cols:
            if c not in used:
                cols.append(Column.of_paper(c, f"{paper_label(c)} (paper)"))
    if spec.primary and any(p.is_reference for p in plans):
        label = _label(spec, measure(spec.primary))
        cols.append(Column.delta(spec.primary, f"Δ {label} vs baseline [95% CI]"))
    return cols


def _usual_n(plans: list[RowPlan]) -> int:
    counts = Counter(len(p.runs) for p in plans if len(p.runs))
    return max(counts, key=lambda n: (counts[n], n)) if counts else 0


def _cell(spec: TableSpec, col: Column, plan: RowPlan, refs: list[RowPlan], runs: pd.DataFrame,
          catalogue: Mapping[str, VariantInfo], added_params: Callable[[str], int | None] | None,
          usual_n: int) -> Cell:
    if col.kind == "paper":
        text = (plan.paper or {}).get(col.paper or "", "")
        return Cell(text, paper_number(text))
    if col.kind == "descriptor":
        return _descriptor(col.key, plan, catalogue, added_params)
    assert col.metric is not None
    values, div = [], 0
    for _, r in plan.runs.iterrows():
        if r.get("status") == "diverged":
            div += 1
        else:
            values.append(cell_value(r, col.metric))
    if not values and not div:
        return Cell()
    if values and all(v is None for v in values) and not div:
        return Cell()
    return summary_cell(summarize(values, diverged=div), digits(col.metric), usual_n)


def _descriptor(key: str, plan: RowPlan, catalogue: Mapping[str, VariantInfo],
                added_params: Callable[[str], int | None] | None) -> Cell:
    info = catalogue.get(plan.variant) if plan.variant else None
    if key in ("act_func", "score_shape"):
        text = (getattr(info, key, None) if info else None) or (plan.paper or {}).get(key, "") or ""
        return Cell(text, text)
    if key == "max_lr":
        return Cell(fmt_lr(plan.lr), plan.lr)
    # added_params: measured at the grid's scale by the runs; computed from the catalogue for an empty row.
    n = None
    if len(plan.runs) and "added_params" in plan.runs and plan.runs["added_params"].notna().any():
        n = float(plan.runs["added_params"].dropna().median())
    elif plan.variant and added_params is not None:
        n = added_params(plan.variant)
    return Cell(fmt_count(n), n)


def _delta(metric: str, plan: RowPlan, refs: list[RowPlan], runs: pd.DataFrame, stats: Stats,
           decisions: Sequence[Decision]) -> Delta:
    """The paired delta of a row to the table's reference rows (empty for a reference row, a row with no
    runs)."""
    if plan.is_reference or not len(plan.runs):
        return Delta(None, None, None, 0)
    ref_variants = {v for r in refs for v in r.variants}
    reference = runs[runs["variant"].isin(ref_variants)] if len(runs) else runs
    return paired(plan.runs, reference, metric, stats=stats, decisions=decisions)
