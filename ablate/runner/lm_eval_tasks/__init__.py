"""Offline lm-evaluation-harness tasks built from ablate's own task generators (``ablate.runner.tasks``).

``TASKS_DIR`` holds one YAML per task (tag ``ablate`` names them all); their datasets are generated at load
time by ``utils.py`` from a fixed seed, so they need no network and no files. ``ablate eval`` always puts this
folder on lm-eval's include path; ``lm_eval --include_path <this folder>`` works too.

- ``ablate_mqar``: multiple choice, zoology's MQAR: the queried key's value among every value in the context.
- ``ablate_niah_multikey``: multiple choice, RULER's multi-key needle in a haystack: the asked key's number
  among the four needles' numbers.
- ``ablate_niah_single``: loglikelihood of the needle's number after the question (``acc``: greedy decoding
  reproduces it; ``perplexity``).
- ``ablate_vt``: generation, RULER's variable tracking: exact match of the variable chain.

A task's ``metadata`` (``length`` in UTF-8 bytes, ``n`` examples, ``seed``) can be changed with lm-eval's
``--metadata``.
"""

from __future__ import annotations

from pathlib import Path

TASKS_DIR = Path(__file__).resolve().parent
