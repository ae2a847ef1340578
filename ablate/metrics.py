"""The summary metrics of a run, declared once: every layer that handles them derives from ``SUMMARY``.

A summary metric is one number per run: ``result.json``'s ``summary`` holds it (``ablate.result`` refuses a
key that is not declared here), ingest stores it (a typed column of the ``runs`` table when ``column``, else a
row of ``scores``), the runs table returns it with its type and in this order (``ablate runs``, its JSON and
CSV), the MLflow mirror logs it, and the reports read it. ``tests/unit/store/test_metrics.py`` fails when a
layer disagrees.

Adding a metric is one entry here (``column=False``: it is stored as a score, no schema change), written into
the summary by whatever measures it (``source`` says who). A name ending in ``/`` is a family (``ppl/<set>``,
``bench/<task>``). Only a metric that queries must filter in SQL becomes a column, with a migration.

Pure: no imports beyond the standard library.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class SummaryMetric:
    """One summary number of a run: ``name`` (a family when it ends in ``/``), its Python type, what it means,
    who measures it, whether it is a column of the ``runs`` table, which way is better, whether
    ``result.json``'s ``summary`` carries it (``resumed_from`` is the result's own field), and how two arms
    are compared on it (``compare``: ``diff``, the paired difference; ``ratio``, the paired log ratio, for a
    magnitude that differs by factors between arms; None: a count the config fixes or a bookkeeping number,
    not an outcome to compare: ``ablate report compare`` and ``--until-resolved`` read it so);
    ``timing``: a measurement of the machine (throughput), in which two runs of one function differ, so it
    does not tell identical runs apart."""

    name: str
    kind: type[int] | type[float]
    meaning: str
    source: str
    column: bool = False
    better: Literal["lower", "higher"] | None = None
    in_summary: bool = True
    compare: Literal["diff", "ratio"] | None = "diff"
    timing: bool = False  # a measurement of the machine, not the model: two identical runs differ in it

    @property
    def family(self) -> bool:
        """A family of names (``ppl/`` -> ``ppl/code``, ``ppl/prose``, ...)."""
        return self.name.endswith("/")

    def matches(self, key: str) -> bool:
        """Is ``key`` this metric (or a member of this family)?"""
        return key.startswith(self.name) and len(key) > len(self.name) if self.family else key == self.name

    @property
    def dtype(self) -> str:
        """The pandas dtype of its column in the runs table (nullable: a run may not have measured it)."""
        return "Int64" if self.kind is int else "float64"


SUMMARY: tuple[SummaryMetric, ...] = (
    SummaryMetric("params", int,
                  "total parameters of the run's model (the variant applied; meta-device count)",
                  "the grid when planned, the runner when trained", column=True, compare=None),
    SummaryMetric("added_params", int, "parameters the variant adds over the same config without it",
                  "the grid when planned, the runner when trained", column=True, compare=None),
    SummaryMetric("steps", int, "optimizer steps trained (a pruned run: where it was stopped)",
                  "runner (training loop)", column=True, compare=None),
    SummaryMetric("tokens", int, "training tokens seen (batch_size x seq_len per step, over every stage)",
                  "runner (training loop)", column=True, compare=None),
    SummaryMetric("train_loss", float, "training loss at the last step", "runner (training loop)",
                  column=True, better="lower"),
    SummaryMetric("val_ppl", float, "held-out perplexity, the mean over the held-out sets",
                  "runner (evaluation)", column=True, better="lower"),
    SummaryMetric("ppl/", float, "held-out perplexity of one set, ppl/<set> (eval.heldout_tokens tokens)",
                  "runner (evaluation)", better="lower"),
    SummaryMetric("loss_spikes", int,
                  "loss spikes: a loss above mean + spike_sigma x std of the trailing window",
                  "runner (loss monitor)", column=True, better="lower"),
    SummaryMetric("resumed_from", int,
                  "the step at which the run last resumed from a checkpoint (null: never)",
                  "runner (result.json's resumed_from)", column=True, in_summary=False, compare=None),
    SummaryMetric("gate_score", float, "mean gate score over layers, heads and tokens (paper Table 4; null "
                  "without a gate)", "runner (probes)", column=True),
    SummaryMetric("f_attn", float,
                  "attention to the first token, mean over layers and heads (Table 4's F-Attn)",
                  "runner (probes)", column=True, better="lower"),
    SummaryMetric("m_act", float, "massive activation (Table 4's M-Act): each layer's largest hidden-state "
                  "magnitude, mean over layers",
                  "runner (probes)", column=True, better="lower", compare="ratio"),
    SummaryMetric("massive_ratio", float, "Sun et al.'s (2024) massive activation: a layer's largest |hidden "
                  "state| over its median (per probe row, mean over rows), the largest over layers",
                  "runner (probes)", better="lower", compare="ratio"),
    SummaryMetric("massive_first", float, "the share of probe rows whose largest |hidden state| sits on the "
                  "first token, at the layer of massive_ratio", "runner (probes)", better="lower"),
    SummaryMetric("bench/", float, "benchmark score in percent, bench/<task>[@<len>][/yarn]",
                  "runner (offline tasks), ablate eval (lm-eval)", better="higher"),
    SummaryMetric("flops", float, "training compute in FLOPs: per stage, its tokens x (6N + 12·L·H·Q·T) per "
                  "token, N the model's active matmul weights, gates included (ablate.ablations.flops)",
                  "runner (training loop)", compare=None),
    SummaryMetric("tokens_per_s", float, "training throughput, the median over steps",
                  "runner (training loop)", column=True, better="higher", compare="ratio", timing=True),
    SummaryMetric("wall_s", float, "wall time of the run: data, training, evaluation and probes",
                  "runner", column=True, compare=None),
)

BY_NAME: dict[str, SummaryMetric] = {m.name: m for m in SUMMARY}
COLUMNS: tuple[SummaryMetric, ...] = tuple(m for m in SUMMARY if m.column)


def metric(key: str) -> SummaryMetric | None:
    """The declaration of a summary key (a name, or a member of a family); None when it is not declared.

    >>> metric("ppl/code").name, metric("train_loss").kind.__name__, metric("nope")
    ('ppl/', 'float', None)
    """
    found = BY_NAME.get(key)
    if found is not None and not found.family:
        return found
    return next((m for m in SUMMARY if m.family and m.matches(key)), None)


def order(keys: list[str]) -> list[str]:
    """Summary keys in the declared order, each family's members sorted where the family is declared; keys
    that are not declared go last, sorted."""
    out: list[str] = []
    for m in SUMMARY:
        out += sorted(k for k in keys if m.matches(k)) if m.family else [k for k in keys if k == m.name]
    return out + sorted(k for k in keys if metric(k) is None)
