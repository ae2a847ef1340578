"""Several processes for one run on this machine (``train.devices > 1`` outside a launcher): this process is
rank 0, ranks 1..n-1 are started here as ``python -m ablate.runner.rank SPEC`` and train beside it.

Lightning sees the ranks through its plain environment (``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``,
``MASTER_PORT`` set for every process: the ranks are created externally, so it launches nothing itself). Under
Slurm (``srun`` started one task per device) or torchrun the ranks exist already and nothing is started.

The other ranks write no result and touch no store: they train their share and save their checkpoint shards
(their output goes to ``<run_dir>/rank<i>.log``). They die with the process that started them (the kernel's
parent-death signal), so a ``kill -9`` of rank 0 leaves nothing behind; rank 0 waits for them at the end, and
stops them if it fails first.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import cast

import torch

from ablate.errors import RunError

log = logging.getLogger(__name__)

_ENV = ("LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
INTERRUPTED = 3  # a rank's exit status when the run was stopped (its checkpoint saved)


def ranks_exist() -> bool:
    """Were this run's processes started by a launcher (Slurm's ``srun`` tasks, torchrun, or
    ``local_ranks``)?"""
    return "LOCAL_RANK" in os.environ or "TORCHELASTIC_RUN_ID" in os.environ or \
        int(os.environ.get("SLURM_NTASKS", "1") or 1) > 1


def node_count() -> int:
    """Nodes the run's processes span: Slurm's node count when ``srun`` started them, else 1."""
    if int(os.environ.get("SLURM_NTASKS", "1") or 1) > 1:
        return int(os.environ.get("SLURM_NNODES", "1") or 1)
    return 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return cast(int, s.getsockname()[1])  # (host, port)


def _die_with_parent() -> None:  # runs in the child between fork and exec
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


@contextlib.contextmanager
def local_ranks(devices: int, run_dir: Path, job: Mapping[str, object]) -> Iterator[None]:
    """Start ranks 1..devices-1 of the run ``job`` (``{"run_id", "config"}``) and make this process rank 0 for
    the block; afterwards wait for them (a rank that failed fails the run), or stop them if the block
    raised."""
    run_dir.mkdir(parents=True, exist_ok=True)
    spec = run_dir / "launch.json"
    spec.write_text(json.dumps({**job, "run_dir": str(run_dir)}))
    env = {"NODE_RANK": "0", "WORLD_SIZE": str(devices), "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(_free_port())}
    threads = max(1, torch.get_num_threads() // devices)  # the cores this run had, shared by its ranks
    children: list[subprocess.Popen[bytes]] = []
    saved = {k: os.environ.get(k) for k in _ENV}
    saved_threads = torch.get_num_threads()
    try:
        for rank in range(1, devices):
            with open(run_dir / f"rank{rank}.log", "ab") as out:
                children.append(subprocess.Popen(
                    [sys.executable, "-m", "ablate.runner.rank", str(spec)], stdout=out,
                    stderr=subprocess.STDOUT,
                    env={**os.environ, **env, "LOCAL_RANK": str(rank), "OMP_NUM_THREADS": str(threads)},
                    preexec_fn=_die_with_parent))
        os.environ.update(env | {"LOCAL_RANK": "0"})
        torch.set_num_threads(threads)
        yield
    except BaseException:
        for child in children:
            child.kill()
        raise
    finally:
        for child in children:
            child.wait()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        torch.set_num_threads(saved_threads)
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()  # this process may train another run next
        spec.unlink(missing_ok=True)
    failed = [(i + 1, c.returncode) for i, c in enumerate(children) if c.returncode not in (0, INTERRUPTED)]
    if failed:
        rank, code = failed[0]
        raise RunError(f"rank {rank} of the run ended with exit status {code}; its log: "
                       f"{run_dir / f'rank{rank}.log'}")
