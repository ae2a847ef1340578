"""Shared fixtures: a fresh results store per test on SQLite and on PostgreSQL, a temporary ABLATE_HOME, and a
real one-node Slurm cluster for the session (``slurm_cluster``: scripts/slurm.sh).

PostgreSQL: the server at ``ABLATE_TEST_PG_URL`` (scripts/test.sh starts one with scripts/postgres.sh); when
that is unset, one session-wide throwaway server is started here with the same script (on a free port) and
stopped by PID at the end, so plain ``pytest`` works too. Each test gets its own new schema on it (the URL
sets ``search_path``), which to the store is a new, empty database. If no
server can be started (no PostgreSQL and no way to install it), the postgres cases are skipped with the
reason; with ``ABLATE_TEST_PG_URL`` set they never are. ``own_postgres`` is a server of one test's own, for
the tests that stop and restart it.

The caller's environment is set or cleared here, once, before any test: ``isolate_environment``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# What a researcher's shell may hold that would reach the tests (and the workers, Slurm tasks and subprocesses
# they start, which inherit os.environ): their own store, home, caches and tracking server, a Ray cluster, a
# Slurm allocation, a launcher's ranks, thread settings. The suite relies on none of them.
CLEARED = ("RAY_ADDRESS", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK",
           "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID", "OPENBLAS_NUM_THREADS",
           "CUDA_LAUNCH_BLOCKING")
CLEARED_PREFIXES = ("ABLATE_", "MLFLOW_", "RAY_", "SLURM_", "SBATCH_", "SRUN_", "SALLOC_", "OMP_", "GOMP_",
                    "KMP_", "MKL_", "PL_")
KEPT = ("ABLATE_TEST_",)  # the suite's own: ABLATE_TEST_PG_URL, a PostgreSQL server to test against
# ... and what it relies on: nothing is downloaded (Hugging Face's hub and datasets read the local cache only)
SET = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def isolate_environment(environ: dict[str, str] | os._Environ[str]) -> list[str]:
    """Clear from ``environ`` what the suite must not inherit and set what it relies on; the names cleared."""
    cleared = sorted(k for k in environ
                     if not k.startswith(KEPT) and (k in CLEARED or k.startswith(CLEARED_PREFIXES)))
    for key in cleared:
        del environ[key]
    environ.update(SET)
    return cleared


isolate_environment(os.environ)  # at import: before any test, fixture or doctest of this session

# tests/fixtures/ holds what tests read: stores made by older code, and training scripts the tests run as
# subprocesses the way ablate runs a user's script; pytest neither collects nor imports them (a conftest of
# their own there would shadow this one's name: test modules import it as `conftest`)
collect_ignore_glob = ["fixtures/*"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (scripts/test.sh runs ``-n 2 --dist loadgroup``), one worker runs a whole module,
    so its module-wide fixtures (trained grids, a Ray cluster) are built once; the Slurm modules share one
    worker, so the session starts one Slurm cluster. Without xdist the mark is inert."""
    for item in items:
        module = item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group("slurm" if "slurm" in Path(module).stem else module))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def pg_server_url() -> Iterator[str]:
    """A SQLAlchemy URL of a PostgreSQL server's maintenance database (given, or started for this session)."""
    given = os.environ.get("ABLATE_TEST_PG_URL")
    if given:
        yield given
        return
    # not under pytest's tmp dirs: their parents are private to root, and the server runs as `postgres`
    pgdir = tempfile.mkdtemp(prefix="ablate-pg-")
    env = {**os.environ, "ABLATE_PG_PORT": str(_free_port())}
    script = str(ROOT / "scripts" / "postgres.sh")
    try:
        proc = subprocess.run([script, "start", pgdir], env=env, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        proc = None
        reason = str(exc)
    else:
        reason = (proc.stderr or proc.stdout).strip()[-500:]
    if proc is None or proc.returncode != 0:
        subprocess.run([script, "stop", pgdir], env=env, capture_output=True)
        shutil.rmtree(pgdir, ignore_errors=True)
        pytest.skip(f"no PostgreSQL server could be started (set ABLATE_TEST_PG_URL): {reason}")
    try:
        yield proc.stdout.strip().splitlines()[-1]
    finally:
        subprocess.run([script, "stop", pgdir], env=env, capture_output=True)
        shutil.rmtree(pgdir, ignore_errors=True)


@pytest.fixture
def own_postgres(tmp_path):
    """A PostgreSQL server of this test's own (it stops and restarts it): ``(url, stop, start)``."""
    script = str(ROOT / "scripts" / "postgres.sh")
    # not under pytest's tmp: the server runs as `postgres`
    pgdir = tempfile.mkdtemp(prefix="ablate-pg-away-")
    env = {**os.environ, "ABLATE_PG_PORT": str(_free_port())}

    def start() -> str:
        out = subprocess.run([script, "start", pgdir], env=env, capture_output=True, text=True, timeout=600)
        if out.returncode != 0:
            pytest.skip(f"no PostgreSQL server could be started: {out.stderr[-300:]}")
        return out.stdout.strip().splitlines()[-1]

    def stop() -> None:
        subprocess.run([script, "stop", pgdir], env=env, capture_output=True, timeout=120)

    try:
        yield start(), stop, start
    finally:
        stop()
        shutil.rmtree(pgdir, ignore_errors=True)


def _admin(url: str):  # noqa: ANN202 - a psycopg connection
    import psycopg
    from sqlalchemy.engine import make_url

    u = make_url(url).set(drivername="postgresql")
    return psycopg.connect(u.render_as_string(hide_password=False), autocommit=True)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URL of a new, empty database: a SQLite file in tmp_path, or a new database on the PostgreSQL
    server."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store' / 'ablate.db'}"
        return
    from sqlalchemy.engine import make_url

    server = request.getfixturevalue("pg_server_url")
    # a new schema, first on the search path, is a new empty database to the store (and ~100x faster to make
    # than CREATE DATABASE)
    name = f"ablate_test_{uuid.uuid4().hex[:12]}"
    with _admin(server) as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
    url = make_url(server)
    try:
        yield url.update_query_dict({"options": f"-csearch_path={name}"}).render_as_string(
            hide_password=False
        )
    finally:
        with _admin(server) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.fixture
def store(store_url: str) -> Iterator:
    """A Store opened (and migrated) on the fresh database of ``store_url``."""
    from ablate.store import Store

    opened = Store.open(store_url)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def tmp_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """ABLATE_HOME set to a fresh directory (the store and MLflow's default there: the suite clears
    ABLATE_STORE and MLFLOW_TRACKING_URI)."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("ABLATE_HOME", str(home))
    return home


@pytest.fixture
def plugin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The example plugin package (examples/plugin/myattn) copied to a fresh folder on sys.path (the spawned
    workers inherit it)."""
    root = tmp_path / "src"
    shutil.copytree(ROOT / "examples" / "plugin" / "myattn", root / "myattn")
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.delitem(__import__("sys").modules, "myattn", raising=False)
    return root


@pytest.fixture(autouse=True)
def _plugin_path_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """A grid that lists plugins makes its folder importable for the rest of its process
    (``ablate.ablations.plugins.beside``): in the suite, for the rest of its test only."""
    monkeypatch.delenv("ABLATE_PLUGIN_PATH", raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))


@pytest.fixture(scope="module")
def module_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """ABLATE_CACHE (tokenized corpora, tokenizers) in a fresh directory shared by one test module's runs."""
    cache = tmp_path_factory.mktemp("cache")
    mp = pytest.MonkeyPatch()
    mp.setenv("ABLATE_CACHE", str(cache))
    yield cache
    mp.undo()


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """A running one-node Slurm cluster (SLURM_CONF exported for this session), stopped by PID afterwards."""
    # scripts/system-deps.sh (make test) installs Slurm, and scripts/slurm.sh installs it when it is missing:
    # these tests run on every machine, never skipped
    root = tmp_path_factory.mktemp("slurm")
    env = {**os.environ, "ABLATE_SLURMCTLD_PORT": str(_free_port()), "ABLATE_SLURMD_PORT": str(_free_port())}
    script = str(ROOT / "scripts" / "slurm.sh")
    proc = subprocess.run([script, "start", str(root)], env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        subprocess.run([script, "stop", str(root)], env=env, capture_output=True, timeout=60)
        pytest.fail(f"scripts/slurm.sh could not start a cluster: {proc.stderr[-2000:]}")
    saved = {k: os.environ.get(k) for k in ("SLURM_CONF", "ABLATE_CACHE")}
    os.environ["SLURM_CONF"] = proc.stdout.strip().splitlines()[-1]
    os.environ["ABLATE_CACHE"] = str(tmp_path_factory.mktemp("cache"))  # the jobs inherit it (sbatch)
    try:
        yield root
    finally:
        subprocess.run([script, "stop", str(root)], env=env, capture_output=True, timeout=60)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
