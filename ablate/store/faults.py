"""What a database error means: the store is busy (retry the transaction), or it went away
(``StoreUnavailable``).

The store's face (``ablate.store.api``) retries a busy one itself and raises every other way of being away as
one typed ``StoreUnavailable`` (``translated``); what a command does then (keep the writes, wait, give up) is
``ablate.execute.recorder``'s. Optuna's storage, which keeps the studies in the same database, raises its own
errors ``from`` the driver's: ``unavailable`` reads those too.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from contextlib import contextmanager

from ablate.errors import StoreError, StoreUnavailable

SQLITE_FULL, PG_DISK_FULL = 13, "53100"  # SQLite's result code and PostgreSQL's SQLSTATE for a full disk
# serialization failure, deadlock, lock not available; a server whose connections are all taken (many writers
# at once: a Ray cluster's or a Slurm array's tasks) has one free again when one of them ends its write
BUSY_SQLSTATES = ("40001", "40P01", "55P03", "53300")


def _chain(exc: BaseException, *, context: bool = False) -> Iterator[BaseException]:
    """``exc`` and what it was raised from (with ``context``: or raised while handling), each once."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        yield cause
        cause = cause.__cause__ or (cause.__context__ if context else None)


def is_away(exc: BaseException) -> bool:
    """Whether a database error means the database cannot be reached or written now (as opposed to a bad
    request): a lost connection, a server that is down, a read-only or full disk. An error raised ``from`` one
    (Optuna's storage wraps them in its own) is one too."""
    from sqlalchemy.exc import DisconnectionError, InterfaceError, OperationalError

    return any(isinstance(e, (StoreUnavailable, OperationalError, InterfaceError, DisconnectionError))
               for e in _chain(exc))


def is_full(exc: BaseException) -> bool:
    """Whether a store error means its disk is full (not that it cannot be reached): SQLite's "database or
    disk is full", PostgreSQL's disk_full (SQLSTATE 53100), or ENOSPC, in the error or what it was raised
    from."""
    for cause in _chain(exc, context=True):
        for e in (cause, getattr(cause, "orig", None)):
            if e is None:
                continue
            sqlite, pg, os_error = (getattr(e, k, None) for k in ("sqlite_errorcode", "sqlstate", "errno"))
            if sqlite == SQLITE_FULL or pg == PG_DISK_FULL or os_error == errno.ENOSPC:
                return True
            if "No space left on device" in str(e):
                return True
    return False


def first_line(exc: BaseException) -> str:
    """An error's reason in one line: the database driver's own first line (``database or disk is full``) when
    a database error is behind it, else the error's first line."""
    if isinstance(exc, StoreUnavailable):
        return exc.reason
    for cause in _chain(exc, context=True):
        orig = getattr(cause, "orig", None)
        if orig is not None:
            return (str(orig).strip().splitlines() or [type(orig).__name__])[0]
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def unavailable(exc: BaseException, where: str) -> StoreUnavailable | None:
    """``exc`` as the ``StoreUnavailable`` it means (the store at ``where`` went away), or None for any other
    error."""
    if isinstance(exc, StoreUnavailable):
        return exc
    if not is_away(exc):
        return None
    return StoreUnavailable(where, full=is_full(exc), reason=first_line(exc))


@contextmanager
def translated(where: str) -> Iterator[None]:
    """Raise a database error that means the store went away as ``StoreUnavailable`` (``from`` it); any other
    error as it is."""
    try:
        yield
    except StoreError:
        raise
    except Exception as exc:
        away = unavailable(exc, where)
        if away is None:
            raise
        raise away from exc


def is_busy(exc: BaseException) -> bool:
    """Whether a database error is a lock timeout, deadlock or serialization failure, or a server with no
    connection free: the same transaction, run again, may well go through."""
    orig = getattr(exc, "orig", None)
    if getattr(orig, "sqlstate", None) in BUSY_SQLSTATES:
        return True
    text = str(orig).lower()
    return any(t in text for t in ("database is locked", "database table is locked", "too many clients"))
