"""DataFrames as what the CLI prints: JSON records (NaN -> null), CSV, markdown, and the columns a terminal
table shows. Pure functions (but ``write_csv``, which reads the store it is given); the CLI owns printing.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from datetime import datetime
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any

from ablate.errors import UserInputError, did_you_mean
from ablate.store.queries import IDENTITY, result_columns
from ablate.store.where import describe

if TYPE_CHECKING:
    import pandas as pd

    from ablate.store.api import Store


def _cell(value: Any) -> Any:
    """A JSON-safe Python value: NaN/NA/NaT -> None, numpy scalars -> Python, timestamps -> ISO text."""
    import pandas as pd

    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, pd.Timestamp):
        return value.isoformat()
    if hasattr(value, "item") and not isinstance(value, (list, dict)):  # numpy scalar
        value = value.item()
        return None if isinstance(value, float) and math.isnan(value) else value
    return value


def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """The frame as a list of JSON-ready dicts, one per row."""
    cols = list(frame.columns)
    return [{c: _cell(v) for c, v in zip(cols, row, strict=True)} for row in frame.itertuples(index=False)]


def to_json(frame: pd.DataFrame) -> str:
    """The frame as a JSON list of objects (NaN -> null; '/' in column names kept as is)."""
    return json.dumps(records(frame), indent=1, default=str)


def summary_columns(frame: pd.DataFrame, axes: Sequence[str] = ()) -> list[str]:
    """The ``ablate runs`` columns a table shows: who the run is (its grid's other ``axes`` after its
    variant), its summary metrics (ablate.metrics, in their declared order) and its error, without the other
    config fields and without all-empty columns."""
    metrics = result_columns(frame)
    head = [c for c in IDENTITY if c != "seed"]
    varied = [a for a in axes if a not in IDENTITY]
    wanted = [*head[:head.index("variant") + 1], *varied, "seed", *head[head.index("variant") + 1:]]
    wanted = [c for c in [*wanted, *metrics, "error"] if c in frame.columns]
    return [c for c in wanted if c in ("run_id", "status") or frame[c].notna().any()]


def in_grid_order(frame: pd.DataFrame, axes: Sequence[str] = ()) -> pd.DataFrame:
    """The runs in their grid's order: by grid, variant, the grid's other ``axes`` (in that order), seed, then
    run id (the store returns them by run id, a hash). Numbers sort as numbers, and a missing value last.

    >>> import pandas as pd
    >>> frame = pd.DataFrame({"run_id": ["c", "a", "b"], "variant": ["g1", "base", "g1"], "seed": [1, 0, 0]})
    >>> list(in_grid_order(frame)["run_id"])
    ['a', 'b', 'c']
    """
    keys = [c for c in ("grid", "variant", *(a for a in axes if a not in IDENTITY), "seed", "run_id")
            if c in frame.columns]
    columns = [[_order(v) for v in frame[c].tolist()] for c in keys]
    order = sorted(range(len(frame)), key=lambda i: tuple(col[i] for col in columns))
    return frame.iloc[order].reset_index(drop=True)


def _order(value: Any) -> tuple[int, float, str]:
    """A sort key for a cell of any type: numbers first (by value), then text, then missing."""
    value = _cell(value)
    if value is None:
        return (2, 0.0, "")
    if isinstance(value, int | float):
        return (0, float(value), "")
    return (1, 0.0, str(value))


def pick_columns(frame: pd.DataFrame, names: Sequence[str]) -> list[str]:
    """``ablate runs --columns``: the columns named, in that order (each name may be a glob: ``ppl/*``,
    ``train.*``); a UserInputError names one that matches nothing, with a near match.

    >>> import pandas as pd
    >>> frame = pd.DataFrame(columns=["run_id", "ppl/code", "ppl/prose", "train.lr"])
    >>> pick_columns(frame, ["run_id", "ppl/*"])
    ['run_id', 'ppl/code', 'ppl/prose']
    """
    return pick_names(list(frame.columns), names)


def pick_names(known: Sequence[str], names: Sequence[str]) -> list[str]:
    """``pick_columns`` over the column names ``known``."""
    out: list[str] = []
    for name in names:
        found = [c for c in known if fnmatchcase(c, name)]
        if not found:
            raise UserInputError(f"--columns: unknown column {name!r}{did_you_mean(name, known)}; known "
                                 f"columns: {describe(known)}")
        out += [c for c in found if c not in out]
    return out


def text(value: Any) -> str:
    """A cell as short text: 4 significant digits for floats, '-' for missing."""
    value = _cell(value)
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def to_markdown(frame: pd.DataFrame) -> str:
    """A GitHub-flavoured markdown table of the frame."""
    cols = list(frame.columns)
    lines = ["| " + " | ".join(cols) + " |", "| " + " | ".join("---" for _ in cols) + " |"]
    for row in frame.itertuples(index=False):
        lines.append("| " + " | ".join(text(v).replace("|", "\\|") for v in row) + " |")
    return "\n".join(lines)


# ------------------------------------------------------------ CSV without pandas
def write_csv(store: Store, *, grid: str | None = None, columns: Sequence[str] | None = None) -> str:
    """``ablate runs --format csv`` (without ``--where``): the runs table's every column, or ``columns``
    (``pick_columns``' names and globs), as CSV: what the frame's ``to_csv(index=False)`` writes, written from
    ``store.runs_records`` (``runs_csv``), or from the frame where that cannot promise the same bytes."""
    names, rows, dtypes = store.runs_records(grid=grid)
    cols = pick_names(names, columns) if columns is not None else names
    if cols != names:
        at = [names.index(c) for c in cols]
        rows = [[r[i] for i in at] for r in rows]
    text = runs_csv(cols, rows, dtypes) if cols else None  # no column at all: as pandas writes that
    if text is None:
        text = store.runs_frame(grid=grid)[cols].to_csv(index=False)
    return text



INT64 = (-(2**63), 2**63 - 1)
_NONE = type(None)


class _Unsure(Exception):
    """A column holds a value whose spelling in pandas' CSV ``to_csv`` does not promise (``runs_csv`` ->
    None)."""


def runs_csv(columns: Sequence[str], rows: Sequence[Sequence[Any]], dtypes: dict[str, str]) -> str | None:
    """The CSV that ``runs_frame(...).to_csv(index=False)`` writes, from ``queries.runs_records``' plain rows,
    without building the frame (at 10,000 runs pandas' import, type inference and writer cost more than the
    read): each column is spelled as pandas spells the dtype it would give it (``dtypes`` for the typed ones,
    else inferred as pandas infers). None when a column holds a value this does not know pandas' spelling of
    (a timezone, an integer past int64, a mix of dates and other values): the caller then writes the frame."""
    import csv
    import io

    by_column = list(zip(*rows, strict=True)) if rows else [() for _ in columns]
    try:
        cells = [_column(col, dtypes.get(name)) for name, col in zip(columns, by_column, strict=True)]
    except _Unsure:
        return None
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")  # as pandas: QUOTE_MINIMAL, '"' doubled
    writer.writerow(columns)
    writer.writerows(zip(*cells, strict=True))
    return out.getvalue()


def _column(col: tuple[Any, ...], dtype: str | None) -> Sequence[str]:
    """One column's cells as pandas writes them: NA (None, NaN) as ''; integers as they are; float64 (a typed
    float column, or numbers with a float or an NA among them) as numpy's shortest repr, Python's ``repr``;
    text as it is; bool and a mix of kinds (object) as ``str`` of each; naive datetimes as ``_dates``."""
    kinds = set(map(type, col))
    na = _NONE in kinds
    kinds.discard(_NONE)
    if float in kinds and _has_nan(col):  # NaN is NA, as None is
        col = tuple(None if type(v) is float and v != v else v for v in col)
        na = True
    if not kinds <= {int, float, bool, str, datetime}:
        raise _Unsure
    if int in kinds:
        ints = col if kinds == {int} and not na else [v for v in col if type(v) is int]
        if min(ints) < INT64[0] or max(ints) > INT64[1]:
            raise _Unsure
    if dtype is not None:  # seed, heartbeat_step, the declared metrics: "Int64" or "float64"
        if not kinds <= {int, float}:
            raise _Unsure
        if dtype == "Int64" and all(
            v.is_integer() and INT64[0] <= v <= INT64[1] for v in col if type(v) is float
        ):
            return _spelled(col, lambda v: str(int(v)), na)
        # an Int64 that cannot be stays float64
        return _spelled(col, repr if kinds == {float} else _float, na)
    if not kinds:
        return [""] * len(col)
    if kinds <= {int, float}:  # int64, else float64
        return _spelled(col, str if kinds == {int} and not na else repr if kinds == {float} else _float, na)
    if kinds == {datetime}:
        return _dates(col)
    if datetime in kinds:
        raise _Unsure
    if kinds == {str}:
        return _spelled(col, str, na) if na else col
    return _spelled(col, str, na)  # bool, or a mix of kinds (object): str() of each


def _float(value: Any) -> str:
    return repr(float(value))


def _spelled(col: Sequence[Any], spell: Any, na: bool) -> list[str]:
    """Each cell of ``col`` spelled by ``spell``, NA ('' for None) where ``na``."""
    if not na:
        return list(map(spell, col))
    return [spell(v) if v is not None else "" for v in col]


def _has_nan(col: Sequence[Any]) -> bool:
    """Whether a float in ``col`` is NaN (fsum is NaN if one is; where it cannot say, each is looked at)."""
    floats = [v for v in col if type(v) is float]
    try:
        if not math.isnan(math.fsum(floats)):
            return False
    except (OverflowError, ValueError):  # a sum past the largest float; inf - inf
        pass
    return any(v != v for v in floats)


def _dates(col: tuple[Any, ...]) -> list[str]:
    """Naive datetimes as pandas writes a datetime64 column: dates alone when every one is at midnight, else
    to the finest resolution any one needs (seconds, milliseconds or microseconds)."""
    present = [v for v in col if v is not None]
    if any(v.tzinfo is not None for v in present):
        raise _Unsure
    if all(not (v.hour or v.minute or v.second or v.microsecond) for v in present):
        return [v.date().isoformat() if v is not None else "" for v in col]
    spec = ("microseconds" if any(v.microsecond % 1000 for v in present) else
            "milliseconds" if any(v.microsecond for v in present) else "seconds")
    return [v.isoformat(sep=" ", timespec=spec) if v is not None else "" for v in col]
