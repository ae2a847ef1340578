"""Placeholders in the trainer's strings: ``{name}`` is filled, ``{{`` and ``}}`` are literal braces, and
braces around anything that is not a name (``{1: 2}``, a JSON argument) or after a ``$`` (``${HOME}``, left to
the shell) are left alone."""

from __future__ import annotations

import re
from collections.abc import Callable

# a name: a parameter's dotted path (`optim.lr`, `max-iters`) or one of RUN_VALUES
_TOKEN = re.compile(r"\{\{|\}\}|(?<!\$)\{([A-Za-z_][\w.\-]*)\}")

ARGS = "args"
# the values a run fills in besides its parameters, with what each is
RUN_VALUES = {
    "args": "every parameter as arguments",
    "args_json_file": "a JSON file of the parameters",
    "run_dir": "the run's folder",
    "run_id": "the run's id",
    "seed": "the run's seed",
    "devices": "the run's devices (CUDA_VISIBLE_DEVICES)",
}


def names(text: str) -> list[str]:
    """The placeholders of ``text``, in order, repeats included.

    >>> names("python t.py --out={run_dir} {args} {{literal}} ${HOME} {'a': 1}")
    ['run_dir', 'args']
    """
    return [m.group(1) for m in _TOKEN.finditer(text) if m.group(1)]


def fill(text: str, value: Callable[[str], str]) -> str:
    """``text`` with each placeholder replaced by ``value(name)`` and ``{{``/``}}`` made single braces.

    >>> fill("--out={run_dir}/x {{y}}", lambda name: "/runs/r1")
    '--out=/runs/r1/x {y}'
    """

    def one(m: re.Match[str]) -> str:
        if m.group(1):
            return value(m.group(1))
        return m.group(0)[0]

    return _TOKEN.sub(one, text)
