"""What each of the paper's Tables 1-6 is made of: its rows (the packaged paper CSVs), how a row finds its
runs, its descriptor and measured columns, and which paper number sits beside which measured one. A table's
particular behaviour is a field of its spec (``layout``), read by the row planner and the column builder.

A row finds its variants through the catalogue's ``tableN:R`` references; where the catalogue names no variant
for a row (Table 2's and Table 5's rows, the baselines repeated in later tables), the row's ``fallback``
references say which Table 1 row it repeats. Table 2 also matches the settings and learning rate; Table 5 the
YaRN group.
"""

from __future__ import annotations

import csv
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Literal

from ablate.errors import UserInputError, one_of

TABLES = (1, 2, 3, 4, 5, 6)


@dataclass(frozen=True)
class VariantInfo:
    """What the reports need of a catalogue entry."""

    name: str
    paper: tuple[str, ...] = ()
    act_func: str | None = None
    score_shape: str | None = None
    description: str = ""


@dataclass(frozen=True)
class TableSpec:
    """One paper table: its title, descriptor columns, the measured columns it adds, and row fallbacks."""

    number: int
    title: str
    descriptors: tuple[str, ...]              # among: act_func, score_shape, added_params, max_lr
    extra_measured: tuple[str, ...] = ()      # store columns shown before PPL (Table 4)
    ppl_label: str = "Avg PPL"
    paper_ppl: str | None = "avg_ppl"         # the paper column beside val_ppl
    primary: str | None = "val_ppl"           # the metric of the delta column
    fallback: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # row label or number -> refs
    paper_trained_len: int | None = None      # the paper's training length, where its columns are lengths
    # how its rows and columns are laid out: "paper" (a row per paper row, its runs by variant), "settings"
    # (rows grouped by the paper's training settings, matched on them and the learning rate: Table 2),
    # "lengths" (the measured columns are scores by context length, the rows split into trained-length and
    # YaRN groups: Table 5)
    layout: Literal["paper", "settings", "lengths"] = "paper"


_T1 = "table1"
SPECS: dict[int, TableSpec] = {
    1: TableSpec(1, "Gating variants (paper Table 1)", ("act_func", "score_shape", "added_params")),
    2: TableSpec(
        2, "Learning rate, batch size and depth (paper Table 2)", ("max_lr",), layout="settings",
        fallback={"Baseline": (f"{_T1}:1",), "SDPA Elementwise": (f"{_T1}:5",),
                  "SDPA Headwise": (f"{_T1}:10",), "Baseline+Sandwich Norm": ("table2:7",)},
    ),
    3: TableSpec(
        3, "Non-linearity augmentations (paper Table 3)", ("act_func",),
        fallback={"1": (f"{_T1}:1",), "2": (f"{_T1}:5",), "3": (f"{_T1}:6",), "4": (f"{_T1}:14",)},
    ),
    4: TableSpec(
        4, "Gate scores, massive activations and the attention sink (paper Table 4)", ("act_func",),
        extra_measured=("gate_score", "m_act", "f_attn"), ppl_label="PPL", paper_ppl="ppl",
        fallback={"1": (f"{_T1}:1",), "2": (f"{_T1}:5",), "3": (f"{_T1}:10",), "4": (f"{_T1}:12",),
                  "5": (f"{_T1}:6",)},
    ),
    5: TableSpec(
        5, "Retrieval past the training length (paper Table 5)", (), paper_ppl=None, primary=None,
        fallback={"Baseline": (f"{_T1}:1",), "SDPA-Gate": (f"{_T1}:5",)},
        paper_trained_len=32 * 1024,  # its rows: "Trained at 32k", then YaRN-extended to 64k and 128k
        layout="lengths",
    ),
    6: TableSpec(
        6, "Switch heads (paper Table 6)", ("added_params",), ppl_label="PPL", paper_ppl="ppl",
        fallback={"1": (f"{_T1}:1",), "6": (f"{_T1}:11",)},
    ),
}

# Column labels.
LABELS = {
    "act_func": "Act Func", "score_shape": "Score Shape", "added_params": "Added Param", "max_lr": "Max LR",
    "gate_score": "Gate Score", "m_act": "M-Act", "f_attn": "F-Attn", "val_ppl": "Avg PPL",
}
PAPER_DESCRIPTOR = {"act_func": "act_func", "score_shape": "score_shape", "added_params": "added_param_m",
                    "max_lr": "max_lr"}
DIGITS = {"gate_score": 3, "f_attn": 3, "m_act": 1, "val_ppl": 2, "train_loss": 3, "loss_spikes": 1,
          "massive_ratio": 1, "massive_first": 2, "tokens_per_s": 0}
# Paper benchmark column -> its display name.
BENCH_NAMES = {"hellaswag": "HellaSwag", "mmlu": "MMLU", "gsm8k": "GSM8k", "ceval": "C-eval",
               "humaneval": "HumanEval", "cmmlu": "CMMLU"}


def digits(key: str) -> int:
    """Decimals shown for a measured column."""
    if key.startswith("ppl/"):
        return 2
    if key.startswith("bench/") or key.startswith("len/"):
        return 1
    return DIGITS.get(key, 2)


@functools.cache
def _paper_rows(number: int) -> tuple[dict[str, str], ...]:
    text = resources.files("ablate.reports.paper").joinpath(f"table{number}.csv").read_text()
    return tuple(csv.DictReader(text.splitlines()))


def paper_rows(number: int) -> list[dict[str, str]]:
    """The paper's table ``number`` as a list of rows (dicts of the CSV's columns, as text), in the paper's
    order."""
    if number not in SPECS:
        raise UserInputError(one_of(f"table{number}", [f"table{n}" for n in TABLES], what="table"))
    return [dict(r) for r in _paper_rows(number)]


def paper_length(column: str) -> int | None:
    """The context length of a paper CSV column named after one (``len_4k`` -> 4096); None for any other.

    >>> paper_length("len_32k"), paper_length("avg_ppl")
    (32768, None)
    """
    if not column.startswith("len_"):
        return None
    size = column.removeprefix("len_")
    return int(size[:-1]) * 1024 if size.endswith("k") else int(size)


def paper_label(column: str) -> str:
    """How the paper names one of its columns: its length (``32k``), its benchmark's name, or a label."""
    length = paper_length(column)
    if length is not None:
        return f"{length // 1024}k" if length % 1024 == 0 else str(length)
    return BENCH_NAMES.get(column, LABELS.get(column, column))


def paper_number(text: str | None) -> float | None:
    """A paper cell as a float; None for '-' or empty."""
    if text is None or text.strip() in ("", "-"):
        return None
    try:
        return float(text)
    except ValueError:
        return None


def row_refs(spec: TableSpec, row: Mapping[str, str], catalogue: Mapping[str, VariantInfo]) -> list[str]:
    """The catalogue variants a paper row reports: those referencing ``tableN:R``, else the row's
    fallback's."""
    own = f"table{spec.number}:{row['row']}"
    names = [v.name for v in catalogue.values() if own in v.paper]
    if names:
        return names
    refs = spec.fallback.get(row["row"]) or spec.fallback.get(row.get("method", ""), ())
    return [v.name for v in catalogue.values() if any(r in v.paper for r in refs)]
