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

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from ablate.reports.cells import Cell, Column, Row, Table
from ablate.reports.data import GridData
from ablate.reports.family import REFERENCE, Comparison, Families, own_family
from ablate.reports.family import families as grid_families
from ablate.reports.render import wrappable
from ablate.reports.rows import RESULT_STATUSES, cell_value, modal_context, pair_key
from ablate.reports.spec import VariantInfo
from ablate.reports.verdict import paired, ratio_metric
from ablate.stats import (
    ALPHA,
    DEFAULT,
    EMPTY,
    Decision,
    Delta,
    Stats,
    family_of,
    family_size,
    family_text,
    level,
    method_note,
    paired_delta,
)
from ablate.stats.power import needs, needs_text

HOLDS, CONTRADICTED, UNCLEAR = "holds", "contradicted", "not enough evidence"
VERDICTS = (HOLDS, CONTRADICTED, UNCLEAR)
Kind = Literal["delta", "ratio", "level", "stability"]


@dataclass(frozen=True)
class Claim:
    """One claim of the paper. ``treatment`` is the arm it is about, ``reference`` the arm it is compared with
    (unused by a level claim); ``expect`` the sign of ``treatment - reference`` the paper reports (delta,
    stability); ``bound`` the line a ratio stays under or a level reaches; ``paper`` the paper's own
    numbers."""

    key: str
    text: str
    treatment: str
    reference: str
    metric: str  # a runs column; for stability claims "survival" or "trouble"
    expect: int = -1
    kind: Kind = "delta"
    bound: float | None = None
    paper: str = ""

    @property
    def modal(self) -> bool:
        """Measured at the grid's most common configuration only, as Tables 1 and 4 read it (so a paired
        claim is the same comparison as their row and as ``report compare``'s in that cell); a stability
        claim reads every configuration, for the learning rates where something went wrong."""
        return self.kind != "stability"


# a sink: at least this share of attention on the first token (paper: baseline 0.467, Fig. 2)
SINK_F_ATTN = 0.3
_BASE, _G1, _G1_HEAD, _SHARED, _G2 = "table1:1", "table1:5", "table1:10", "table1:12", "table1:6"

CLAIMS = (
    Claim("sink", f"The baseline forms an attention sink (F-Attn >= {SINK_F_ATTN})", _BASE, _BASE, "f_attn",
          kind="level", bound=SINK_F_ATTN, paper="baseline 0.467 (Table 4 row 1, Fig. 2)"),
    Claim("lower_f_attn", "G1 lowers the attention sink (F-Attn)", _G1, _BASE, "f_attn",
          paper="0.048 vs 0.467 (Table 4 rows 2, 1)"),
    Claim("g1_removes_sink", "G1 leaves at most 1/3 of the baseline's F-Attn", _G1, _BASE, "f_attn",
          kind="ratio", bound=1 / 3, paper="0.048 / 0.467 = 0.10"),
    Claim("lower_m_act", "G1 lowers massive activations (M-Act)", _G1, _BASE, "m_act",
          paper="94 vs 1053 (Table 4 rows 2, 1)"),
    Claim("g1_halves_m_act", "G1 leaves at most 1/2 of the baseline's M-Act", _G1, _BASE, "m_act",
          kind="ratio", bound=0.5, paper="94 / 1053 = 0.09"),
    Claim("g1_beats_baseline", "G1 (SDPA output gate) beats the baseline's PPL", _G1, _BASE, "val_ppl",
          paper="Table 1 rows 5, 1; Table 2 rows 2, 1"),
    Claim("stable_lr", "G1 trains through a learning rate at which the baseline diverges or spikes", _G1,
          _BASE, "trouble", expect=1, kind="stability", paper="Table 2 rows 6, 10, 12, 14; Fig. 1"),
    Claim("survives_lr", "G1 survives a learning rate at which the baseline diverges", _G1, _BASE, "survival",
          expect=1, kind="stability", paper="Table 2 rows 12, 14"),
    Claim("headwise_lower_f_attn", "G1 headwise also lowers the attention sink", _G1_HEAD, _BASE, "f_attn",
          paper="0.073 vs 0.467 (Table 4 rows 3, 1)"),
    Claim("head_specific", "Head-specific beats head-shared gating on PPL", _G1, _SHARED, "val_ppl",
          paper="Table 1 rows 5, 12"),
    Claim("head_shared_keeps_sink", "Head-shared gating keeps more of the sink than head-specific", _SHARED,
          _G1, "f_attn", expect=1, paper="0.301 vs 0.048 (Table 4 rows 4, 2)"),
    Claim("sparse_gate", "Head-specific gate scores are sparser (lower) than head-shared ones", _G1, _SHARED,
          "gate_score", paper="0.116 vs 0.271 (Table 4 rows 2, 4)"),
    Claim("multiplicative", "Multiplicative beats additive gating on PPL", _G1, "table1:14", "val_ppl",
          paper="Table 1 rows 5, 14"),
    Claim("sigmoid", "Sigmoid beats SiLU as the gate's activation on PPL", _G1, "table1:15", "val_ppl",
          paper="Table 1 rows 5, 15"),
    Claim("g1_beats_g2", "G1 beats G2 (value gate) on PPL", _G1, _G2, "val_ppl", paper="Table 1 rows 5, 6"),
    Claim("g2_keeps_sink", "G2 (value gate) keeps more of the sink than G1", _G2, _G1, "f_attn", expect=1,
          paper="0.297 vs 0.048 (Table 4 rows 5, 2)"),
    Claim("g2_lowers_m_act", "G2 lowers massive activations too (they are not what makes the sink)", _G2,
          _BASE, "m_act", paper="125 vs 1053 (Table 4 rows 5, 1)"),
    Claim("independent_keeps_sink", "An input-independent gate keeps more of the sink than G1", "table4:6",
          _G1, "f_attn", expect=1, paper="0.364 vs 0.048 (Table 4 rows 6, 2)"),
    Claim("ns_sigmoid_keeps_sink", "A non-sparse (NS-sigmoid) gate keeps more of the sink than G1",
          "table4:7", _G1, "f_attn", expect=1, paper="0.451 vs 0.048 (Table 4 rows 7, 2)"),
)
METRIC_NAMES = {"val_ppl": "PPL", "f_attn": "F-Attn", "m_act": "M-Act", "gate_score": "gate score",
                "survival": "survived", "trouble": "trained through"}
_DIGITS = {"val_ppl": 2, "m_act": 1}


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
        digits = 2 if self._ratio else _DIGITS.get(self.claim.metric, 3)
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


def can_be_tested(claim: Claim, runs: Any, catalogue: Mapping[str, VariantInfo]) -> bool:
    """Whether the grid ran both arms of the claim (in any status): a claim it could have tested."""
    if not len(runs):
        return False
    present = set(runs["variant"])
    return all(v in present for v in arms(claim, catalogue))


def evaluate_claim(claim: Claim, runs: Any, catalogue: Mapping[str, VariantInfo], *,
                   stats: Stats = DEFAULT, decisions: Sequence[Decision] = ()) -> Verdict:
    """One claim's verdict over the runs frame (every status; done runs are measured, diverged ones count in
    the stability claims), as a family of one; ``scorecard`` corrects the claims together."""
    return decide(measure_claim(claim, runs, catalogue, stats=stats, decisions=decisions), stats)


def measure_claim(claim: Claim, runs: Any, catalogue: Mapping[str, VariantInfo], *,
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


def _evaluate(claim: Claim, runs: Any, treat_v: str | None, ref_v: str | None, stats: Stats,
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


def _ratio(claim: Claim, treat: Any, ref: Any, treat_v: str | None, ref_v: str | None, stats: Stats,
           decisions: Sequence[Decision]) -> Verdict:
    bound = claim.bound if claim.bound is not None else 1.0
    delta = paired(treat, ref, claim.metric, stats=stats, decisions=decisions, ratio=True, bound=bound)
    if delta.n == 0:
        return _missing(claim, treat_v, ref_v,
                        f"no paired {claim.metric} values of {treat_v} and {ref_v} (same config and seed)")
    basis = f"geometric mean of {treat_v} / {ref_v}, {delta.n} paired seed(s), against {bound:.2g}"
    return _measured(claim, treat_v, ref_v, delta, basis)


def _trained_through(r: Any, metric: str) -> float:
    """1 when the run finished (and, for ``trouble``, recorded no loss spike), else 0."""
    if r["status"] != "done":
        return 0.0
    return float(metric == "survival" or not (cell_value(r, "loss_spikes") or 0))


def _stability(claim: Claim, treat: Any, ref: Any, treat_v: str | None, ref_v: str | None,
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


def scorecard(runs: Any, catalogue: Mapping[str, VariantInfo], *, every_claim: bool = False,
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


def _in_grid(v: Verdict, runs: Any, families: Families) -> Comparison | None:
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


def scorecard_note(verdicts: list[Verdict], stats: Stats = DEFAULT) -> str:
    """The line under the scorecard: method, n, and the families the claims' p were corrected in."""
    note = method_note([v.delta for v in verdicts], stats, what="CIs").replace("(bold)", "(holds)")
    families = sorted({v.family for v in verdicts if v.family and v.delta.decision is None})
    if not families:
        return note
    head = note.split("; significant")[0]
    return (f"{head}; a claim holds when significant after its family's correction at alpha={ALPHA:g}: "
            + "; ".join(families))


def unresolved_lines(verdicts: list[Verdict]) -> list[str]:
    """One line per claim without enough evidence that more seeds could resolve."""
    return [f"{v.claim.text}: {v.effect} {v.ci}, {needs_text(v.needs, v.delta)} ({v.family})"
            for v in verdicts if v.verdict == UNCLEAR and v.delta.n >= 2]


def _css(verdict: str) -> str:
    return {HOLDS: "holds", CONTRADICTED: "contradicted"}.get(verdict, "unclear")


def scorecard_html(verdicts: list[Verdict], stats: Stats = DEFAULT) -> str:
    """The scorecard as an HTML table (``id="scorecard"``)."""
    e = html.escape
    out = ['<table class="ablate" id="scorecard"><caption>The paper\'s claims, as measured in this grid '
           '(paired by config and seed; 95% paired t CI)</caption>',
           "<thead><tr><th class=\"method\">Claim</th><th>Effect</th><th>95% "
           "CI</th><th>n</th><th>Verdict</th>"
           '<th class="method">Detail</th><th class="method">Pairing</th><th class="method">Paper</th>'
           "</tr></thead><tbody>"]
    for v in verdicts:
        out.append(f'<tr><td class="method">{e(v.claim.text)}</td><td>{wrappable(v.effect)}</td>'
                   f'<td>{wrappable(v.ci)}</td><td>{v.delta.n}</td>'
                   f'<td class="{_css(v.verdict)}">{e(v.verdict)}</td><td class="method">{e(v.detail)}</td>'
                   f'<td class="method">{e(v.pairing)}</td><td class="method">{e(v.claim.paper)}</td></tr>')
    if not verdicts:
        out.append(
            '<tr><td class="method" colspan="8">the grid runs no pair of arms that a claim compares</td></tr>'
        )
    out.append("</tbody></table>")
    out += [f'<p class="note">{e(line)}</p>' for line in _footer(verdicts, stats)]
    return "\n".join(out) + "\n"


def _footer(verdicts: list[Verdict], stats: Stats) -> list[str]:
    return [scorecard_note(verdicts, stats), *unresolved_lines(verdicts)] if verdicts else []


def scorecard_markdown(verdicts: list[Verdict], stats: Stats = DEFAULT) -> str:
    """The scorecard as a markdown table."""
    lines = ["| Claim | Effect | 95% CI | n | Verdict | Detail | Pairing | Paper |",
             "| --- | ---: | ---: | ---: | --- | --- | --- | --- |"]
    for v in verdicts:
        lines.append(f"| {v.claim.text} | {v.effect} | {v.ci} | {v.delta.n} | {v.verdict} | {v.detail} | "
                     f"{v.pairing} | {v.claim.paper} |")
    footer = _footer(verdicts, stats)
    lines += [""] + [f"*{line}*" for line in footer] if footer else []
    return "\n".join(lines) + "\n"


# on a narrow terminal, the columns that leave first; the detail says what the unresolved lines would repeat
TERMINAL_LEAVES = ("pairing", "paper", "detail")


def scorecard_table(verdicts: list[Verdict], stats: Stats = DEFAULT) -> Table:
    """The scorecard as a report ``Table`` (a row per claim; bold: a claim that holds), for the terminal's
    renderer."""
    cols = [Column("effect", "Effect", "measured"), Column("ci", "95% CI", "measured"),
            Column("n", "n", "measured"), Column("verdict", "Verdict", "descriptor"),
            Column("detail", "Detail", "descriptor"), Column("pairing", "Pairing", "descriptor"),
            Column("paper", "Paper", "descriptor")]
    rows = [Row(v.claim.text, None, None, [], {
        "effect": Cell(v.effect, v.delta.mean), "ci": Cell(v.ci), "n": Cell(str(v.delta.n), v.delta.n),
        "verdict": Cell(v.verdict), "detail": Cell(v.detail), "pairing": Cell(v.pairing),
        "paper": Cell(v.claim.paper)}) for v in verdicts]
    notes = [scorecard_note(verdicts, stats)] if verdicts else ["the grid runs no pair of arms that a claim "
                                                                "compares"]
    return Table(None, "The paper's claims, as measured in this grid (paired by config and seed; 95% paired "
                 "t CI)", "", cols, rows, notes, unresolved_lines(verdicts), slug="scorecard",
                 row_header="Claim")


def scorecard_csv(verdicts: list[Verdict], stats: Stats = DEFAULT) -> str:
    """The scorecard as CSV: the JSON rows' fields, the CI as ``ci_lo``/``ci_hi``."""
    import csv
    import io

    buf = io.StringIO()
    fields = ["key", "claim", "effect", "ci_lo", "ci_hi", "scale", "n", "verdict", "detail", "kind", "metric",
              "paper", "p", "p_adj", "p_perm", "method", "needs_seeds", "family", "correlation",
              "worth_unpaired_seeds", "resolved_at_look"]
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for v in verdicts:
        row = v.as_dict()
        ci = row.pop("ci") or (None, None)
        writer.writerow({**row, "ci_lo": ci[0], "ci_hi": ci[1]})
    return buf.getvalue()


def scorecard_json(verdicts: list[Verdict], stats: Stats = DEFAULT) -> str:
    """The scorecard as a JSON list of ``Verdict.as_dict()`` rows."""
    import json

    return json.dumps([v.as_dict() for v in verdicts], indent=2) + "\n"


SCORECARD_FORMATS = {"markdown": scorecard_markdown, "json": scorecard_json, "csv": scorecard_csv,
                     "html": scorecard_html}
