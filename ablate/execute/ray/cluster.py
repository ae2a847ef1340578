"""The Ray cluster a grid trains on: joined at an address, or a local instance started for the command and
stopped at its end; what each run asks of it; and what Ray's state API says of the runs' tasks.

``connect(address, runtime_env=)``: ``address`` None (and no ``RAY_ADDRESS``) starts a Ray instance on this
machine; else it joins the cluster there. An address nothing answers at is one line (ConfigError naming
``--ray-address``), before anything starts. ``requirements(runs, ...)`` -> each run's ``Ask`` (its devices as
GPUs when the cluster has GPUs, its threads as CPUs), refused in one line when no node of the cluster could
ever hold it (Ray would wait for such a node forever).

A run's job is its Ray task, stored as ``<task id>@<cluster address>`` (``job_id``), so that ``ablate status``
and ``ablate cancel`` can ask that cluster from any machine that reaches it.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import socket
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, NotRequired, TypedDict

from ablate.errors import ConfigError, UserInputError
from ablate.execute.devices import usable_cpus
from ablate.trainers.registry import KEY, trainer_of

if TYPE_CHECKING:
    from ray.actor import ActorHandle

    from ablate.grid.expand import PlannedRun

log = logging.getLogger(__name__)

FLAG = "--ray-address"
INSTALL = "pip install 'ablate[ray]' (or pip install 'ray[default]')"
NAMESPACE = "ablate"
TASK_FUNCTION = "ray_task"  # the remote function's name, as Ray's state API lists it
# Ray's task states in which a task still holds its run (or will): pending, scheduled or running
ALIVE = frozenset({"NIL", "PENDING_ARGS_AVAIL", "PENDING_NODE_ASSIGNMENT", "PENDING_OBJ_STORE_MEM_AVAIL",
                   "PENDING_ARGS_FETCH", "SUBMITTED_TO_WORKER", "PENDING_ACTOR_TASK_ARGS_FETCH",
                   "PENDING_ACTOR_TASK_ORDERING_OR_CONCURRENCY", "RUNNING", "RUNNING_IN_RAY_GET",
                   "RUNNING_IN_RAY_WAIT", "GETTING_AND_PINNING_ARGS"})
STATE_TIMEOUT_S = 10
# what the runs' working directory leaves behind when it is carried to the workers
EXCLUDES = [".git", ".venv", "venv", "**/__pycache__", "*.ckpt", "*.pt", "*.safetensors", "mlruns",
            "ablate-runs", ".mypy_cache", ".ruff_cache", ".pytest_cache"]


def ray_module() -> ModuleType:
    """``import ray``, or one line saying how to install it (this user's token, if any, sent to the clusters
    that ask for one: ``use_token``)."""
    use_token()
    try:
        import ray
    except ImportError:
        raise UserInputError(f"--executor ray needs Ray, which is not installed: {INSTALL}") from None
    return ray


def use_token() -> None:
    """Send this user's Ray token (``ray start`` makes one, ``~/.ray/auth_token``) to clusters that ask for
    one: Ray's clients default to sending none. A ``RAY_AUTH_MODE`` already set is left as it is."""
    token = (os.environ.get("RAY_AUTH_TOKEN") or Path(os.environ.get("RAY_AUTH_TOKEN_PATH")
             or Path.home() / ".ray" / "auth_token").is_file())
    if "RAY_AUTH_MODE" not in os.environ and token:
        os.environ["RAY_AUTH_MODE"] = "token"


def address_given(address: str | None) -> str | None:
    """The cluster to join: ``--ray-address``, else ``RAY_ADDRESS``; None starts a local instance."""
    return address or os.environ.get("RAY_ADDRESS") or None


def check_reachable(address: str, *, timeout_s: float = 5.0) -> None:
    """Refuse (ConfigError) an address nothing answers at, in a few seconds (``ray.init`` would try for a
    minute and print pages)."""
    text = address.split("://", 1)[-1]
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"{address!r} is not host:port (e.g. 10.0.0.1:6379, the head's GCS address)",
                          where=FLAG)
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise ConfigError(f"nothing answers at {address} ({exc.strerror or exc}): is the Ray head up, and "
                          "is this its address (ray status on the head prints it)?", where=FLAG) from None


@dataclass(frozen=True)
class Cluster:
    """The Ray cluster this command uses: its address, whether this command started it (and stops it), and
    the largest node's resources."""

    address: str
    started_here: bool
    most_cpus: float
    most_gpus: float
    nodes: int

    def shutdown(self) -> None:
        """Disconnect (and stop the instance this command started)."""
        ray_module().shutdown()


def connect(address: str | None, *, runtime_env: Mapping[str, object] | None = None) -> Cluster:
    """Join the cluster at ``address`` (``RAY_ADDRESS`` when None), else start a Ray instance here.

    ``runtime_env`` (what the workers need from here: ``runtime_env``) goes to a cluster joined. A Ray
    instance started here gets none: its workers are this machine's processes, started with this process's
    working directory and environment (the grid's plugin folders in ``ABLATE_PLUGIN_PATH`` included), and
    carrying them cost every grid seconds (the working directory zipped into Ray's object store, then a
    runtime-env set-up before the first task and the mailbox: docs/scale.md has the figures)."""
    ray = ray_module()
    joining = address_given(address)
    if joining is not None:
        check_reachable(joining)
    kw: dict[str, object] = {"namespace": NAMESPACE, "log_to_driver": False, "logging_level": logging.WARNING,
                          "configure_logging": False}
    logging.getLogger("ray").setLevel(logging.ERROR)  # its notices; what goes wrong is raised
    try:
        if joining is None:  # a local instance of this command's own ("local": never one found running)
            ray.init(address="local", include_dashboard=True, object_store_memory=100 * 2**20,
                     num_cpus=usable_cpus(), **kw)
        else:
            ray.init(address=joining, runtime_env=dict(runtime_env or {}), **kw)
    except (ConnectionError, TimeoutError, RuntimeError) as exc:
        raise ConfigError(f"could not join the Ray cluster at {joining}: {str(exc).splitlines()[0]}",
                          where=FLAG) from None
    except ValueError as exc:  # e.g. a working directory too large to carry to the workers
        raise UserInputError(f"Ray refused the job: {str(exc).splitlines()[0]}") from None
    alive = [n for n in ray.nodes() if n.get("Alive")]
    resources = [n.get("Resources", {}) for n in alive]
    return Cluster(ray.get_runtime_context().gcs_address, joining is None,
                   max((r.get("CPU", 0.0) for r in resources), default=0.0),
                   max((r.get("GPU", 0.0) for r in resources), default=0.0), len(alive))


@dataclass(frozen=True)
class Ask:
    """What one run asks of Ray: GPUs (its devices, on a cluster with GPUs) and CPUs (threads per
    process)."""

    gpus: int
    cpus: int


def requirements(runs: Sequence[PlannedRun], cluster: Cluster, *, threads: int | None, devices: str | None
                 ) -> dict[str, Ask]:
    """Each run's ``Ask``, refused (ConfigError, one line) when it exceeds every node of ``cluster``.

    A run's devices are GPUs when the cluster has any (``--devices cpu`` keeps them on CPUs); each of its
    processes gets ``threads`` CPUs (``--threads``, default 1). On CPUs, ablate's model runs a process per
    device; a run that is one process whatever its devices (a command's: its trainer's
    ``one_process_per_device``) gets ``threads`` CPUs in all."""
    use_gpus = cluster.most_gpus > 0 and devices != "cpu"
    per = threads or 1
    if per < 1:
        raise ConfigError(f"{per} threads per run; allowed: 1 or more", where="--threads")
    out: dict[str, Ask] = {}
    for run in runs:
        n = int(run.config.train.devices)
        # a run's trainer, from its config (the model's has no such key)
        per_device = trainer_of(run.config.model_dump(mode="json", include={KEY})).one_process_per_device
        processes = n if per_device and not use_gpus else 1
        ask = Ask(gpus=n if use_gpus else 0, cpus=per * processes)
        if ask.gpus > cluster.most_gpus:
            raise ConfigError(f"run {run.run_id} asks for {ask.gpus} GPUs (train.devices = {n}), but the "
                              f"Ray cluster's largest node has {cluster.most_gpus:g}: lower train.devices or "
                              "add a larger node", where="train.devices")
        if ask.cpus > cluster.most_cpus:
            raise ConfigError(f"run {run.run_id} asks for {ask.cpus} CPUs ({per} thread(s) x {processes} "
                              f"process(es)), but the Ray cluster's largest node has {cluster.most_cpus:g}: "
                              "lower --threads", where="--threads")
        out[run.run_id] = ask
    return out


class RuntimeEnv(TypedDict):
    """Ray's ``runtime_env`` of a cluster joined: what its workers need from here."""

    working_dir: str
    excludes: list[str]
    env_vars: dict[str, str]
    py_modules: NotRequired[list[str]]


def runtime_env(plugins: Iterable[str], *, cwd: Path, home: Path) -> RuntimeEnv:
    """What the workers need from here: the grid's plugin modules (``py_modules``), the working directory
    (``working_dir``, less the home and what is large) and ablate's settings in the environment."""
    modules = []
    for name in plugins:
        spec = importlib.util.find_spec(name.split(".", 1)[0])
        if spec is None or spec.origin is None:
            continue
        root = Path(spec.origin)
        modules.append(str(root.parent if root.name == "__init__.py" else root))
    excludes = list(EXCLUDES)
    try:
        excludes.append(str(home.absolute().relative_to(cwd.absolute())))
    except ValueError:
        pass  # the home is elsewhere
    env = {k: v for k, v in os.environ.items()
           if k.startswith(("ABLATE_", "MLFLOW_", "HF_")) and k != "ABLATE_HOME"}
    out = RuntimeEnv(working_dir=str(cwd), excludes=excludes, env_vars=env)
    if modules:
        out["py_modules"] = sorted(set(modules))
    return out


# ------------------------------------------------------------ jobs: <task id>@<address>
def job_id(task_id: str, address: str) -> str:
    """The job a run's Ray task is stored as."""
    return f"{task_id}@{address}"


def split_job(job: str) -> tuple[str, str]:
    """``(task id, cluster address)`` of a stored job."""
    task, _, address = job.partition("@")
    return task, address


def task_states(jobs: Collection[str]) -> dict[str, str] | None:
    """``{job: Ray's state of its task}`` for the jobs their clusters list (a retried task: its latest
    attempt); None when no cluster among them answers (the heartbeat decides)."""
    try:
        use_token()
        from ray.util.state import list_tasks
    except ImportError:
        return None
    by_address: dict[str, list[str]] = {}
    for job in jobs:
        task, address = split_job(job)
        by_address.setdefault(address, []).append(task)
    out: dict[str, str] = {}
    answered = False
    for address, tasks in by_address.items():
        try:
            check_reachable(address, timeout_s=STATE_TIMEOUT_S)
        except ConfigError as exc:
            if "refused" not in str(exc).lower():
                continue  # cannot tell from here
            answered = True  # nothing listens there any more: that cluster and its tasks are gone
            continue
        try:
            listed = list_tasks(address=address, filters=[("name", "=", TASK_FUNCTION)], limit=10_000,
                                timeout=STATE_TIMEOUT_S, raise_on_missing_output=False)
        except Exception as exc:  # noqa: BLE001 - a cluster that does not answer cannot tell
            log.info("Ray at %s did not answer (%s): its tasks' liveness is left to their heartbeats",
                     address, exc)
            continue
        answered = True
        wanted, latest = set(tasks), dict[str, tuple[int, str]]()
        for t in listed:
            if t.task_id in wanted and t.attempt_number >= latest.get(t.task_id, (-1, ""))[0]:
                latest[t.task_id] = (t.attempt_number, str(t.state))
        out.update({job_id(task, address): state for task, (_, state) in latest.items()})
    return out if answered else None


def ask_to_cancel(jobs: Collection[str]) -> list[str]:
    """Ask the drivers that own these jobs' tasks to cancel them (through each cluster's ``Mailbox``); the
    jobs asked about."""
    ray = ray_module()
    by_address: dict[str, list[str]] = {}
    for job in jobs:
        task, address = split_job(job)
        by_address.setdefault(address, []).append(task)
    asked: list[str] = []
    for address, tasks in by_address.items():
        try:
            check_reachable(address)
        except ConfigError:
            continue  # that cluster is gone, and its tasks with it
        ray.init(address=address, namespace=NAMESPACE, log_to_driver=False, logging_level=logging.ERROR,
                 configure_logging=False)
        try:
            try:
                mailbox = ray.get_actor(MAILBOX, namespace=NAMESPACE)
            except ValueError:
                continue  # no driver is alive: its tasks died with it
            ray.get(mailbox.cancel.remote(tasks), timeout=30)
            asked += [job_id(t, address) for t in tasks]
        finally:
            ray.shutdown()
    return asked


MAILBOX = "ablate-cancel"


class Mailbox:
    """A named actor per cluster where ``ablate cancel`` leaves the task ids to cancel, and each driver
    (``ablate run --executor ray``, the owner of its tasks, which only it can cancel) takes its own."""

    def __init__(self) -> None:
        self.asked: set[str] = set()

    def cancel(self, task_ids: list[str]) -> None:
        self.asked.update(task_ids)

    def take(self, task_ids: list[str]) -> list[str]:
        mine = sorted(self.asked & set(task_ids))
        self.asked -= set(mine)
        return mine


def mailbox() -> ActorHandle[Mailbox]:
    """This cluster's mailbox (made by the first driver that asks; it lives as long as that driver)."""
    ray = ray_module()
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = NodeAffinitySchedulingStrategy(node_id=ray.get_runtime_context().get_node_id(), soft=True)
    actor = ray.remote(num_cpus=0, max_restarts=0)(Mailbox)
    handle: ActorHandle[Mailbox] = actor.options(name=MAILBOX, namespace=NAMESPACE, get_if_exists=True,
                                                 scheduling_strategy=here).remote()
    return handle
