"""Alembic migrations, configured in code (no alembic.ini): the scripts ship inside the package.

``upgrade(engine)`` brings a database to the newest schema; ``Store.open`` calls it, so does ``ablate db
upgrade``. Several processes opening one store at once is safe: on PostgreSQL the upgrade holds an advisory
lock, on SQLite the ``BEGIN IMMEDIATE`` write lock, and each process reads the current revision under it (a
new SQLite store is made under a file lock beside it: ``Store.open``).

A new schema change: edit ``schema.py``, then add ``migrations/versions/NNNN_<what>.py`` (``down_revision`` =
the previous one); ``tests/unit/store/test_store_migrations.py`` checks the migrated schema equals
``schema.py``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from ablate.errors import StoreError

if TYPE_CHECKING:
    from alembic.config import Config
    from sqlalchemy import Connection, Engine

log = logging.getLogger(__name__)

SCRIPTS = Path(__file__).parent / "migrations"
_PG_LOCK = 0x61626C61  # "abla": the advisory lock id held while migrating


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic Config pointing at the packaged scripts, optionally bound to an open connection."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(SCRIPTS))
    cfg.attributes["connection"] = connection
    return cfg


@cache
def head_revision() -> str:
    """The newest revision the packaged scripts define."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


@cache
def packaged_head() -> str:
    """``head_revision()`` read from the scripts' ``revision`` / ``down_revision`` lines, without importing
    alembic (a tenth of a second of every command that opens a store, which almost never migrates); alembic's
    own answer when the lines do not make one chain."""
    revisions, parents = set(), set()
    for path in (SCRIPTS / "versions").glob("*.py"):
        if path.name == "__init__.py":
            continue
        text = path.read_text()
        rev = re.search(r'^revision\b[^=]*=\s*"([^"]+)"\s*$', text, re.M)
        down = re.search(r'^down_revision\b[^=]*=\s*(?:"([^"]+)"|None)\s*$', text, re.M)
        if rev is None or down is None:
            return head_revision()
        revisions.add(rev.group(1))
        parents.update([down.group(1)] if down.group(1) else [])
    heads = revisions - parents
    return next(iter(heads)) if len(heads) == 1 else head_revision()


def _stored_revision(engine: Engine) -> str | None:
    """The revision in the database's ``alembic_version`` table, by plain SQL; None when that cannot say."""
    from sqlalchemy.exc import DBAPIError

    # a store not there raises, as before
    with engine.execution_options(ablate_read_only=True).connect() as conn:
        try:
            rows = conn.exec_driver_sql("SELECT version_num FROM alembic_version").all()
        except DBAPIError:  # no such table (a new database): alembic decides
            return None
    return rows[0][0] if len(rows) == 1 else None


def current_revision(connection: Connection) -> str | None:
    """The revision a database is at (None for an empty one)."""
    from alembic.migration import MigrationContext

    return MigrationContext.configure(connection).get_current_revision()


def upgrade(engine: Engine, revision: str = "head") -> tuple[str | None, str]:
    """Apply migrations up to ``revision`` in one transaction; return (revision before, revision after)."""
    if revision == "head" and (stored := _stored_revision(engine)) == packaged_head():
        return stored, stored  # the usual case, told without alembic
    from alembic import command
    from alembic.util.exc import CommandError

    target = head_revision() if revision == "head" else revision
    with engine.execution_options(ablate_read_only=True).connect() as conn:  # the usual case: nothing to do
        if current_revision(conn) == target:
            return target, target
    with engine.connect() as conn, _sqlite_foreign_keys_off(conn), conn.begin():
        if conn.dialect.name == "postgresql":
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_PG_LOCK})")
        before = current_revision(conn)
        if before != target:
            try:
                command.upgrade(alembic_config(conn), revision)
            except CommandError as exc:  # e.g. a store written by a newer ablate
                raise StoreError(f"cannot migrate the store from schema revision {before} to {target}: "
                                 f"{exc}; if another ablate version made this store, use that version (or a "
                                 "newer one)"
                                 ) from None
            _check_foreign_keys(conn)
        after = current_revision(conn)
    if before != after:
        log.info("store schema upgraded from %s to %s", before or "empty", after)
    return before, after or ""


@contextmanager
def _sqlite_foreign_keys_off(conn: Connection) -> Iterator[None]:
    """On SQLite, foreign keys off while migrating (set before the transaction begins: inside one SQLite
    ignores the pragma). A batch migration recreates a table, and dropping the old ``runs`` would cascade to
    every child row (scores, curves, events) of every run. Alembic's documented way; ``_check_foreign_keys``
    then verifies the result."""
    if conn.dialect.name != "sqlite":
        yield
        return
    raw = conn.connection.dbapi_connection
    assert raw is not None
    raw.execute("PRAGMA foreign_keys = OFF")
    try:
        yield
    finally:
        raw.execute("PRAGMA foreign_keys = ON")


def _check_foreign_keys(conn: Connection) -> None:
    if conn.dialect.name == "sqlite":
        broken = conn.exec_driver_sql("PRAGMA foreign_key_check").all()
        if broken:
            raise StoreError(
                f"the migration left {len(broken)} rows pointing at missing rows (first: {broken[0]})"
            )
