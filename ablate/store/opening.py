"""Opening a store: the lock while a new SQLite store is made, the check that a store is there before one is
only read, the migrations (``upgrade_store``), and the retry of a transaction that finds the database busy.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import TypeVar

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError

from ablate.errors import NoStoreError, StoreUnavailableError
from ablate.layout import file_lock
from ablate.store.engine import display_url, home_dir, make_engine, resolve_url, sqlite_path
from ablate.store.faults import is_busy
from ablate.store.migrate import upgrade

log = logging.getLogger(__name__)
T = TypeVar("T")
RETRIES = 8


@contextmanager
def making(url: str, *, create: bool) -> Iterator[None]:
    """While a new SQLite store is made (its file absent or empty), an exclusive file lock beside it
    (``ablate.db.lock``): two processes that start together on a new home then make it one after the other
    (the second finds it made), instead of racing on its first connection, where SQLite switches it to WAL and
    makes its shared-memory file. An existing store needs none: its migrations queue on the write lock."""
    path = sqlite_path(url) if create else None
    if path is None or (path.is_file() and path.stat().st_size > 0):
        yield
        return
    with ExitStack() as stack:
        try:
            stack.enter_context(file_lock(path.with_name(path.name + ".lock")))
        except OSError as exc:  # a read-only folder (ABLATE_STORE pointing into one): nothing is made there
            raise StoreUnavailableError(
                f"cannot open the store {display_url(url)}: its folder {path.parent.absolute()} cannot be "
                f"written ({exc.strerror or exc}); point ABLATE_STORE (or --store) at a folder ablate can "
                "write") from None
        yield


def require_store(engine: Engine, url: str, *, home: str | os.PathLike[str] | None) -> None:
    """Raise NoStoreError, without creating anything, unless the database at ``url`` holds a store (its
    ``runs`` table). ``home``: the ABLATE_HOME whose default store this is (None for a URL given)."""
    path = sqlite_path(url)
    if path is not None and any(p.exists() and not p.is_dir() for p in path.parents):
        engine.dispose()
        raise StoreUnavailableError(f"cannot open the store {display_url(url)}: the store's folder "
                                    f"{path.parent} is not a directory (a file is in its way)")
    there = path is None or path.is_file()  # connecting to a SQLite file that is not there would make it
    if there:
        try:
            conn = engine.execution_options(ablate_read_only=True).connect()
        except DBAPIError as exc:  # a server that does not answer: as when a store is opened to write
            engine.dispose()
            raise StoreUnavailableError(f"cannot open the store {display_url(url)}: {reason(exc)}"
                                        f"{folder_reason(url)}") from None
        with conn:
            try:
                conn.exec_driver_sql("SELECT 1 FROM runs WHERE 1 = 0").all()
            except DBAPIError:  # no such table: an empty database
                there = False
    if not there:
        engine.dispose()
        if home is not None:
            where = f"here (ABLATE_HOME={home_dir(home).absolute()}; --home or --store reads another)"
        else:
            where = "there (the URL of --store or ABLATE_STORE; `ablate run` makes it)"
        raise NoStoreError(f"no store at {display_url(url)}: nothing has run {where}")


def upgrade_store(url: str | None = None, *, home: str | os.PathLike[str] | None = None
                  ) -> tuple[str, str | None, str, list[str]]:
    """Apply the migrations to the store at ``url``: (url, revision before, revision after, warnings)."""
    url = resolve_url(url, home=home)
    engine, warnings = make_engine(url)
    try:
        before, after = retry(lambda: upgrade(engine))
    except DBAPIError as exc:
        raise StoreUnavailableError(f"cannot open the store {display_url(url)}: {reason(exc)}") from None
    finally:
        engine.dispose()
    return url, before, after, warnings


def retry(fn: Callable[[], T]) -> T:
    """Run a transaction, again on a lock timeout / deadlock / serialization failure (with backoff)."""
    for attempt in range(RETRIES):
        try:
            return fn()
        except DBAPIError as exc:
            if attempt == RETRIES - 1 or not is_busy(exc):
                raise
            log.info("store busy (%s); retrying", exc.orig)
            time.sleep(0.05 * 2 ** attempt)
    raise AssertionError("unreachable")


def folder_reason(url: str) -> str:
    """Why a SQLite store could not be opened, when its folder cannot be written (SQLite writes its journal
    beside the store, even to read it): ``; its folder /x cannot be written``; else ''."""
    path = sqlite_path(url)
    if path is None or not path.parent.is_dir() or os.access(path.parent, os.W_OK):
        return ""
    return (f" (its folder {path.parent.absolute()} cannot be written: SQLite keeps its journal beside the "
            "store)")


def reason(exc: DBAPIError) -> str:
    """A database error's reason on one line (the driver's message, without SQLAlchemy's SQL and links)."""
    return " ".join(str(exc.orig or exc).split())

