"""The paper's claims as measured in a grid: effect, bootstrap CI, sample size, and a verdict with its reason.

A claim names the arms it is about by their catalogue refs (``tableN:R``) and is one of four kinds:

- ``delta``: the paired difference ``treatment - reference`` of a metric over runs with the same configuration apart
  from the variant and the same seed; it *holds* when the whole 95% CI lies on the side the paper reports, is
  *contradicted* when it lies wholly on the other side;
- ``ratio``: ``mean(treatment) / mean(reference)`` over paired runs (how much of the reference's value is left, CI
  from resampling the pairs); holds when the whole CI is at or below ``bound``, contradicted when wholly above;
- ``level``: one arm's value over its runs (the baseline's F-Attn: does it form a sink at all?); holds when the whole
  CI is at or above ``bound``, contradicted when wholly below;
- ``stability``: at the configurations (learning rates) where some run of either arm diverged (``survival``) or
  diverged or recorded a loss spike (``trouble``), the paired share of runs that trained through.

Anything else is *not enough evidence*, and the detail says why (an arm missing, fewer than two pairs, a CI across
the line). Only done runs are measured; a diverged run counts in the stability claims only. The probe claims
(F-Attn, M-Act, gate scores: the paper's Table 4, measured at one training setting) read the grid's most common
configuration, as Table 4 does, so a high-learning-rate arm added for the stability claims does not mix in; the PPL
claims pair runs at every configuration.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from ablate.reports.rows import RESULT_STATUSES, cell_value, modal_context, pair_key
from ablate.reports.spec import VariantInfo
from ablate.reports.stats import Delta, bootstrap_ci, bootstrap_ratio_ci, paired_delta

HOLDS, CONTRADICTED, UNCLEAR = "holds", "contradicted", "not enough evidence"
VERDICTS = (HOLDS, CONTRADICTED, UNCLEAR)
Kind = Literal["delta", "ratio", "level", "stability"]


@dataclass(frozen=True)
class Claim:
    """One claim of the paper. ``treatment`` is the arm it is about, ``reference`` the arm it is compared with
    (unused by a level claim); ``expect`` the sign of ``treatment - reference`` the paper reports (delta,
    stability); ``bound`` the line a ratio stays under or a level reaches; ``paper`` the paper's own numbers."""

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
        """Measured at the grid's most common configuration only (the probe metrics of Table 4)."""
        return self.metric in PROBE_METRICS


PROBE_METRICS = ("f_attn", "m_act", "gate_score")
SINK_F_ATTN = 0.3  # a sink: at least this share of attention on the first token (paper: baseline 0.467, Fig. 2)
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
    Claim("stable_lr", "G1 trains through a learning rate at which the baseline diverges or spikes", _G1, _BASE,
          "trouble", expect=1, kind="stability", paper="Table 2 rows 6, 10, 12, 14; Fig. 1"),
    Claim("survives_lr", "G1 survives a learning rate at which the baseline diverges", _G1, _BASE, "survival",
          expect=1, kind="stability", paper="Table 2 rows 12, 14"),
    Claim("headwise_lower_f_attn", "G1 headwise also lowers the attention sink", _G1_HEAD, _BASE, "f_attn",
          paper="0.073 vs 0.467 (Table 4 rows 3, 1)"),
    Claim("head_specific", "Head-specific beats head-shared gating on PPL", _G1, _SHARED, "val_ppl",
          paper="Table 1 rows 5, 12"),
    Claim("head_shared_keeps_sink", "Head-shared gating keeps more of the sink than head-specific", _SHARED, _G1,
          "f_attn", expect=1, paper="0.301 vs 0.048 (Table 4 rows 4, 2)"),
    Claim("sparse_gate", "Head-specific gate scores are sparser (lower) than head-shared ones", _G1, _SHARED,
          "gate_score", paper="0.116 vs 0.271 (Table 4 rows 2, 4)"),
    Claim("multiplicative", "Multiplicative beats additive gating on PPL", _G1, "table1:14", "val_ppl",
          paper="Table 1 rows 5, 14"),
    Claim("sigmoid", "Sigmoid beats SiLU as the gate's activation on PPL", _G1, "table1:15", "val_ppl",
          paper="Table 1 rows 5, 15"),
    Claim("g1_beats_g2", "G1 beats G2 (value gate) on PPL", _G1, _G2, "val_ppl", paper="Table 1 rows 5, 6"),
    Claim("g2_keeps_sink", "G2 (value gate) keeps more of the sink than G1", _G2, _G1, "f_attn", expect=1,
          paper="0.297 vs 0.048 (Table 4 rows 5, 2)"),
    Claim("g2_lowers_m_act", "G2 lowers massive activations too (they are not what makes the sink)", _G2, _BASE,
          "m_act", paper="125 vs 1053 (Table 4 rows 5, 1)"),
    Claim("independent_keeps_sink", "An input-independent gate keeps more of the sink than G1", "table4:6", _G1,
          "f_attn", expect=1, paper="0.364 vs 0.048 (Table 4 rows 6, 2)"),
    Claim("ns_sigmoid_keeps_sink", "A non-sparse (NS-sigmoid) gate keeps more of the sink than G1", "table4:7", _G1,
          "f_attn", expect=1, paper="0.451 vs 0.048 (Table 4 rows 7, 2)"),
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

    def _fmt(self, x: float) -> str:
        digits = 2 if self.claim.kind == "ratio" else _DIGITS.get(self.claim.metric, 3)
        sign = "+" if self.claim.kind in ("delta", "stability") else ""
        return f"{x:{sign}.{digits}f}"

    @property
    def effect(self) -> str:
        d, name = self.delta, METRIC_NAMES.get(self.claim.metric, self.claim.metric)
        if d.mean is None:
            return ""
        kind = self.claim.kind
        label = f"{name} ratio" if kind == "ratio" else name if kind == "level" else f"Δ {name}"
        return f"{label} {self._fmt(d.mean)}"

    @property
    def ci(self) -> str:
        d = self.delta
        return "" if d.lo is None else f"[{self._fmt(d.lo)}, {self._fmt(d.hi)}]"

    def as_dict(self) -> dict[str, Any]:
        """The JSON row: ``claim`` (its text), ``effect`` (a number or None), ``ci`` ([lo, hi] or None), ``n``,
        ``verdict``, ``detail``, plus the claim's ``key``, ``kind``, ``metric`` and the ``paper``'s numbers."""
        d = self.delta
        return {"key": self.claim.key, "claim": self.claim.text, "effect": d.mean,
                "ci": None if d.lo is None else [d.lo, d.hi], "n": d.n, "verdict": self.verdict,
                "detail": self.detail, "kind": self.claim.kind, "metric": self.claim.metric,
                "paper": self.claim.paper}


def _variant(catalogue: Mapping[str, VariantInfo], ref: str) -> str | None:
    return next((v.name for v in catalogue.values() if ref in v.paper), None)


def _side_verdict(delta: Delta, expect: int) -> str:
    if delta.n < 2:
        return UNCLEAR
    side = delta.side()
    return HOLDS if side == expect else CONTRADICTED if side == -expect else UNCLEAR


def _why_unclear(delta: Delta, what: str) -> str:
    if delta.n < 2:
        return "; a confidence interval needs at least two"
    return f"; the CI crosses {what}"


def arms(claim: Claim, catalogue: Mapping[str, VariantInfo]) -> tuple[str | None, str | None]:
    """The catalogue variants a claim compares: ``(treatment, reference)`` (None where the catalogue has none)."""
    return _variant(catalogue, claim.treatment), _variant(catalogue, claim.reference)


def testable(claim: Claim, runs: Any, catalogue: Mapping[str, VariantInfo]) -> bool:
    """Whether the grid ran both arms of the claim (in any status): a claim it could have tested."""
    if not len(runs):
        return False
    present = set(runs["variant"])
    return all(v in present for v in arms(claim, catalogue))


def evaluate_claim(claim: Claim, runs: Any, catalogue: Mapping[str, VariantInfo]) -> Verdict:
    """One claim's verdict over the runs frame (every status; done runs are measured, diverged ones count in the
    stability claims)."""
    treat_v, ref_v = arms(claim, catalogue)
    where = ""
    if claim.modal:
        runs, _, where = modal_context(runs)
    verdict = _evaluate(claim, runs, treat_v, ref_v)
    if where:
        verdict = replace(verdict, detail=f"{verdict.detail} (at {where})")
    return verdict


def _evaluate(claim: Claim, runs: Any, treat_v: str | None, ref_v: str | None) -> Verdict:
    runs = runs[runs["status"].isin(RESULT_STATUSES)] if len(runs) else runs
    treat = runs[runs["variant"] == treat_v] if len(runs) else runs
    ref = runs[runs["variant"] == ref_v] if len(runs) else runs
    needed = ((treat_v, claim.treatment, treat),) if claim.kind == "level" else (
        (treat_v, claim.treatment, treat), (ref_v, claim.reference, ref))
    missing = [v or ref_name for v, ref_name, r in needed if not len(r)]
    if missing:
        return Verdict(claim, treat_v, ref_v, Delta(None, None, None, 0), UNCLEAR,
                       f"the grid has no finished runs of {' and '.join(missing)}")
    if claim.kind == "stability":
        return _stability(claim, treat, ref, treat_v, ref_v)
    t = {pair_key(r): cell_value(r, claim.metric) for _, r in treat.iterrows() if r["status"] == "done"}
    if claim.kind == "level":
        return _level(claim, t, treat_v)
    b = {pair_key(r): cell_value(r, claim.metric) for _, r in ref.iterrows() if r["status"] == "done"}
    if claim.kind == "ratio":
        return _ratio(claim, t, b, treat_v, ref_v)
    delta = paired_delta(t, b)
    verdict = _side_verdict(delta, claim.expect)
    if delta.n == 0:
        detail = f"no paired {claim.metric} values of {treat_v} and {ref_v} (same config and seed)"
    else:
        detail = f"{treat_v} vs {ref_v}, {delta.n} paired seed(s)"
        if verdict == UNCLEAR:
            detail += _why_unclear(delta, "0")
    return Verdict(claim, treat_v, ref_v, delta, verdict, detail)


def _level(claim: Claim, values: Mapping[Any, float | None], variant: str | None) -> Verdict:
    vals = [v for v in values.values() if v is not None]
    if not vals:
        return Verdict(claim, variant, None, Delta(None, None, None, 0), UNCLEAR,
                       f"no {claim.metric} measured on {variant} (probes off?)")
    lo, hi = bootstrap_ci(vals)
    delta = Delta(sum(vals) / len(vals), lo, hi, len(vals), tuple(vals))
    bound = claim.bound if claim.bound is not None else 0.0
    verdict = UNCLEAR if lo is None else HOLDS if lo >= bound else CONTRADICTED if hi < bound else UNCLEAR
    detail = f"{variant}, mean of {len(vals)} run(s) against {bound:g}"
    if verdict == UNCLEAR:
        detail += _why_unclear(delta, f"{bound:g}")
    return Verdict(claim, variant, None, delta, verdict, detail)


def _ratio(claim: Claim, t: Mapping[Any, float | None], b: Mapping[Any, float | None], treat_v: str | None,
           ref_v: str | None) -> Verdict:
    keys = [k for k in sorted(set(t) & set(b), key=repr) if t[k] is not None and b[k] is not None]
    tv, bv = [t[k] for k in keys], [b[k] for k in keys]
    if not keys or sum(bv) <= 0 or not math.isfinite(sum(tv) / sum(bv)):
        return Verdict(claim, treat_v, ref_v, Delta(None, None, None, 0), UNCLEAR,
                       f"no paired {claim.metric} values of {treat_v} and {ref_v} (same config and seed)")
    lo, hi = bootstrap_ratio_ci(tv, bv)
    delta = Delta(sum(tv) / sum(bv), lo, hi, len(keys), tuple(x / y if y else math.inf for x, y in zip(tv, bv, strict=True)))
    bound = claim.bound if claim.bound is not None else 1.0
    verdict = UNCLEAR if lo is None else HOLDS if hi <= bound else CONTRADICTED if lo > bound else UNCLEAR
    detail = f"mean {treat_v} / mean {ref_v}, {len(keys)} paired seed(s), against {bound:.2g}"
    if verdict == UNCLEAR:
        detail += _why_unclear(delta, f"{bound:.2g}")
    return Verdict(claim, treat_v, ref_v, delta, verdict, detail)


def _trained_through(r: Any, metric: str) -> float:
    """1 when the run finished (and, for ``trouble``, recorded no loss spike), else 0."""
    if r["status"] != "done":
        return 0.0
    return float(metric == "survival" or not (cell_value(r, "loss_spikes") or 0))


def _stability(claim: Claim, treat: Any, ref: Any, treat_v: str | None, ref_v: str | None) -> Verdict:
    t = {pair_key(r): _trained_through(r, claim.metric) for _, r in treat.iterrows()}
    b = {pair_key(r): _trained_through(r, claim.metric) for _, r in ref.iterrows()}
    shared = set(t) & set(b)
    stormy = {k[0] for k in shared if t[k] == 0.0 or b[k] == 0.0}  # configurations where something went wrong
    keys = [k for k in shared if k[0] in stormy]
    trouble = "diverged" if claim.metric == "survival" else "diverged or spiked"
    if not keys:
        return Verdict(claim, treat_v, ref_v, Delta(None, None, None, 0), UNCLEAR,
                       f"no paired run of either arm {trouble}: raise the learning rate until the baseline does")
    delta = paired_delta({k: t[k] for k in keys}, {k: b[k] for k in keys})
    lrs = sorted({dict(k[0]).get("train.lr") for k in keys}, key=lambda x: (x is None, x))
    t_ok, b_ok = sum(t[k] for k in keys), sum(b[k] for k in keys)
    verb = "survived" if claim.metric == "survival" else "trained through"
    detail = (f"at lr {', '.join(f'{x:g}' for x in lrs if x is not None)}: {treat_v} {verb} {t_ok:.0f}/{len(keys)}, "
              f"{ref_v} {b_ok:.0f}/{len(keys)}")
    verdict = _side_verdict(delta, claim.expect)
    if verdict == UNCLEAR:
        detail += _why_unclear(delta, "0")
    return Verdict(claim, treat_v, ref_v, delta, verdict, detail)


def scorecard(runs: Any, catalogue: Mapping[str, VariantInfo], *, every_claim: bool = False) -> list[Verdict]:
    """The claims of CLAIMS that the grid can test (both arms ran; ``every_claim``: all of them), measured on
    ``runs`` (the store's runs frame of one grid)."""
    return [evaluate_claim(c, runs, catalogue) for c in CLAIMS if every_claim or testable(c, runs, catalogue)]


def _css(verdict: str) -> str:
    return {HOLDS: "holds", CONTRADICTED: "contradicted"}.get(verdict, "unclear")


def scorecard_html(verdicts: list[Verdict]) -> str:
    """The scorecard as an HTML table (``id="scorecard"``)."""
    e = html.escape
    out = ['<table class="ablate" id="scorecard"><caption>The paper\'s claims, as measured in this grid '
           '(paired by config and seed; 95% bootstrap CI)</caption>',
           "<thead><tr><th class=\"method\">Claim</th><th>Effect</th><th>95% CI</th><th>n</th><th>Verdict</th>"
           '<th class="method">Detail</th><th class="method">Paper</th></tr></thead><tbody>']
    for v in verdicts:
        out.append(f'<tr><td class="method">{e(v.claim.text)}</td><td>{e(v.effect)}</td><td>{e(v.ci)}</td>'
                   f'<td>{v.delta.n}</td><td class="{_css(v.verdict)}">{e(v.verdict)}</td>'
                   f'<td class="method">{e(v.detail)}</td><td class="method">{e(v.claim.paper)}</td></tr>')
    if not verdicts:
        out.append('<tr><td class="method" colspan="7">the grid runs no pair of arms that a claim compares</td></tr>')
    out.append("</tbody></table>")
    return "\n".join(out) + "\n"


def scorecard_markdown(verdicts: list[Verdict]) -> str:
    """The scorecard as a markdown table."""
    lines = ["| Claim | Effect | 95% CI | n | Verdict | Detail | Paper |",
             "| --- | ---: | ---: | ---: | --- | --- | --- |"]
    for v in verdicts:
        lines.append(f"| {v.claim.text} | {v.effect} | {v.ci} | {v.delta.n} | {v.verdict} | {v.detail} | "
                     f"{v.claim.paper} |")
    return "\n".join(lines) + "\n"


def scorecard_csv(verdicts: list[Verdict]) -> str:
    """The scorecard as CSV: the JSON rows' fields, the CI as ``ci_lo``/``ci_hi``."""
    import csv
    import io

    buf = io.StringIO()
    fields = ["key", "claim", "effect", "ci_lo", "ci_hi", "n", "verdict", "detail", "kind", "metric", "paper"]
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for v in verdicts:
        row = v.as_dict()
        ci = row.pop("ci") or (None, None)
        writer.writerow({**row, "ci_lo": ci[0], "ci_hi": ci[1]})
    return buf.getvalue()


def scorecard_json(verdicts: list[Verdict]) -> str:
    """The scorecard as a JSON list of ``Verdict.as_dict()`` rows."""
    import json

    return json.dumps([v.as_dict() for v in verdicts], indent=2) + "\n"


SCORECARD_FORMATS = {"markdown": scorecard_markdown, "json": scorecard_json, "csv": scorecard_csv,
                     "html": scorecard_html}
