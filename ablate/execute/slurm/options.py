"""The Slurm executor's own ``ablate run`` options, declared here so that ``ablate run --help`` lists them
without importing the executor (``ablate.execute.registry``)."""

from __future__ import annotations

from ablate.options import Option

ABOUT = "one job array"  # --executor's help: slurm (one job array)
WHAT = "a Slurm option"
NODES = "only the Slurm executor spans nodes"

OPTIONS = (
    Option("partition", "--partition", str, "the partition", refusal=WHAT),
    Option("gpus_per_job", "--gpus-per-job", int, "GPUs per run (= train.devices; 0 = CPU) [default: "
           "train.devices if GPUs here, else 0]", refusal=WHAT),
    Option("time", "--time", str, "time limit per task (MM, HH:MM:SS, D-HH:MM:SS); a task out of time "
           "checkpoints and is requeued [default: 1-00:00:00]", refusal=WHAT),
    Option("array_parallelism", "--array-parallelism", int, "tasks at a time", refusal=WHAT),
    Option("slurm_opts", "--slurm-opt", str, "K=V, a submitit parameter (cpus_per_task=8, mem=32G) or any "
           "sbatch flag", repeat=True, refusal=WHAT),
    Option("nodes", "--nodes", int, "nodes per run (its train.devices processes spread evenly over them)",
           refusal=NODES),
    Option("gpus_per_node", "--gpus-per-node", int, "GPUs per node (= processes per node; nodes x this = "
           "train.devices)", refusal=NODES),
)
