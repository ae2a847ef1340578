"""Engines from a URL: where the store lives, and the connection settings each backend needs.

- SQLite (the default, ``sqlite:///$ABLATE_HOME/ablate.db``): WAL journal and a busy timeout so several local
  worker processes write safely; write transactions start with ``BEGIN IMMEDIATE`` so two writers queue on the
  lock instead of failing when one upgrades a read to a write. SQLite over a network file system is unsafe
  (locks are not honoured): we warn when the path looks like one.
- PostgreSQL (``postgresql+psycopg://user@host/db``): for a team or a cluster; connections are pinged before
  use, and a process keeps one (``PG_POOL``): its threads (the live writer, the recorder) take turns on it, so
  N processes writing at once (a Ray cluster's tasks, a Slurm array's) hold N of the server's connections, not
  N x 15 (bench/store_writers.py). A server with none free is retried as busy (``faults.is_busy``).

Nothing here runs at import time; ``make_engine`` is the one factory.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from ablate.errors import StoreUnavailableError

if TYPE_CHECKING:
    import sqlite3

    from sqlalchemy import Connection, Engine
    from sqlalchemy.pool import ConnectionPoolEntry

log = logging.getLogger(__name__)

DB_FILE = "ablate.db"
BACKENDS = ("sqlite", "postgresql")
EXAMPLES = "e.g. sqlite:///runs/ablate.db or postgresql+psycopg://user@host/db"
BUSY_TIMEOUT_S = 60.0
# one connection per process, its threads waiting their turn (up to pool_timeout seconds)
PG_POOL = {"pool_size": 1, "max_overflow": 0, "pool_timeout": 120, "pool_pre_ping": True}
NETWORK_FS = ("nfs", "nfs4", "cifs", "smb3", "smbfs", "lustre", "gpfs", "beegfs", "fuse.sshfs", "ceph",
              "fuse.ceph", "glusterfs", "fuse.glusterfs", "9p", "afs", "panfs", "wekafs", "fuse.s3fs")


def home_dir(home: str | os.PathLike[str] | None = None) -> Path:
    """The ABLATE_HOME in force: the argument, else the environment, else ``./ablate-runs``."""
    return Path(home or os.environ.get("ABLATE_HOME") or "ablate-runs")


def resolve_url(url: str | None = None, *, home: str | os.PathLike[str] | None = None) -> str:
    """The store URL in force: the argument, else ``ABLATE_STORE``, else ``sqlite:///$ABLATE_HOME/ablate.db``.

    >>> resolve_url(home="/tmp/h")
    'sqlite:////tmp/h/ablate.db'
    """
    url = url or os.environ.get("ABLATE_STORE")
    if url:
        return url
    return f"sqlite:///{home_dir(home).absolute() / DB_FILE}"


def display_url(url: str) -> str:
    """The URL with any password hidden, for messages; a relative SQLite path says where it resolves.

    >>> display_url("sqlite:///runs/ablate.db").endswith("/runs/ablate.db)")
    True
    """
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        u = make_url(url)
    except ArgumentError:
        return url
    shown = u.render_as_string(hide_password=True)
    if u.get_backend_name() == "sqlite" and not u.host and u.database and u.database != ":memory:" \
            and not Path(u.database).is_absolute():
        shown += f" (here {Path(u.database).absolute()})"
    return shown


def network_fs_type(path: str | os.PathLike[str], mounts: str | None = None) -> str | None:
    """The file system type of ``path`` when it is a network one (nfs, cifs, lustre, ...), else None.

    ``mounts`` is the text of ``/proc/mounts`` (read when not given; None where there is none).
    """
    if mounts is None:
        try:
            mounts = Path("/proc/mounts").read_text()
        except OSError:
            return None
    target = os.path.realpath(path)
    best, best_type = "", ""
    for line in mounts.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        point = parts[1].replace("\\040", " ")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, best_type = point, parts[2]
    return best_type if best_type in NETWORK_FS else None


def sqlite_path(url: str) -> Path | None:
    """The database file of a SQLite URL (None for other backends and in-memory databases)."""
    from sqlalchemy.engine import make_url

    u = make_url(url)
    if u.get_backend_name() != "sqlite" or not u.database or u.database == ":memory:":
        return None
    return Path(u.database)


def check_url(url: str) -> Path | None:
    """Refuse, before anything is created, a store URL that cannot work: not a URL, a backend other than
    SQLite and PostgreSQL, an unknown or missing driver, a SQLite URL with a host (``sqlite://tmp/x.db`` is
    the relative path ``x.db`` on a host ``tmp``: the message says where each reading resolves). Returns the
    SQLite file (None for PostgreSQL and in-memory SQLite)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    shown = display_url(url)
    try:
        u = make_url(url)
        backend = u.get_backend_name()
    except ArgumentError as exc:
        raise StoreUnavailableError(f"not a database URL: {shown!r} ({exc}); {EXAMPLES}") from None
    if backend in ("postgres", "pgsql", "psql"):  # libpq's and Heroku's spelling: SQLAlchemy has no alias
        fixed = display_url(u.set(drivername="postgresql+psycopg").render_as_string(hide_password=False))
        raise StoreUnavailableError(f"unsupported store {shown!r}: write {fixed} (SQLAlchemy's name for "
                                    "PostgreSQL, with the psycopg driver ablate installs)")
    if backend not in BACKENDS:
        raise StoreUnavailableError(f"unsupported store {shown!r}: ablate's store runs on "
                                    f"{' and '.join(BACKENDS)}; {EXAMPLES}")
    if backend == "sqlite" and (u.host or u.port or u.username):
        rel = Path(u.database or "")
        raise StoreUnavailableError(
            f"{shown!r} is not a SQLite file: a SQLite URL has no host, and this one names {u.host!r}; for "
            f"the relative path {rel} (here {rel.absolute()}) write sqlite:///{rel}, for the absolute path "
            f"/{u.host}/{rel} write sqlite:////{u.host}/{rel}")
    try:
        dialect = u.get_dialect()
    except NoSuchModuleError:
        raise StoreUnavailableError(f"unknown database driver {u.get_driver_name()!r} in {shown!r}; "
                                    f"{EXAMPLES}") from None
    try:
        dialect.import_dbapi()
    except ImportError as exc:  # the dialect is known but its driver is not installed
        raise StoreUnavailableError(f"the store {shown!r} needs the database driver {exc.name or exc}, which "
                                    f"is not installed; {EXAMPLES}") from None
    return sqlite_path(url)


def make_engine(url: str, *, create: bool = True) -> tuple[Engine, list[str]]:
    """An Engine for ``url`` with the backend's settings, and the warnings the user should see about it.
    ``create``: make a SQLite file's folder (a store that is only read is never made)."""
    from sqlalchemy import create_engine
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    warnings: list[str] = []
    path = check_url(url)
    if path is not None and create:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreUnavailableError(f"cannot create the store's folder {path.parent.absolute()}: "
                                        f"{exc.strerror or exc}") from None
        fs = network_fs_type(path.parent)
        if fs:
            msg = (f"the store {path} is on a network file system ({fs}): SQLite's locking is not safe "
                   "there; use a local path or a PostgreSQL URL (--store postgresql+psycopg://...)")
            log.warning(msg)
            warnings.append(msg)
    try:
        if url.startswith("sqlite"):
            engine = create_engine(url, connect_args={"timeout": BUSY_TIMEOUT_S})
            _sqlite_settings(engine)
        else:
            engine = create_engine(url, **PG_POOL)
    except (ArgumentError, NoSuchModuleError) as exc:
        raise StoreUnavailableError(f"cannot use store URL {display_url(url)!r}: {exc}") from None
    except ImportError as exc:  # the dialect is known but its driver is not installed
        raise StoreUnavailableError(f"the store {display_url(url)!r} needs the database driver "
                                    f"{exc.name or exc}, which is not installed; {EXAMPLES}") from None
    return engine, warnings


def _sqlite_settings(engine: Engine) -> None:
    from sqlalchemy import event

    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn: sqlite3.Connection, _record: ConnectionPoolEntry) -> None:
        dbapi_conn.isolation_level = None  # we emit BEGIN ourselves (below)
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        cur.execute("PRAGMA journal_mode = WAL")
        cur.execute("PRAGMA synchronous = NORMAL")
        cur.execute("PRAGMA foreign_keys = ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        # Reads take a snapshot (deferred); writes take the write lock up front, so a writer waits in the
        # busy handler instead of failing with SQLITE_BUSY when its snapshot went stale.
        read_only = conn.get_execution_options().get("ablate_read_only", False)
        conn.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")
