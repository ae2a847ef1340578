"""``ablate report ladder``: does a variant's win grow or shrink with scale? Per variant, the power law
L(C) = E + A * C^(-alpha) fitted to the final held-out loss of every run of a scaling ladder (``ladder:`` in a
grid), its loss predicted at target compute budgets, and the predicted difference to the baseline there, with
intervals from a bootstrap over seeds (``ablate.reports.fit``).

- The loss of a run is its final held-out loss: the mean over its held-out sets of ln(PPL) (nats per token).
- Its compute is the ``flops`` it recorded (``ablate.ablations.flops``: 6N + 12·L·H·Q·T per token, the gate's
  matmuls included), so a gated variant and its baseline are compared at equal compute, not at equal steps.
- A series is a variant at one configuration apart from the ladder (learning rate, batch, ...); a variant
  pairs with the baseline series at the same configuration.
- A fit is unreliable with too few rungs, a ladder whose loss does not fall rung by rung, alpha <= 0 or an
  alpha interval that reaches 0, or a loss floor E the ladder does not identify (the fit puts it at 0, so it
  would extrapolate the loss to zero); then no prediction is given. Nor is one given more than
  ``MAX_EXTRAPOLATION`` times past the largest rung's compute. Each refused prediction says why (``refused``).
- A predicted loss whose interval is wider than the gain the fit predicts over the ladder's largest rung, and
  a predicted difference whose interval holds zero, are unresolved: shown with their interval, no point value.
  With fewer than ``MIN_SEEDS`` seeds nothing is resolved: two seeds give three resamples, not an interval.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from operator import attrgetter
from typing import Any

import numpy as np
import pandas as pd

from ablate.ablations import ModelConfig, apply_variant
from ablate.ablations.flops import flops_per_token
from ablate.errors import AblateError, UserInputError
from ablate.grid.ladder import rung_label
from ablate.grid.paths import nest_dotted
from ablate.reports.fit import (
    MIN_RUNGS,
    Interval,
    PowerLaw,
    SeedBootstrap,
    crossover,
    fit_power_law,
    interval_of,
    percentile,
)
from ablate.reports.rows import cell_value, context_columns
from ablate.result import RESULT_STATUSES
from ablate.stats import paired_delta

LADDER_COLUMNS = ("model.preset", "model.n_layers", "model.d_model", "train.steps")
METRIC = "final held-out loss: mean ln(PPL) over the held-out sets (nats/token)"
PAPER_SEQ_LEN = 4096  # the paper's context length (Sec. 3.1): the attention term of the targets' FLOPs
MAX_EXTRAPOLATION = 1e3  # no prediction more than three decades past the largest rung's compute
MIN_SEEDS = 3  # a seed bootstrap over fewer seeds has too few distinct resamples to resolve anything
FLOOR_AT_ZERO = 1e-3  # an E below this share of the lowest loss is the fit's bound, not a measured floor


@dataclass(frozen=True)
class Target:
    """A compute budget to predict at: ``flops``, and the model and tokens it stands for (when named)."""

    name: str
    flops: float
    preset: str | None = None
    tokens: float | None = None


def paper_targets() -> list[Target]:
    """The paper's scales: the 1.7B dense model at 400B and 3.5T tokens, the 15B-A2.5B MoE at 3.5T tokens (its
    active-parameter compute), at the paper's 4096-token context."""
    out = []
    for name, preset, tokens in (("1.7B dense, 400B tokens", "paper-dense-1.7b", 400e9),
                                 ("1.7B dense, 3.5T tokens", "paper-dense-1.7b", 3.5e12),
                                 ("15B-A2.5B MoE, 3.5T tokens", "paper-moe-15a2b", 3.5e12)):
        per_token = flops_per_token(ModelConfig(preset=preset), PAPER_SEQ_LEN)
        out.append(Target(name, per_token * tokens, preset, tokens))
    return out


def parse_targets(spec: str) -> list[Target]:
    """``paper`` (the default targets) or compute budgets in FLOPs, comma-separated (``1e21,3e22``)."""
    if spec.strip() == "paper":
        return paper_targets()
    out = []
    for item in spec.split(","):
        try:
            value = float(item)
        except ValueError:
            value = float("nan")
        if not math.isfinite(value) or value <= 0:
            raise UserInputError(f"--target: expected 'paper' or compute budgets in FLOPs like '1e21,3e22', "
                                 f"got {item.strip()!r}")
        out.append(Target(f"{value:.2e} FLOPs", value))
    return out


# ---------------------------------------------------------------------------------------------------- the
# points
def run_loss(r: pd.Series) -> float | None:
    """A run's final held-out loss (mean over its held-out sets of ln PPL); ln(val_ppl) when it has no
    sets."""
    sets = [v for k in r.index if str(k).startswith("ppl/") and (v := cell_value(r, k)) is not None and v > 0]
    if sets:
        return sum(math.log(v) for v in sets) / len(sets)
    ppl = cell_value(r, "val_ppl")
    return math.log(ppl) if ppl is not None and ppl > 0 else None


def run_flops(r: pd.Series) -> float | None:
    """A run's training FLOPs: the recorded ``flops``; for a run stored before runs recorded it, its tokens at
    the FLOPs per token of its model and sequence length."""
    flops = cell_value(r, "flops")
    if flops is not None:
        return flops
    tokens = cell_value(r, "tokens")
    if tokens is None:
        return None
    fields = {str(k)[len("model."):]: (v.item() if hasattr(v, "item") else v)
              for k, v in r.items() if str(k).startswith("model.")}
    fields = {k: v for k, v in fields.items() if v is not None and not (isinstance(v,
                                                                                   float) and math.isnan(v))}
    try:
        model = apply_variant(ModelConfig(**nest_dotted(fields)), str(r["variant"]))
        return tokens * flops_per_token(model, int(r["data.seq_len"]))
    except (AblateError, ValueError, TypeError, KeyError):
        return None


def ladder_points(runs: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """One row per finished run: ``series``, ``variant``, ``context``, ``seed``, ``rung``, ``flops``,
    ``loss``; and notes on the runs left out (diverged, unfinished, unmeasured)."""
    notes: list[str] = []
    if not len(runs):
        return pd.DataFrame(columns=["series", "variant", "context", "seed", "rung", "flops", "loss"]), notes
    ctx_cols = context_columns(runs.columns, exclude=LADDER_COLUMNS)
    varying = [c for c in ctx_cols if runs[c].astype(str).nunique() > 1]
    rows = []
    skipped = {"diverged": 0, "unfinished": 0, "unmeasured": 0}
    for _, r in runs.iterrows():
        if r["status"] not in RESULT_STATUSES:
            skipped["unfinished"] += 1
            continue
        if r["status"] == "diverged":
            skipped["diverged"] += 1
            continue
        loss, flops = run_loss(r), run_flops(r)
        if loss is None or flops is None:
            skipped["unmeasured"] += 1
            continue
        context = ", ".join(f"{c}={r[c]}" for c in varying)
        rows.append({"series": f"{r['variant']} ({context})" if context else str(r["variant"]),
                     "variant": str(r["variant"]), "context": context, "seed": r["seed"],
                     "rung": rung_label({"n_layers": int(r["model.n_layers"]),
                                         "d_model": int(r["model.d_model"])}),
                     "flops": float(flops), "loss": float(loss)})
    notes += [f"{n} {what} run(s) left out of the fits" for what, n in skipped.items() if n]
    return pd.DataFrame(rows,
                        columns=["series", "variant", "context", "seed", "rung", "flops", "loss"]), notes


# ---------------------------------------------------------------------------------------------------- the
# analysis
def _rungs(points: pd.DataFrame) -> pd.DataFrame:
    """Per rung of one series: mean compute, loss mean and std over seeds, runs; in order of compute."""
    g = points.groupby("rung")
    out = g.agg(flops=("flops", "mean"), loss_mean=("loss", "mean"), loss_std=("loss", "std"),
                n=("loss", "size"))
    return out.sort_values("flops").reset_index()


def _problems(rungs: pd.DataFrame, law: PowerLaw | None, params: dict[str, Interval]) -> list[str]:
    """Why a series' fit cannot be trusted (empty when it can)."""
    alpha, floor = params["alpha"], params["E"]
    problems = []
    if len(rungs) < MIN_RUNGS:
        problems.append(f"too few rungs ({len(rungs)} < {MIN_RUNGS})")
    means = list(rungs["loss_mean"])
    for i in range(1, len(means)):
        if means[i] >= means[i - 1]:
            problems.append(f"non-monotone ladder: the loss at {rungs['rung'][i]} ({means[i]:.4f}) is not "
                            f"below {rungs['rung'][i - 1]}'s ({means[i - 1]:.4f})")
            break
    if law is None:
        problems.append("the fit did not converge")
    elif law.alpha <= 0:
        problems.append(f"alpha <= 0 ({law.alpha:.3g}): the loss does not fall with compute")
    elif alpha.low is not None and alpha.low <= 0:
        problems.append(f"alpha's interval reaches {alpha.low:.3g} <= 0")
    if law is not None and min(v for v in (floor.value,
                                           floor.low) if v is not None) <= FLOOR_AT_ZERO * min(means):
        # E at its bound: the ladder shows no floor, and the fit extrapolates a loss that falls to zero
        problems.append("the loss floor E is not identified (the fit puts it at 0): the ladder's losses do "
                        "not bend towards a floor")
    return problems


def _loss_at(flops: float, law: PowerLaw) -> float:
    return float(law(flops))


def _fit_dict(law: PowerLaw | None, fits: list[PowerLaw | None]) -> dict[str, Interval]:
    if law is None:
        return {k: Interval(None, None, None) for k in ("E", "A", "alpha")}
    return {k: interval_of(fits, law, attrgetter(k)) for k in ("E", "A", "alpha")}


def analyse(runs: pd.DataFrame, targets: list[Target], *, baseline: str = "baseline", grid: str = ""
            ) -> dict[str, Any]:
    """The whole ladder report as plain data (what ``--format json`` prints)."""
    points, notes = ladder_points(runs)
    if not len(points):
        raise UserInputError(f"grid {grid!r} has no finished runs with a held-out loss to fit: run it first "
                             "(`ablate run GRID`)")
    boot = SeedBootstrap(sorted(set(points["seed"])))
    if boot.distinct < 10:
        notes.append(f"{len(boot.seeds)} seed(s): the intervals rest on {boot.distinct} distinct resample(s) "
                     "of the seeds and understate the uncertainty")
    top = float(points["flops"].max())
    series: dict[str, dict[str, Any]] = {}
    order = sorted(points["series"].unique(),
                   key=lambda n: (points.loc[points["series"] == n, "variant"].iloc[0]
                                                             != baseline, n))
    for name in order:
        pts = points[points["series"] == name]
        per_seed = {s: (list(p["flops"]), list(p["loss"])) for s, p in pts.groupby("seed")}
        law = fit_power_law(pts["flops"], pts["loss"])
        fits = boot.fits(str(name), per_seed, start=law)
        params = _fit_dict(law, fits)
        rungs = _rungs(pts)
        problems = _problems(rungs, law, params)
        series[str(name)] = {"variant": pts["variant"].iloc[0], "context": pts["context"].iloc[0],
                             "seeds": sorted(per_seed), "law": law, "fits": fits, "rungs": rungs,
                             "points": pts, "problems": problems, "per_seed": per_seed, "boot": boot}
    out: dict[str, Any] = {"grid": grid, "baseline": baseline, "metric": METRIC,
                           "targets": [{"name": t.name, "flops": t.flops, "preset": t.preset,
                                        "tokens": t.tokens}
                                       for t in targets],
                           "measured_flops": [float(points["flops"].min()), top], "variants": {},
                           "notes": notes}
    for name, s in series.items():
        base = next((b for b in series.values() if b["variant"] == baseline and b["context"] == s["context"]),
                    None)
        if base is None and s["variant"] != baseline:
            notes.append(f"{name}: no {baseline!r} runs at the same configuration: no differences")
        out["variants"][name] = _series_json(s, base if s["variant"] != baseline else None, targets, top)
    return out


def _series_json(s: dict[str, Any], base: dict[str, Any] | None, targets: list[Target],
                 top: float) -> dict[str, Any]:
    law, fits, reliable = s["law"], s["fits"], not s["problems"]
    enough = len(s["seeds"]) >= MIN_SEEDS
    params = _fit_dict(law, fits)
    base_ok = base is not None and not base["problems"]
    rungs = []
    for _, r in s["rungs"].iterrows():
        row = {"rung": r["rung"], "flops": float(r["flops"]), "loss_mean": float(r["loss_mean"]),
               "loss_std": None if math.isnan(r["loss_std"]) else float(r["loss_std"]), "n": int(r["n"])}
        if base is not None:
            mine = s["points"][s["points"]["rung"] == r["rung"]]
            theirs = base["points"][base["points"]["rung"] == r["rung"]]
            d = paired_delta(dict(zip(mine["seed"], mine["loss"], strict=True)),
                             dict(zip(theirs["seed"], theirs["loss"], strict=True)))
            row["delta"] = {"value": d.mean, "low": d.lo, "high": d.hi, "n": d.n}
        rungs.append(row)
    predictions = []
    for t in targets:
        too_far = t.flops > MAX_EXTRAPOLATION * top
        refused = ("unreliable fit" if not reliable else
                   f"{t.flops / top:.1e} x the largest rung's compute (the limit is {MAX_EXTRAPOLATION:.0e} "
                   "x)"
                   if too_far else None)
        pred: dict[str, Any] = {"target": t.name, "flops": t.flops, "loss": None, "low": None, "high": None,
                                "resolved": None, "delta": None, "refused": refused}
        if reliable and not too_far:
            iv = interval_of(fits, law, partial(_loss_at, t.flops))
            loss = _loss_at(t.flops, law)  # iv.value: the point fit's
            gain = float(law(top)) - loss  # what the fit says scaling up from the largest rung buys
            spread = iv.high - iv.low if iv.low is not None and iv.high is not None else None
            pred.update(loss=loss, low=iv.low, high=iv.high,
                        resolved=enough and spread is not None and spread < abs(gain))
        if base is not None and reliable and base_ok and not too_far:
            draws = [float(f(t.flops) - g(t.flops)) for f, g in zip(fits, base["fits"], strict=True)
                     if f is not None and g is not None]  # the same seeds in both: paired
            iv = percentile(draws, float(law(t.flops) - base["law"](t.flops)))
            pred["delta"] = {**iv.as_dict(), "resolved": enough and iv.excludes_zero}
        elif base is not None:
            pred["delta"] = {"value": None, "low": None, "high": None, "resolved": False,
                             "refused": refused or "the baseline's fit is unreliable"}
        predictions.append(pred)
    cross = None
    if base is not None and reliable and base_ok:
        c = crossover(law, base["law"], float(s["rungs"]["flops"].min()), MAX_EXTRAPOLATION * top)
        cross = None if c is None else {"flops": c, "extrapolated": c > top}
    return {"variant": s["variant"], "context": s["context"], "seeds": [int(x) for x in s["seeds"]],
            "n_runs": len(s["points"]), "rungs": rungs,
            "fit": {**{k: v.as_dict() for k, v in params.items()}, "reliable": reliable,
                    "problems": s["problems"]},
            "predictions": predictions, "crossover": cross,
            "delta_trend": None if base is None else delta_trend(s["points"], base["points"], s["boot"]),
            "_law": law, "_fits": fits}


def delta_trend(mine: pd.DataFrame, theirs: pd.DataFrame, boot: SeedBootstrap) -> dict[str, object] | None:
    """How the measured difference to the baseline changes with scale, without the power law: the slope of the
    paired per-rung difference against log10(compute), per decade, with its interval over the same seed
    resamples as the fits. None with fewer than two rungs."""
    pairs = mine.merge(theirs, on=["seed", "rung"], suffixes=("", "_base"))
    if pairs["rung"].nunique() < 2:
        return None
    pairs = pairs.assign(x=np.log10((pairs["flops"] + pairs["flops_base"]) / 2),
                         d=pairs["loss"] - pairs["loss_base"])
    by_seed = {s: p for s, p in pairs.groupby("seed")}

    def slope(frame: pd.DataFrame) -> float | None:
        return float(np.polyfit(frame["x"], frame["d"], 1)[0]) if frame["x"].nunique() >= 2 else None

    draws = []
    for sample in boot.samples:
        chosen = [by_seed[boot.seeds[i]] for i in sample if boot.seeds[i] in by_seed]
        draws.append(slope(pd_concat(chosen)) if chosen else None)
    iv = percentile(draws, slope(pairs))
    return {"per_decade": iv.as_dict(), "resolved": len(boot.seeds) >= MIN_SEEDS and iv.excludes_zero}


def pd_concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """``frames`` one under the other, numbered afresh."""
    return pd.concat(frames, ignore_index=True)
