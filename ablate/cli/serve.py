"""A server in its own process group: ``ablate ui`` (MLflow's UI over a home's tracking store). ``ui_command``
is its command line, ``serve`` runs it until it exits or this process is asked to stop, and then stops the
whole group (the server and every worker it started), so that nothing is left orphaned."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def ui_command(home: Path, *, port: int = 5000) -> list[str]:
    """The ``mlflow ui`` command line over this home's tracking store, listening on 127.0.0.1 only.

    A ``MLFLOW_TRACKING_URI`` that is already a server has its own UI: that is a UserInputError naming it. A
    home whose MLflow store is not there (nothing has run here) is a NoStoreError: nothing is made.
    """
    from ablate.errors import NoStoreError, UserInputError
    from ablate.store.mlflow_mirror import artifact_root, tracking_uri

    uri = tracking_uri(home)
    if uri.startswith(("http://", "https://", "databricks")):
        raise UserInputError(
            f"MLFLOW_TRACKING_URI is a tracking server ({uri}): open it in a browser instead"
        )
    if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).is_file():
        raise NoStoreError(f"no MLflow store at {uri}: nothing has run here "
                           f"(ABLATE_HOME={Path(home).absolute()}; --home reads another)")
    return [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri,
            "--default-artifact-root", artifact_root(home), "--host", "127.0.0.1", "--port", str(port)]


def serve(cmd: list[str], *, grace_s: float = 3.0) -> int:
    """Run a server command in its own process group until it exits or this process gets SIGINT or SIGTERM;
    then stop the whole group (the server and every worker it started): SIGTERM, and after ``grace_s``
    SIGKILL. Returns the server's exit status (0 when stopped by a signal)."""
    proc = subprocess.Popen(cmd, start_new_session=True)  # a group of its own: stopped as one, never orphaned
    asked: list[int] = []
    old = {sig: signal.signal(sig, lambda signum, _frame: asked.append(signum))
           for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while proc.poll() is None and not asked:
            time.sleep(0.1)
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        if proc.poll() is None or asked:
            for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 1.0)):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                deadline = time.monotonic() + wait_s
                while time.monotonic() < deadline and _group_alive(proc.pid):
                    proc.poll()
                    time.sleep(0.05)
                if not _group_alive(proc.pid):
                    break
            proc.wait()
    return 0 if asked else max(proc.returncode or 0, 0)


def _group_alive(pgid: int) -> bool:
    """Whether any process of group ``pgid`` is left (signal 0 to the group)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

