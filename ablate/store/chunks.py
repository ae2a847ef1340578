"""Reading rows by run id in chunks: an ``IN (...)`` list of at most ``IN_CHUNK`` ids per statement, so a
grid of any size stays under the databases' limits on bound parameters (SQLite's 32,766, PostgreSQL's
65,535) and each statement stays small. The store's readers and writers both ask through it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session

IN_CHUNK = 500  # run ids per IN (...) list


def in_chunks(session: Session, query: Any, column: Any, run_ids: Sequence[str] | None) -> list[Any]:
    """The rows of ``query`` whose ``column`` is one of ``run_ids`` (every row for None), asked ``IN_CHUNK``
    ids at a time."""
    if run_ids is None:
        return list(session.execute(query))
    ids = list(dict.fromkeys(run_ids))
    rows: list[Any] = []
    for i in range(0, len(ids), IN_CHUNK):
        rows.extend(session.execute(query.where(column.in_(ids[i:i + IN_CHUNK]))))
    return rows
