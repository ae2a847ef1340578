"""Datasets of the ``ablate_*`` lm-eval tasks (``custom_dataset: !function utils.<name>``), generated from
ablate's task generators: ``n`` examples at ``length`` UTF-8 bytes from ``seed`` (the task's ``metadata``).

Multiple-choice rows list the values the context states (``choices``) and the index of the answer (``label``);
they are read back from the prompt with the generators' own formats (``recall._pair``, ``niah._needle``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from ablate.runner.tasks import Example, task_examples

_MQAR_VALUE = re.compile(r"[a-z]+:(\d+) ")  # recall._pair: "ab:42 "
_NEEDLE_VALUE = re.compile(r"The magic number for [\w-]+ is (\d+)\. ")  # niah._needle


def _examples(task: str, meta: Mapping[str, int | float | str], length: int) -> list[Example]:
    return task_examples(task, seed=int(meta.get("seed", 0)), length=int(meta.get("length", length)),
                         n=int(meta.get("n", 100)))


def _dataset(rows: Sequence[Mapping[str, object]]) -> dict[str, object]:
    import datasets

    return {"test": datasets.Dataset.from_list(rows, split=datasets.Split.TEST)}


def _choice_rows(examples: list[Example], pattern: re.Pattern[str],
                 context: str = "") -> list[dict[str, object]]:
    rows = []
    for ex in examples:
        stated = ex.prompt.split("\n")[0] if context == "first-line" else ex.prompt
        choices = list(dict.fromkeys(pattern.findall(stated)))  # in order of appearance, once each
        rows.append({"prompt": ex.prompt, "answer": ex.answer, "choices": choices,
                     "label": choices.index(ex.answer)})
    return rows


def mqar(**meta: int | float | str) -> dict[str, object]:
    """``ablate_mqar``: the queried key's value among the values of every stated pair."""
    return _dataset(_choice_rows(_examples("mqar", meta, 128), _MQAR_VALUE, context="first-line"))


def niah_multikey(**meta: int | float | str) -> dict[str, object]:
    """``ablate_niah_multikey``: the asked key's number among the four needles' numbers."""
    return _dataset(_choice_rows(_examples("niah-multikey", meta, 256), _NEEDLE_VALUE))


def niah_single(**meta: int | float | str) -> dict[str, object]:
    """``ablate_niah_single``: the prompt and the needle's number."""
    return _dataset([{"prompt": ex.prompt, "answer": ex.answer} for ex in _examples("niah-single", meta,
                                                                                    256)])


def vt(**meta: int | float | str) -> dict[str, object]:
    """``ablate_vt``: the prompt and the chain of variables."""
    return _dataset([{"prompt": ex.prompt, "answer": ex.answer} for ex in _examples("vt", meta, 256)])
