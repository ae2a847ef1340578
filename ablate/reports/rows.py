"""Which runs each of the paper's rows reports: catalogue refs, then the config fields the table varies.

- Tables 1, 3, 4, 6: a row's runs are those of its variants, at one configuration: the one with the most of
  the table's runs (others are left out, with a note saying so).
- Table 2: the grid's settings (depth, width, batch size, steps, sequence length), in order of depth then
  tokens, stand for the paper's four settings in theirs; within a setting the learning rates line up from the
  largest down. Runs the paper has no row for become extra rows at the end of their setting.
- Table 5: "Trained at <len>" reads each run's retrieval scores per length (``len/<L>``, ``tables.py``), named
  after its final training length (``data.seq_len`` or its last stage's, ``trained_len``); "YaRN Extended"
  reads the same runs' YaRN-scaled scores (``len/<L>/yarn``, from ``bench/<task>@<L>/yarn``), and the plain
  scores of runs that were trained or evaluated with ``model.rope_yarn_factor > 1``.

Runs pair with their baseline by ``pair_key``: the same configuration (apart from the variant) and seed.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, SupportsFloat

import pandas as pd

from ablate.reports.cells import fmt_count, fmt_len
from ablate.reports.configs import finish_times
from ablate.reports.spec import TableSpec, VariantInfo, paper_number, row_refs
from ablate.result import RESULT_STATUSES  # pruned and failed runs measured nothing to report

# Model fields that set the scale of a run and that no variant changes: part of a run's configuration context.
SCALE_FIELDS = ("model.preset", "model.n_layers", "model.d_model", "model.vocab_size", "model.rope_theta",
                "model.rope_yarn_factor", "model.rope_yarn_original_len")
SETTING_FIELDS = ("model.preset", "model.n_layers", "model.d_model", "train.batch_size", "train.steps",
                  "data.seq_len")


@dataclass
class RowPlan:
    label: str
    group: str | None
    group_index: int
    paper_row: int | None
    paper: dict[str, str] | None
    variants: list[str]
    runs: pd.DataFrame  # DataFrame
    lr: float | None = None
    is_reference: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def variant(self) -> str | None:
        return self.variants[0] if self.variants else None


def finished(runs: pd.DataFrame) -> Any:
    """The runs that are results (``done``/``diverged``), with the columns the reports rely on present."""
    runs = pd.DataFrame(runs).copy()
    for col in ("run_id", "grid", "variant", "seed", "status"):
        if col not in runs.columns:
            runs[col] = pd.Series(dtype=object)
    return runs[runs["status"].isin(RESULT_STATUSES)].reset_index(drop=True)


def cell_value(r: pd.Series, key: str) -> float | None:
    """A run's (a row of the runs frame) number in column ``key``; None when absent or not finite."""
    v = r.get(key) if hasattr(r, "get") else None
    if v is None or isinstance(v, str):
        return None
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _hashable(v: Any) -> Any:
    if isinstance(v, float) and math.isnan(v):
        return None
    if isinstance(v, list | dict | tuple):
        return json.dumps(v, sort_keys=True, default=str)
    return v


def context_columns(columns: Any, *, exclude: tuple[str, ...] = ()) -> list[str]:
    """The config columns that make a run's configuration apart from its variant and seed."""
    cols = [c for c in columns  # "cell.": the parameter axes of a command grid (trainers.command.config)
            if str(c).startswith(("train.", "data.", "eval.", "cell.")) or c in SCALE_FIELDS or c == "stages"]
    return sorted(c for c in cols if c not in exclude)


Context = tuple[tuple[str, object], ...]  # a run's configuration context: (column, value) pairs, hashable


def context_key(r: pd.Series, *, exclude: tuple[str, ...] = ()) -> Context:
    """A run's configuration context (hashable), from a row of the runs frame."""
    return tuple((c, _hashable(r.get(c))) for c in context_columns(r.index, exclude=exclude))


def pair_key(r: pd.Series) -> tuple[Context, object]:
    """What pairs a run with its baseline: the configuration context and the seed."""
    return context_key(r), _hashable(r.get("seed"))


def modal_context(runs: pd.DataFrame, *, exclude: tuple[str, ...] = ()) -> tuple[Any, int, str]:
    """``runs`` at the configuration context with the most runs (then the most done, then the latest), how
    many were left out, and the fields that set that context apart (``"train.steps=120, ..."``; empty when all
    runs share one)."""
    if not len(runs):
        return runs, 0, ""
    keys = [context_key(r, exclude=exclude) for _, r in runs.iterrows()]
    counts = Counter(keys)
    if len(counts) == 1:
        return runs, 0, ""
    done = Counter(k for k, st in zip(keys, runs["status"], strict=True) if st == "done")
    latest: dict[Context, str] = {}
    for k, when in zip(keys, finish_times(runs), strict=True):
        latest[k] = max(latest.get(k, ""), when)
    # most runs, then latest
    best = max(counts, key=lambda k: (counts[k], done[k], latest.get(k, ""), repr(k)))
    mask = [k == best for k in keys]
    fixed = ", ".join(f"{c}={v}" for c, v in best if any(dict(k).get(c) != v for k in counts))
    return runs.loc[mask], len(runs) - sum(mask), fixed


def _modal_context(runs: pd.DataFrame, *, exclude: tuple[str, ...] = ()) -> tuple[Any, list[str]]:
    """``modal_context`` with a table's note when other configurations were left out."""
    runs, left, fixed = modal_context(runs, exclude=exclude)
    return runs, [f"{left} run(s) at other configurations left out; this table shows {fixed}"] if left else []


def plan_rows(spec: TableSpec, prows: list[dict[str, str]], runs: pd.DataFrame,
              catalogue: Mapping[str, VariantInfo]) -> tuple[list[RowPlan], list[str]]:
    """One RowPlan per table row (the paper's rows in order, then any extra rows), and notes for the table."""
    if spec.layout == "settings":
        return _plan_settings(spec, prows, runs, catalogue)
    plans = []
    for i, prow in enumerate(prows):
        variants = row_refs(spec, prow, catalogue)
        group = prow.get("group")
        plans.append(RowPlan(prow["method"], group, 0, int(prow["row"]), prow, variants,
                             runs[runs["variant"].isin(variants)],
                             is_reference=(spec.primary is not None and i == 0)))
    groups = [plans]
    if spec.layout == "lengths":
        plans = _split_yarn(plans)
        groups = [[p for p in plans if p.group_index == g] for g in (0, 1)]
    notes = []
    for members in groups:
        matched = runs[runs["run_id"].isin({rid for p in members for rid in p.runs["run_id"]})]
        kept, more = _modal_context(matched)
        notes += more
        for p in members:
            p.runs = p.runs[p.runs["run_id"].isin(set(kept["run_id"]))]
    return plans, notes


def trained_len(r: pd.Series) -> int | None:
    """The sequence length of a run's last training stage (a row of the runs frame): ``data.seq_len``, unless
    a later stage (the ``stages`` column, JSON) sets ``data.seq_len``."""
    length = r.get("data.seq_len")
    stages = r.get("stages")
    if isinstance(stages, str) and stages.startswith("["):
        for stage in json.loads(stages):
            length = stage.get("data.seq_len", length) if isinstance(stage, dict) else length
    if length is None or (isinstance(length, float) and math.isnan(length)):
        return None
    return int(length)


def _split_yarn(plans: list[RowPlan]) -> list[RowPlan]:
    groups = list(dict.fromkeys(p.group for p in plans))
    lengths: list[int] = []
    for p in plans:
        p.group_index = groups.index(p.group)
        yarn = p.runs["model.rope_yarn_factor"] if "model.rope_yarn_factor" in p.runs else None
        trained_with = [False] * len(p.runs) if yarn is None else list(yarn.astype(float).fillna(1.0) > 1.0)
        if p.group_index == 0:
            p.runs = p.runs.loc[[not y for y in trained_with]]
            lengths += [n for n in (trained_len(r) for _, r in p.runs.iterrows()) if n]
        else:  # YaRN-scaled scores stand in the plain columns; runs trained with YaRN keep their own
            runs = p.runs.copy()
            scaled = [c for c in runs.columns if str(c).startswith("len/") and str(c).endswith("/yarn")]
            has = runs[scaled].notna().any(axis=1) if scaled else pd.Series(False, index=runs.index)
            for c in scaled:
                plain = c.removesuffix("/yarn")
                runs[plain] = runs[c].where(has, runs[plain] if plain in runs else None)
            p.runs = runs.loc[[bool(h) or y for h, y in zip(has, trained_with, strict=True)]]
    if lengths:
        common = Counter(lengths).most_common(1)[0][0]
        for p in plans:
            if p.group_index == 0:
                p.group = f"Trained at {fmt_len(common)}"
    return plans


def _setting_of(r: pd.Series) -> tuple[object, ...]:
    return tuple(_hashable(r.get(c)) for c in SETTING_FIELDS)


def _setting_label(setting: tuple[object, ...], runs: pd.DataFrame, reference: list[str]) -> str:
    """A setting's group header: its depth, the reference arm's parameters (the baseline's, not a median
    over arms that add parameters; any run's when the setting has no reference run), tokens, batch size."""
    s = dict(zip(SETTING_FIELDS, setting, strict=True))
    tokens = None
    if "tokens" in runs and runs["tokens"].notna().any():
        tokens = float(runs["tokens"].max())
    elif None not in (s["train.steps"], s["train.batch_size"], s["data.seq_len"]):
        tokens = _num(s["train.steps"]) * _num(s["train.batch_size"]) * _num(s["data.seq_len"])
    params = None
    if "params" in runs:
        own = runs.loc[runs["variant"].isin(reference), "params"].dropna()
        counted = own if len(own) else runs["params"].dropna()
        params = float(counted.mode().iloc[0]) if len(counted) else None
    parts = [f"{s['model.n_layers']} Layer" if s["model.n_layers"] is not None else None,
             f"{fmt_count(params)} Parameters" if params else None,
             f"{fmt_count(tokens)} Tokens" if tokens else None,
             f"Batch Size={s['train.batch_size']}" if s["train.batch_size"] is not None else None]
    return ", ".join(p for p in parts if p) or "this grid"


def _plan_settings(spec: TableSpec, prows: list[dict[str, str]], runs: pd.DataFrame,
                 catalogue: Mapping[str, VariantInfo]) -> tuple[list[RowPlan], list[str]]:
    methods = list(dict.fromkeys(p["method"] for p in prows))
    method_variants = {m: row_refs(spec, next(p for p in prows if p["method"] == m),
                                   catalogue) for m in methods}
    variant_method = {v: m for m, vs in method_variants.items() for v in vs}
    runs = runs[runs["variant"].isin(variant_method)]
    runs, notes = _modal_context(runs, exclude=SETTING_FIELDS + ("train.lr",))
    settings: dict[tuple[object, ...], Any] = {}
    for _, r in runs.iterrows():
        settings.setdefault(_setting_of(r), []).append(r["run_id"])
    ordered = sorted(settings,
                     key=lambda s: (_num(s[1]), _num(s[4]) * _num(s[3]) * _num(s[5]), _num(s[3]), repr(s)))
    paper_settings = list(dict.fromkeys(p["setting"] for p in prows))
    plans: list[RowPlan] = []
    used: set[str] = set()
    for gi in range(max(len(paper_settings), len(ordered))):
        grid_setting = ordered[gi] if gi < len(ordered) else None
        sruns = runs[runs["run_id"].isin(settings[grid_setting])] if grid_setting else runs.iloc[0:0]
        label = (_setting_label(grid_setting, sruns, method_variants[methods[0]]) if grid_setting
                 else paper_settings[gi])
        grid_lrs = sorted({float(x) for x in sruns.get("train.lr", [])})
        in_paper = [p for p in prows if gi < len(paper_settings) and p["setting"] == paper_settings[gi]]
        paper_lrs = sorted({lr for p in in_paper if (lr := paper_number(p["max_lr"])) is not None})  # all are
        # Line the learning rates up from the largest down: the paper's table is about the largest stable LR.
        lr_map = {plr: grid_lrs[len(grid_lrs) - len(paper_lrs) + i]
                  for i, plr in enumerate(paper_lrs) if len(grid_lrs) - len(paper_lrs) + i >= 0}
        for p in in_paper:
            plr = paper_number(p["max_lr"])
            lr = lr_map.get(plr) if plr is not None else None
            variants = method_variants[p["method"]]
            prun = sruns.iloc[0:0] if lr is None else \
                sruns.loc[sruns["variant"].isin(variants) & (sruns["train.lr"].astype(float) == lr)]
            used.update(prun["run_id"])
            plans.append(RowPlan(p["method"], label, gi, int(p["row"]), p, variants, prun, lr=lr,
                                 is_reference=p["method"] == methods[0]))
        extra = sruns[~sruns["run_id"].isin(used)]
        for m in methods:
            mruns = extra[extra["variant"].isin(method_variants[m])]
            for lr in sorted({float(x) for x in mruns.get("train.lr", [])}):
                prun = mruns[mruns["train.lr"].astype(float) == lr]
                plans.append(RowPlan(m, label, gi, None, None, method_variants[m], prun, lr=lr,
                                     is_reference=m == methods[0]))
    return plans, notes


def _num(x: object) -> float:
    """A setting's number; 0 for none."""
    if x is None:
        return 0.0
    if not isinstance(x, SupportsFloat | str):
        raise TypeError(f"a setting of {x!r}, not a number")
    return float(x)
