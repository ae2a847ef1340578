"""Offline benchmark tasks: generated from a seed, scored as accuracy in % by exact match of greedy decoding.

RULER's needle-in-a-haystack families (``niah-single``, ``niah-multikey``, ``niah-multivalue``,
``niah-multiquery``), variable tracking (``vt``) and zoology's multi-query associative recall (``mqar``). A
grid names them in ``eval.benchmarks`` as specs ``name[@len,...]`` (``"niah-single@256,512"``); a ``kind:
task`` data source streams their examples as training rows (``task_stream``). Importing this package does not
import torch.
"""

from __future__ import annotations

from ablate.runner.tasks.example import Example
from ablate.runner.tasks.registry import (
    TASKS,
    Task,
    derive_seed,
    parse_task_spec,
    task_documents,
    task_examples,
    task_stream,
)
from ablate.runner.tasks.scoring import benchmark_plan, encode_example, evaluate_tasks, score_examples

__all__ = [
    "TASKS", "Example", "Task", "benchmark_plan", "derive_seed", "encode_example", "evaluate_tasks",
    "parse_task_spec", "score_examples", "task_documents", "task_examples",
    "task_stream",
]
