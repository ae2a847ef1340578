"""Worker slots: which device each worker of the local pool uses, and how many CPU threads it may take.

One worker per CUDA device by default (``jobs_per_device`` packs several small jobs onto one GPU); without a
GPU, ``jobs`` CPU workers split the cores between them. ``parse_devices`` and ``plan_slots`` are pure: the
caller says how many GPUs and cores there are (``gpu_count()`` and ``usable_cpus()`` count them here).

The cores are those this process may use, not the machine's: a ``taskset`` or cgroup allocation of 4 cores on
a 64-core node is 4. More torch threads than cores make OpenMP's threads wait for each other: a step on 2
oversubscribed cores took 4x as long as on one thread (docs/internals.md, bench/contended.py).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ablate.errors import ConfigError

CPU_MAX = Path("/sys/fs/cgroup/cpu.max")  # cgroup v2: "<quota> <period>" in microseconds, or "max <period>"

@dataclass(frozen=True)
class Slot:
    """Where one worker runs: ``device`` is ``"cpu"``, ``"cuda:<i>"`` or ``"cuda:<i>,<j>,..."`` (a run on
    several GPUs); ``threads`` its torch CPU threads."""

    index: int
    device: str
    threads: int

    @property
    def label(self) -> str:
        """Where the worker runs and with how many threads (``cpu, 2 threads``): what the display and the
        store's ``device`` of a running run show."""
        return f"{self.device}, {self.threads} thread{'s' if self.threads != 1 else ''}"

    @property
    def cuda_visible(self) -> str:
        """The worker's ``CUDA_VISIBLE_DEVICES``: its GPU(s), or none at all for a CPU worker."""
        return self.device.split(":", 1)[1] if self.device.startswith("cuda:") else ""


def visible_gpus(value: str | None) -> list[str]:
    """The GPUs a ``CUDA_VISIBLE_DEVICES`` value names, in its order (``-1``: none).

    >>> visible_gpus("2, 3"), visible_gpus("-1"), visible_gpus(None)
    (['2', '3'], [], [])
    """
    return [v.strip() for v in (value or "").split(",") if v.strip() and v.strip() != "-1"]


def physical(indices: str, visible: str | None) -> str:
    """GPU indices as this process numbers them (``cuda:0`` is the first GPU of the ``CUDA_VISIBLE_DEVICES``
    it was started with) as ``CUDA_VISIBLE_DEVICES`` must name them for a child process: through that list,
    so a user's ``CUDA_VISIBLE_DEVICES=2,3`` keeps every worker on GPUs 2 and 3, never on 0 and 1.

    >>> physical("0,1", "2,3"), physical("1", "GPU-a,GPU-b"), physical("1", None), physical("", "2,3")
    ('2,3', 'GPU-b', '1', '')
    """
    names = visible_gpus(visible)
    if not indices or not names:
        return indices
    return ",".join(names[int(i)] if i.isdigit() and int(i) < len(names) else i for i in indices.split(","))


def gpu_count() -> int:
    """Visible CUDA devices, without importing torch in this process when there can be none."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) == "" or not Path("/proc/driver/nvidia").exists():
        return 0
    import torch

    return int(torch.cuda.device_count())


def cpu_quota(cpu_max: Path = CPU_MAX) -> int | None:
    """The CPUs a cgroup v2 quota allows (``cpu.max``: quota / period, rounded up: ``150000 100000`` is 2), or
    None without a quota (``max 100000``, or no cgroup v2)."""
    try:
        quota, period = cpu_max.read_text().split()[:2]
        # ceil: 1.5 CPUs of time keep 2 threads busy part-time
        return max(1, -(-int(quota) // int(period))) if int(quota) > 0 and int(period) > 0 else None
    except (OSError, ValueError):  # no cgroup v2, "max" (no quota), or a file we cannot read
        return None


def usable_cpus(*, cpu_max: Path = CPU_MAX, environ: dict[str, str] | None = None) -> int:
    """The CPUs this process may use: the fewest of its affinity mask (``taskset``, Slurm's and containers'
    cpusets), its cgroup's CPU quota and Slurm's ``SLURM_CPUS_PER_TASK``; ``os.cpu_count()`` when none says.
    Every thread count of ablate starts here."""
    env = os.environ if environ is None else environ
    counts = []
    if hasattr(os, "sched_getaffinity"):
        counts.append(len(os.sched_getaffinity(0)))
    if (quota := cpu_quota(cpu_max)) is not None:
        counts.append(quota)
    if (slurm := env.get("SLURM_CPUS_PER_TASK", "")).isdigit() and int(slurm) > 0:
        counts.append(int(slurm))
    return max(1, min(counts) if counts else os.cpu_count() or 1)


def quiet_threads(*, load: float | None = None, cpus: int | None = None,
                  environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The OpenMP settings a worker starts torch with: ``OMP_WAIT_POLICY=PASSIVE`` (threads that sleep when
    they wait) when the machine is already oversubscribed as the worker starts (the 1-minute load average
    above the CPUs this process may use), else nothing (OpenMP's default: threads spin a while before they
    sleep).

    Measured with ``bench/contended.py`` (docs/internals.md): passive waits cost a quiet machine 2.2x on the
    tiny preset and were slower beside 2 busy-loop burners too, but at load 6-7 on 2 cores (other torch jobs
    spinning) they took a step from 710 ms to 172 ms. A user's own ``OMP_WAIT_POLICY`` always wins (``{}``
    then).

    >>> quiet_threads(load=7.0, cpus=2, environ={})
    {'OMP_WAIT_POLICY': 'PASSIVE'}
    >>> quiet_threads(load=0.5, cpus=2, environ={})
    {}
    >>> quiet_threads(load=7.0, cpus=2, environ={"OMP_WAIT_POLICY": "ACTIVE"})
    {}
    """
    env = os.environ if environ is None else environ
    if "OMP_WAIT_POLICY" in env:
        return {}
    load = os.getloadavg()[0] if load is None else load
    cpus = usable_cpus() if cpus is None else cpus
    return {"OMP_WAIT_POLICY": "PASSIVE"} if load > cpus else {}


def parse_devices(spec: str | None, n_gpus: int) -> list[str]:
    """``--devices``: ``cpu``, ``cuda`` (every GPU), or a comma list of ``cuda:<i>`` / ``<i>``.

    >>> parse_devices("0,cuda:2", n_gpus=4)
    ['cuda:0', 'cuda:2']
    """
    if spec is None or spec.strip() == "":
        return [f"cuda:{i}" for i in range(n_gpus)] or ["cpu"]
    spec = spec.strip().lower()
    if spec == "cpu":
        return ["cpu"]
    if spec in ("cuda", "gpu", "all"):
        if n_gpus == 0:
            raise ConfigError(
                f"'{spec}' asks for GPUs but none is visible; allowed here: cpu", where="--devices"
            )
        return [f"cuda:{i}" for i in range(n_gpus)]
    devices: list[str] = []
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        index = part.removeprefix("cuda:")
        if not index.isdigit():
            raise ConfigError(
                f"'{part}' is not a device; allowed: cpu, cuda, or a comma list of cuda:<i> or <i>",
                where="--devices",
            )
        if int(index) >= n_gpus:
            raise ConfigError(f"device {part!r} does not exist: {n_gpus} GPU(s) visible", where="--devices")
        if f"cuda:{index}" not in devices:
            devices.append(f"cuda:{int(index)}")
    if not devices:
        raise ConfigError("no device given; allowed: cpu, cuda, or a comma list of cuda:<i>",
                          where="--devices")
    return devices


def plan_slots(*, devices: list[str], jobs: int | None, jobs_per_device: int, cpu_count: int,
               per_run: int = 1, threads: int | None = None) -> list[Slot]:
    """The pool's worker slots.

    On GPUs: ``jobs_per_device`` workers per device, or ``jobs`` workers dealt round-robin over them. On CPU:
    ``jobs`` workers (default 1), each with ``cpu_count // jobs`` torch threads (at least one; ``cpu_count``
    is ``usable_cpus()``, and ``threads`` (``--threads``) overrides). Runs of ``per_run`` devices
    (``train.devices``) get that many GPUs per worker (``cuda:0,1,2,3``: the worker sees them all and its run
    starts a process on each).

    >>> [s.threads for s in plan_slots(devices=["cpu"], jobs=2, jobs_per_device=1, cpu_count=8)]
    [4, 4]
    """
    if jobs is not None and jobs < 1:
        raise ConfigError(f"{jobs} workers asked for; allowed: 1 or more", where="--jobs")
    if jobs_per_device < 1:
        raise ConfigError(f"{jobs_per_device} jobs per device; allowed: 1 or more", where="--jobs-per-device")
    if threads is not None and threads < 1:
        raise ConfigError(f"{threads} threads per worker asked for; allowed: 1 or more", where="--threads")
    cpu_count = max(1, cpu_count)
    if devices == ["cpu"]:
        n = jobs or 1
        return [Slot(i, "cpu", threads or max(1, cpu_count // n)) for i in range(n)]
    if per_run > 1:  # a worker per group of per_run GPUs
        if len(devices) < per_run:
            raise ConfigError(f"runs with train.devices = {per_run} need {per_run} GPUs, {len(devices)} "
                              f"given ({', '.join(devices)}); set train.devices to at most {len(devices)}",
                              where="--devices")
        devices = ["cuda:" + ",".join(d.split(":", 1)[1] for d in devices[i:i + per_run])
                   for i in range(0, len(devices) - per_run + 1, per_run)]
    n = jobs or len(devices) * jobs_per_device
    threads = threads or max(1, cpu_count // n)
    return [Slot(i, devices[i % len(devices)], threads) for i in range(n)]


def local_slots(*, devices: str | None, jobs: int | None, jobs_per_device: int = 1,
                threads: int | None = None, per_run: int = 1) -> list[Slot]:
    """The slots of a local pool on this machine: ``--devices`` among the GPUs here, the CPUs this process may
    use (``usable_cpus``) split between the workers unless ``threads`` says. What ``ablate run``, ``ablate
    tune`` and ``ablate plan`` (which shows it) use."""
    return plan_slots(devices=parse_devices(devices, gpu_count()), jobs=jobs, jobs_per_device=jobs_per_device,
                      cpu_count=usable_cpus(), per_run=per_run, threads=threads)


def describe(slots: list[Slot]) -> str:
    """The workers in words: ``2 workers on cpu, 1 thread each``.

    >>> describe([Slot(0, "cpu", 2)])
    '1 worker on cpu, 2 threads'
    """
    threads = sorted({s.threads for s in slots})
    each = " each" if len(slots) > 1 else ""
    count = "/".join(map(str, threads))
    return (f"{len(slots)} worker{'s' if len(slots) != 1 else ''} on "
            f"{', '.join(sorted({s.device for s in slots}))}, {count} "
            f"thread{'s' if threads != [1] else ''}{each}")


def crowding(slots: list[Slot], *, cpu_count: int, jobs_per_device: int = 1) -> str | None:
    """A warning when the workers outnumber what runs them: CPU workers beyond the cores (each gets one
    thread, and they take turns), or GPU workers beyond the GPUs times ``jobs_per_device`` (they share a
    device nobody asked them to share). None when each has its own.

    >>> crowding([Slot(i, "cpu", 1) for i in range(100)], cpu_count=2).split(":")[0]
    '100 workers on 2 CPU cores'
    """
    cpu = [s for s in slots if s.device == "cpu"]
    if len(cpu) > max(1, cpu_count):
        return (f"{len(cpu)} workers on {cpu_count} CPU cores: they take turns, each slower than one worker "
                f"per core would be; --jobs {cpu_count} gives each its own core")
    gpus = {g for s in slots if s.device != "cpu" for g in s.cuda_visible.split(",")}
    gpu_workers = len(slots) - len(cpu)
    if gpus and gpu_workers > len(gpus) * jobs_per_device:
        own = len(gpus) * jobs_per_device
        return (f"{gpu_workers} workers on {len(gpus)} GPU(s): they share them; --jobs {own} gives each its "
                "own (--jobs-per-device packs small runs onto a GPU on purpose)")
    return None
