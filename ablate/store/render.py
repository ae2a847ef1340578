"""DataFrames as what the CLI prints: JSON records (NaN -> null), CSV, markdown, and the columns a terminal
table shows. Pure functions; the CLI owns printing.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ablate.metrics import metric
from ablate.metrics import order as summary_order
from ablate.store.queries import IDENTITY

if TYPE_CHECKING:
    import pandas as pd


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


def summary_columns(frame: pd.DataFrame) -> list[str]:
    """The ``ablate runs`` columns a terminal shows: who the run is, its summary metrics (ablate.metrics, in
    their declared order) and its error, without config fields and without all-empty columns."""
    metrics = [c for c in summary_order(list(frame.columns)) if metric(c) is not None]
    wanted = [c for c in [*IDENTITY, *metrics, "error"] if c in frame.columns]
    return [c for c in wanted if c in ("run_id", "status") or frame[c].notna().any()]


def pick_columns(frame: pd.DataFrame, names: Sequence[str]) -> list[str]:
    """``ablate runs --columns``: the columns named, in that order (each name may be a glob: ``ppl/*``,
    ``train.*``); a UserInputError names one that matches nothing, with a near match.

    >>> import pandas as pd
    >>> frame = pd.DataFrame(columns=["run_id", "ppl/code", "ppl/prose", "train.lr"])
    >>> pick_columns(frame, ["run_id", "ppl/*"])
    ['run_id', 'ppl/code', 'ppl/prose']
    """
    from fnmatch import fnmatchcase

    from ablate.errors import UserInputError, did_you_mean
    from ablate.store.where import describe

    known = list(frame.columns)
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
