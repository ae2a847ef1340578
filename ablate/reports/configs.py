"""A report shows one configuration of a grid, and never picks it silently.

A grid may hold runs at several configurations of a field it does not vary on purpose: smoke runs at
``train.steps=30`` beside real ones at ``train.steps=120`` (the grid was run with ``--set``, or edited). A
*configuration field* is a config field whose value differs between runs that have the same axis values (the
grid's axes are what it varies on purpose; a field that follows the axes, such as an FFN width re-matched per
variant or a ladder rung's steps, is not one). The report keeps the configuration with the most finished runs,
then the one that finished last, and says in one line what it left out and how to choose another
(``--where``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ablate.result import RESULT_STATUSES

if TYPE_CHECKING:
    import pandas as pd

_IDENTITY = ("variant", "seed")
_PREFIXES = ("model.", "data.", "train.", "eval.")


def _value(v: Any) -> Any:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    return v.item() if hasattr(v, "item") else v


def finish_times(runs: pd.DataFrame) -> list[str]:
    """Each run's finish time as sortable ISO text ("" when it has none)."""
    if "finished" not in runs:
        return [""] * len(runs)
    return ["" if _value(v) is None or str(v) == "NaT" else str(v) for v in runs["finished"]]


def configuration_fields(runs: pd.DataFrame, axes: Iterable[str]) -> list[str]:
    """The config fields whose value differs between runs with the same axis values (see the module
    docstring)."""
    axes = [a for a in axes if a in runs.columns and a not in _IDENTITY]
    by = [*_IDENTITY, *axes]
    fields = []
    candidates = [c for c in runs.columns if str(c).startswith(_PREFIXES) or c == "stages"]
    key = (
        [tuple(_value(v) for v in row) for row in runs[by].itertuples(index=False)]
        if by
        else [()] * len(runs)
    )
    for c in candidates:
        if c in axes:
            continue
        seen: dict[tuple[object, ...], Any] = {}
        for k, v in zip(key, runs[c], strict=True):
            v = _value(v)
            if k in seen and seen[k] != v:
                fields.append(c)
                break
            seen.setdefault(k, v)
    return fields


def one_configuration(runs: pd.DataFrame, axes: Iterable[str], *, grid: str = "") -> tuple[Any, str | None]:
    """``runs`` restricted to one configuration (most finished runs, then the latest finished), and the line
    that says what was left out (None when the grid has one configuration)."""
    if not len(runs):
        return runs, None
    fields = configuration_fields(runs, axes)
    if not fields:
        return runs, None
    keys = [tuple(_value(v) for v in row) for row in runs[fields].itertuples(index=False)]
    finished = runs["status"].isin(RESULT_STATUSES).tolist()
    latest = finish_times(runs)
    score: dict[tuple[object, ...], tuple[int, str]] = {}
    for k, done, when in zip(keys, finished, latest, strict=True):
        n, last = score.get(k, (0, ""))
        score[k] = (n + int(done), max(last, when if done else ""))
    best = max(score, key=lambda k: (*score[k], repr(k)))
    keep = [k == best for k in keys]
    others = sorted((k for k in score if k != best), key=lambda k: (-score[k][0], repr(k)))
    left = len(runs) - sum(keep)

    def describe(k: tuple[object, ...]) -> str:
        return ", ".join(f"{f}={v}" for f, v in zip(fields, k, strict=True))

    shown = "; ".join(f"{describe(k)} ({score[k][0]} finished)" for k in others[:3])
    more = f"; and {len(others) - 3} more" if len(others) > 3 else ""
    f0, v0 = fields[0], others[0][0]
    hint = f"{f0} == {v0!r}" if isinstance(v0, str) else f"{f0} == {v0}"
    line = (f"report{f' of grid {grid}' if grid else ''}: {left} run(s) at other configurations left out "
            f"({shown}{more}); showing {describe(best)} ({score[best][0]} finished, the most"
            f"{', then the latest' if sum(1 for k in score if score[k][0] == score[best][0]) > 1 else ''}); "
            f"choose with --where, e.g. --where \"{hint}\"")
    return runs.loc[keep].reset_index(drop=True), line
