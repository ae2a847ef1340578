"""The paper's claims as measured in a grid: effect, 95% CI, sample size, and a verdict with its reason.

A claim names the arms it is about by their catalogue refs (``tableN:R``) and is one of four kinds:

- ``delta``: the paired difference ``treatment - reference`` of a metric over runs with the same configuration
  apart from the variant and the same seed;
- ``ratio``: the geometric mean of the paired ratios ``treatment / reference`` (how much of the reference's
  value is left; t interval on the paired log ratios), read against ``bound``: it holds below, is contradicted
  above;
- ``level``: one arm's value over its runs (the baseline's F-Attn: does it form a sink at all?), read against
  ``bound``: it holds above, is contradicted below;
- ``stability``: at the configurations (learning rates) where some run of either arm diverged (``survival``)
  or diverged or recorded a loss spike (``trouble``), the paired share of runs that trained through.

Every claim is read by ``ablate.stats``, the machinery the tables use. A claim that is one of the grid's
comparisons (an arm against the baseline on a metric, on the metric's declared scale: M-Act as a ratio)
reads the grid's family (``reports.family``): its corrected p, verdict and seeds needed are those of
``report compare`` and the tables. The other claims (two arms neither of which is the baseline, a ratio
against a bound, a level, a stability count) are the scorecard's own questions, corrected together (Holm by
default) and said so; a claim whose pairs ``ablate run --until-resolved`` decided is read at the look that
decided it (``reports.verdict``). Each paired claim also says what the
pairing did: the arms' correlation across seeds and how many unpaired seeds it was worth. A claim *holds*
when its corrected p is below 0.05 on the side the paper reports, is *contradicted* when it is below 0.05 on
the other side. Anything else is *not enough evidence*, and the detail says why: an arm missing, one pair
only, an effect that points the other way from the claim (more seeds could only contradict it), or the
seeds too few for the effect observed ("needs ≈ N seeds", and the family it was worked out for). Only done
runs are measured; a diverged run counts in the stability claims only. The probe claims
(F-Attn, M-Act, gate scores: the paper's Table 4, measured at one training setting) and the PPL claims read
the grid's most common configuration, as Tables 1 and 4 do, so a high-learning-rate arm added for the
stability claims does not mix in and each paired claim is one comparison of the grid; the stability claims
read every configuration.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ablate.reports.claims import CLAIM_DIGITS, CLAIMS, METRIC_NAMES, Claim
from ablate.reports.data import GridData
from ablate.reports.family import REFERENCE, Comparison, Families, own_family
from ablate.reports.family import families as grid_families
from ablate.reports.rows import cell_value, modal_context, pair_key
from ablate.reports.spec import VariantInfo
from ablate.reports.verdict import paired, ratio_metric
from ablate.result import RESULT_STATUSES
from ablate.stats import (
    DEFAULT,
    EMPTY,
    Decision,
    Delta,
    Stats,
    family_of,
    family_size,
    family_text,
    level,
    paired_delta,
)
from ablate.stats.power import needs, needs_text

if TYPE_CHECKING:
    import pandas as pd

HOLDS, CONTRADICTED, UNCLEAR = "holds", "contradicted", "not enough evidence"
VERDICTS = (HOLDS, CONTRADICTED, UNCLEAR)
@dataclass(frozen=True)
class Verdict:
    """A claim measured: ``delta`` holds the effect (mean over pairs or runs), its CI and n."""

    claim: Claim
    treatment: str | None
    reference: str | None
    delta: Delta
    verdict: str
    detail: str
    basis: str = ""  # what was measured (the detail before the verdict's reason)
    where: str = ""  # the configuration a probe claim was read at
    needs: int | None = None  # seeds to resolve the observed effect, for a claim without enough evidence
    family: str = ""  # what its p was corrected over: "Holm over 12 comparisons in this scorecard"

    @property
    def _ratio(self) -> bool:
        """Read as a ratio: a ratio claim, or a delta claim on a metric compared by its ratio (M-Act)."""
        return self.claim.kind == "ratio" or self.delta.scale == "log"

    def _fmt(self, x: float) -> str:
        digits = 2 if self._ratio else CLAIM_DIGITS.get(self.claim.metric, 3)
        sign = "+" if self.claim.kind in ("delta", "stability") and not self._ratio else ""
        return f"{x:{sign}.{digits}f}"

    @property
    def effect(self) -> str:
        d, name = self.delta, METRIC_NAMES.get(self.claim.metric, self.claim.metric)
        if d.mean is None:
            return ""
        kind = self.claim.kind
        label = f"{name} ratio" if self._ratio else name if kind == "level" else f"Δ {name}"
        return f"{label} {self._fmt(d.mean)}"

    @property
    def ci(self) -> str:
        d = self.delta
        return "" if d.lo is None or d.hi is None else f"[{self._fmt(d.lo)}, {self._fmt(d.hi)}]"

    @property
    def pairing(self) -> str:
        """What pairing by seed did: the arms' correlation and the unpaired seeds it was worth (paired
        claims with 3 pairs or more)."""
        p = self.delta.pairing
        return p.text() if p is not None and self.claim.kind in ("delta", "ratio") else ""

    def as_dict(self) -> dict[str, Any]:
        """The JSON row: ``claim`` (its text), ``effect`` (a number or None), ``ci`` ([lo, hi] or None),
        ``n``, ``verdict``, ``detail``, plus the claim's ``key``, ``kind``, ``metric`` and the ``paper``'s
        numbers."""
        d = self.delta
        paired_ = d.pairing if self.pairing else None
        return {"key": self.claim.key, "claim": self.claim.text, "effect": d.mean,
                "ci": None if d.lo is None else [d.lo, d.hi], "scale": "ratio" if self._ratio else "diff",
                "n": d.n, "verdict": self.verdict,
                "detail": self.detail, "kind": self.claim.kind, "metric": self.claim.metric,
                "paper": self.claim.paper, "p": d.p, "p_adj": d.p_adj, "p_perm": d.p_perm, "method": d.method,
                "needs_seeds": self.needs, "family": self.family,
                "correlation": paired_.r if paired_ else None,
                "worth_unpaired_seeds": paired_.worth if paired_ else None,
                "resolved_at_look": d.decision.look if d.decision else None}


def _variant(catalogue: Mapping[str, VariantInfo], ref: str) -> str | None:
    return next((v.name for v in catalogue.values() if ref in v.paper), None)


def _expected_side(claim: Claim) -> int:
    """The side of the null the paper's claim puts the effect on: a ratio stays under its bound, a level
    above."""
    return -1 if claim.kind == "ratio" else 1 if claim.kind == "level" else claim.expect


def _line(v: Verdict) -> str:
    line = _line_value(v)
    return f"{line:.2g}" if v._ratio else f"{line:g}"


def decide(v: Verdict, stats: Stats = DEFAULT, m: int = 1, family: str | None = None) -> Verdict:
    """The verdict of a measured claim from its (corrected) p: holds, contradicted, or not enough evidence
    with the reason (one pair; no spread; an effect that points the other way from the claim; the seeds the
    observed effect needs; the interval across the line). ``m`` is the size of the family its p was
    corrected over, ``family`` that family in words (default: ``m`` claims in this scorecard)."""
    d, where, n = v.delta, f" (at {v.where})" if v.where else "", None
    if not v.basis:  # an arm or the pairs are missing: the detail says which
        return v
    if d.p is None:
        family = ""
    elif d.decision is not None or family is None:
        family = family_of(d, stats, m, "in this scorecard")
    decided = f"; {d.decision.reading()}" if d.decision is not None else ""
    expected = _expected_side(v.claim)
    if d.resolved and d.sign == expected:
        verdict, reason = HOLDS, decided
    elif d.resolved and d.sign == -expected:
        verdict, reason = CONTRADICTED, decided
    elif d.n < 2:
        verdict, reason = UNCLEAR, "; n=1: a confidence interval needs at least two"
    elif d.identical:
        verdict, reason = UNCLEAR, f"; {v.claim.metric} equal at every seed: no difference for seeds to find"
    else:
        line = _line_value(v)
        no_ci_or_crosses = d.lo is None or d.hi is None or d.lo <= line <= d.hi  # lo and hi: both or neither
        crosses = ("no spread: the signs are the only evidence" if d.no_spread else
                   f"the CI crosses {_line(v)}" if no_ci_or_crosses else f"not significant after {family}")
        if d.sign == -expected:  # more seeds of this effect could only contradict the claim
            verdict, reason = UNCLEAR, (f"{decided}; {crosses}; the effect points the other way from the "
                                        f"paper's ({family})")
        else:
            n = needs(d, stats, m)
            verdict, reason = UNCLEAR, (f"{decided}; {crosses}; not enough evidence: {needs_text(n, d)} "
                                        f"({family})")
    return replace(v, verdict=verdict, detail=f"{v.basis}{reason}{where}", needs=n, family=family)


def _line_value(v: Verdict) -> float:
    """The line a claim's effect is read against: 0 for a difference, 1 for a ratio, else its bound."""
    claim = v.claim
    if claim.kind in ("delta", "stability"):
        return 1.0 if v._ratio else 0.0
    return claim.bound if claim.bound is not None else (1.0 if claim.kind == "ratio" else 0.0)


def arms(claim: Claim, catalogue: Mapping[str, VariantInfo]) -> tuple[str | None, str | None]:
    """The catalogue variants a claim compares: ``(treatment, reference)`` (None where the catalogue has
    none)."""
    return _variant(catalogue, claim.treatment), _variant(catalogue, claim.reference)


def can_be_tested(claim: Claim, runs: pd.DataFrame, catalogue: Mapping[str, VariantInfo]) -> bool:
    """Whether the grid ran both arms of the claim (in any status): a claim it could have tested."""
    if not len(runs):
        return False
    present = set(runs["variant"])
    return all(v in present for v in arms(claim, catalogue))


def evaluate_claim(claim: Claim, runs: pd.DataFrame, catalogue: Mapping[str, VariantInfo], *,
                   stats: Stats = DEFAULT, decisions: Sequence[Decision] = ()) -> Verdict:
    """One claim's verdict over the runs frame (every status; done runs are measured, diverged ones count in
    the stability claims), as a family of one; ``scorecard`` corrects the claims together."""
    return decide(measure_claim(claim, runs, catalogue, stats=stats, decisions=decisions), stats)


def measure_claim(claim: Claim, runs: pd.DataFrame, catalogue: Mapping[str, VariantInfo], *,
                  stats: Stats = DEFAULT, decisions: Sequence[Decision] = ()) -> Verdict:
    """A claim measured, before its verdict (``decide`` gives it, from the family's corrected p)."""
    treat_v, ref_v = arms(claim, catalogue)
    where = ""
    if claim.modal:
        runs, _, where = modal_context(runs)
    return replace(_evaluate(claim, runs, treat_v, ref_v, stats, decisions), where=where)


def _missing(claim: Claim, treat_v: str | None, ref_v: str | None, detail: str) -> Verdict:
    return Verdict(claim, treat_v, ref_v, EMPTY, UNCLEAR, detail)


def _measured(claim: Claim, treat_v: str | None, ref_v: str | None, delta: Delta, basis: str) -> Verdict:
    return Verdict(claim, treat_v, ref_v, delta, UNCLEAR, basis, basis)


def _evaluate(claim: Claim, runs: pd.DataFrame, treat_v: str | None, ref_v: str | None, stats: Stats,
              decisions: Sequence[Decision]) -> Verdict:
    runs = runs[runs["status"].isin(RESULT_STATUSES)] if len(runs) else runs
    treat = runs[runs["variant"] == treat_v] if len(runs) else runs
    ref = runs[runs["variant"] == ref_v] if len(runs) else runs
    needed = ((treat_v, claim.treatment, treat),) if claim.kind == "level" else (
        (treat_v, claim.treatment, treat), (ref_v, claim.reference, ref))
    missing = [v or ref_name for v, ref_name, r in needed if not len(r)]
    if missing:
        return _missing(claim, treat_v, ref_v, f"the grid has no finished runs of {' and '.join(missing)}")
    if claim.kind == "stability":
        return _stability(claim, treat, ref, treat_v, ref_v, stats)
    if claim.kind == "level":
        t = {pair_key(r): cell_value(r, claim.metric) for _, r in treat.iterrows() if r["status"] == "done"}
        return _level(claim, t, treat_v, stats)
    if claim.kind == "ratio":
        return _ratio(claim, treat, ref, treat_v, ref_v, stats, decisions)
    # on the metric's declared scale (M-Act by its ratio), as the grid's comparisons read it
    delta = paired(treat, ref, claim.metric, stats=stats, decisions=decisions,
                   ratio=ratio_metric(claim.metric))
    if delta.n == 0:
        return _missing(claim, treat_v, ref_v,
                        f"no paired {claim.metric} values of {treat_v} and {ref_v} (same config and seed)")
    return _measured(claim, treat_v, ref_v, delta, f"{treat_v} vs {ref_v}, {delta.n} paired seed(s)")


def _level(claim: Claim, values: Mapping[Any, float | None], variant: str | None, stats: Stats) -> Verdict:
    bound = claim.bound if claim.bound is not None else 0.0
    delta = level(values.values(), bound=bound, stats=stats)
    if delta.n == 0:
        return _missing(claim, variant, None, f"no {claim.metric} measured on {variant} (probes off?)")
    return _measured(claim, variant, None, delta, f"{variant}, mean of {delta.n} run(s) against {bound:g}")


def _ratio(claim: Claim, treat: pd.DataFrame, ref: pd.DataFrame, treat_v: str | None, ref_v: str | None,
           stats: Stats, decisions: Sequence[Decision]) -> Verdict:
    bound = claim.bound if claim.bound is not None else 1.0
    delta = paired(treat, ref, claim.metric, stats=stats, decisions=decisions, ratio=True, bound=bound)
    if delta.n == 0:
        return _missing(claim, treat_v, ref_v,
                        f"no paired {claim.metric} values of {treat_v} and {ref_v} (same config and seed)")
    basis = f"geometric mean of {treat_v} / {ref_v}, {delta.n} paired seed(s), against {bound:.2g}"
    return _measured(claim, treat_v, ref_v, delta, basis)


def _trained_through(r: pd.Series, metric: str) -> float:
    """1 when the run finished (and, for ``trouble``, recorded no loss spike), else 0."""
    if r["status"] != "done":
        return 0.0
    return float(metric == "survival" or not (cell_value(r, "loss_spikes") or 0))


def _stability(claim: Claim, treat: pd.DataFrame, ref: pd.DataFrame, treat_v: str | None, ref_v: str | None,
               stats: Stats) -> Verdict:
    t = {pair_key(r): _trained_through(r, claim.metric) for _, r in treat.iterrows()}
    b = {pair_key(r): _trained_through(r, claim.metric) for _, r in ref.iterrows()}
    shared = set(t) & set(b)
    stormy = {k[0] for k in shared if t[k] == 0.0 or b[k] == 0.0}  # configurations where something went wrong
    keys = [k for k in shared if k[0] in stormy]
    trouble = "diverged" if claim.metric == "survival" else "diverged or spiked"
    if not keys:
        return _missing(claim, treat_v, ref_v,
                        f"no paired run of either arm {trouble}: raise the learning rate until the baseline "
                        "does")
    delta = paired_delta({k: t[k] for k in keys}, {k: b[k] for k in keys}, stats=stats)
    lrs = sorted({dict(k[0]).get("train.lr") for k in keys}, key=lambda x: (x is None, x))
    t_ok, b_ok = sum(t[k] for k in keys), sum(b[k] for k in keys)
    verb = "survived" if claim.metric == "survival" else "trained through"
    basis = (f"at lr {', '.join(f'{x:g}' for x in lrs if x is not None)}: {treat_v} {verb} "
             f"{t_ok:.0f}/{len(keys)}, {ref_v} {b_ok:.0f}/{len(keys)}")
    return _measured(claim, treat_v, ref_v, delta, basis)


def scorecard(runs: pd.DataFrame, catalogue: Mapping[str, VariantInfo], *, every_claim: bool = False,
              stats: Stats = DEFAULT, decisions: Sequence[Decision] = (),
              families: Families | None = None) -> list[Verdict]:
    """The claims of CLAIMS that the grid can test (both arms ran; ``every_claim``: all of them), measured on
    ``runs`` (the store's runs frame of one grid). A claim that is one of the grid's comparisons reads its
    family (``families``, made from ``runs`` when not given); the others are corrected together
    (``stats.correction``); a claim whose pairs ``--until-resolved`` decided (``decisions``) is read at
    its look instead."""
    if families is None:
        families = grid_families(GridData("", runs, None, None, None, None, catalogue,
                                          decisions=list(decisions)), REFERENCE, stats)
    measured = [measure_claim(c, runs, catalogue, stats=stats, decisions=decisions) for c in CLAIMS
                if every_claim or can_be_tested(c, runs, catalogue)]
    found = [_in_grid(v, runs, families) for v in measured]
    deltas = own_family([v.delta for v in measured], found, stats)
    m = family_size(d for d, c in zip(deltas, found, strict=True) if c is None)
    return [decide(replace(v, delta=d), stats, c.m, c.family) if c is not None else
            decide(replace(v, delta=d), stats, m, family_text(stats, m, "of the scorecard's own claims"))
            for v, d, c in zip(measured, deltas, found, strict=True)]


def _in_grid(v: Verdict, runs: pd.DataFrame, families: Families) -> Comparison | None:
    """The grid's comparison a measured claim is (an arm against the family's reference, on the metric's
    declared scale, over the same runs), or None: then it is the scorecard's own question."""
    claim = v.claim
    if claim.kind != "delta" or v.reference != families.reference or v.delta.mean is None:
        return None
    pool = runs[runs["status"].isin(RESULT_STATUSES)] if len(runs) else runs
    if claim.modal:
        pool, _, _ = modal_context(pool)
    treat, ref = pool[pool["variant"] == v.treatment], pool[pool["variant"] == v.reference]
    return families.read(claim.metric, treat, ref, ratio=ratio_metric(claim.metric))
