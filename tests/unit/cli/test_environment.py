"""The suite holds whatever the caller's shell sets: a researcher's own tracking server, store, home, Ray
cluster or thread settings never reach a test (tests/conftest.py clears them, in one place, before any test
runs)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, isolate_environment
from typer.testing import CliRunner

from ablate.cli import app
from ablate.store.engine import resolve_url
from ablate.store.mlflow_mirror import tracking_uri

# what a researcher's shell may hold: each would send a test's runs, store or MLflow elsewhere
CALLER = {
    "MLFLOW_TRACKING_URI": "http://127.0.0.1:9",
    "ABLATE_HOME": "/nonexistent/ablate-home",
    "ABLATE_STORE": "postgresql+psycopg://nobody@127.0.0.1:9/elsewhere",
    "ABLATE_CACHE": "/nonexistent/ablate-cache",
    "RAY_ADDRESS": "127.0.0.1:9",
    "OMP_NUM_THREADS": "7",
    "OMP_WAIT_POLICY": "ACTIVE",
    "SLURM_CPUS_PER_TASK": "1",
    "LOCAL_RANK": "3",
}


def test_the_callers_settings_are_cleared_and_the_suites_own_kept():
    environ = {**CALLER, "ABLATE_TEST_PG_URL": "postgresql+psycopg://t@127.0.0.1/t", "PATH": "/bin",
               "HF_HUB_OFFLINE": "0"}
    assert isolate_environment(environ) == sorted(CALLER)
    assert environ == {"ABLATE_TEST_PG_URL": "postgresql+psycopg://t@127.0.0.1/t", "PATH": "/bin",
                       "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def test_no_setting_of_the_callers_reaches_a_test(tmp_path):
    # by value: the suite's own fixtures may set some of these names for their tests (the Slurm cluster's
    # session gives its jobs an ABLATE_CACHE of the suite's)
    assert not {k for k, v in CALLER.items() if os.environ.get(k) == v}
    home = tmp_path / "home"
    assert tracking_uri(home) == f"sqlite:///{home.resolve()}/mlflow.db"
    assert resolve_url(home=home) == f"sqlite:///{home.absolute()}/ablate.db"
    out = CliRunner().invoke(app, ["variants", "--format", "json"])
    assert out.exit_code == 0, out.output


def test_the_suite_passes_in_a_shell_that_sets_them(tmp_path):
    # the test above, and tests that plan and read a home's store, in a session started from a shell holding
    # CALLER: without the conftest's clearing, test_plan_scale's plans would open the store at 127.0.0.1:9
    tests = [f"{Path(__file__).relative_to(ROOT)}::test_no_setting_of_the_callers_reaches_a_test",
             "tests/unit/grid/test_plan_scale.py",
             "tests/unit/cli/test_store_cli.py::test_default_store_lives_in_home"]
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x",
                          "-k", "not postgres", "--basetemp", str(tmp_path / "inner"), *tests],
                         env={**os.environ, **CALLER}, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert " passed" in out.stdout and " failed" not in out.stdout
