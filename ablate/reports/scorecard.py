"""The paper's claims as measured in a grid: effect, bootstrap CI, seeds, and a verdict.

Each claim compares two catalogue rows (found by their ``tableN:R`` refs) on one metric, over paired runs (same
configuration apart from the variant, same seed). A claim *holds* when the whole 95% CI lies on the side the paper
predicts, is *reversed* when it lies wholly on the other side, and otherwise there is *not enough evidence* (also
with fewer than two pairs). The stability claim pairs survival (not diverged) at the learning rates where some run
of either arm diverged.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ablate.reports.rows import RESULT_STATUSES, cell_value, pair_key
from ablate.reports.spec import VariantInfo
from ablate.reports.stats import Delta, paired_delta

HOLDS, REVERSED, UNCLEAR = "holds", "reversed", "not enough evidence"


@dataclass(frozen=True)
class Claim:
    key: str
    text: str
    treatment: str  # catalogue ref of the arm the paper favours
    reference: str
    metric: str  # a runs column, or "survival" for the stability claim
    expect: int = -1  # the sign the paper predicts for treatment - reference


CLAIMS = (
    Claim("g1_beats_baseline", "G1 (SDPA output gate) beats the baseline's PPL", "table1:5", "table1:1", "val_ppl"),
    Claim("g1_beats_g2", "G1 beats G2 (value gate) on PPL", "table1:5", "table1:6", "val_ppl"),
    Claim("head_specific", "Head-specific beats head-shared gating on PPL", "table1:5", "table1:12", "val_ppl"),
    Claim("multiplicative", "Multiplicative beats additive gating on PPL", "table1:5", "table1:14", "val_ppl"),
    Claim("sigmoid", "Sigmoid beats SiLU as the gate's activation on PPL", "table1:5", "table1:15", "val_ppl"),
    Claim("lower_f_attn", "Gating lowers the attention sink (F-Attn)", "table1:5", "table1:1", "f_attn"),
    Claim("lower_m_act", "Gating lowers massive activations (M-Act)", "table1:5", "table1:1", "m_act"),
    Claim("stable_lr", "Gated models survive a learning rate at which the baseline diverges", "table1:5",
          "table1:1", "survival", expect=1),
)
METRIC_NAMES = {"val_ppl": "PPL", "f_attn": "F-Attn", "m_act": "M-Act", "survival": "survival"}


@dataclass(frozen=True)
class Verdict:
    claim: Claim
    treatment: str | None
    reference: str | None
    delta: Delta
    verdict: str
    detail: str

    @property
    def effect(self) -> str:
        d = self.delta
        if d.mean is None:
            return ""
        digits = 3 if self.claim.metric in ("f_attn", "survival") else 2
        text = f"Δ {METRIC_NAMES[self.claim.metric]} {d.mean:+.{digits}f}"
        return text

    @property
    def ci(self) -> str:
        d = self.delta
        if d.lo is None:
            return ""
        digits = 3 if self.claim.metric in ("f_attn", "survival") else 2
        return f"[{d.lo:+.{digits}f}, {d.hi:+.{digits}f}]"


def _variant(catalogue: Mapping[str, VariantInfo], ref: str) -> str | None:
    return next((v.name for v in catalogue.values() if ref in v.paper), None)


def _verdict(delta: Delta, expect: int) -> str:
    if delta.n < 2:
        return UNCLEAR
    side = delta.side()
    return HOLDS if side == expect else REVERSED if side == -expect else UNCLEAR


def evaluate_claim(claim: Claim, runs: Any, catalogue: Mapping[str, VariantInfo]) -> Verdict:
    """One claim's verdict over the runs frame (every status; only done/diverged count)."""
    treat_v, ref_v = _variant(catalogue, claim.treatment), _variant(catalogue, claim.reference)
    runs = runs[runs["status"].isin(RESULT_STATUSES)] if len(runs) else runs
    treat = runs[runs["variant"] == treat_v] if len(runs) else runs
    ref = runs[runs["variant"] == ref_v] if len(runs) else runs
    if not len(treat) or not len(ref):
        missing = [v or ref_name for v, ref_name, r in ((treat_v, claim.treatment, treat), (ref_v, claim.reference, ref))
                   if not len(r)]
        return Verdict(claim, treat_v, ref_v, Delta(None, None, None, 0), UNCLEAR,
                       f"the grid has no finished runs of {' and '.join(missing)}")
    if claim.metric == "survival":
        return _stability(claim, treat, ref, treat_v, ref_v)
    t = {pair_key(r): cell_value(r, claim.metric) for _, r in treat.iterrows() if r["status"] == "done"}
    b = {pair_key(r): cell_value(r, claim.metric) for _, r in ref.iterrows() if r["status"] == "done"}
    delta = paired_delta(t, b)
    verdict = _verdict(delta, claim.expect)
    if delta.n == 0:
        detail = f"no paired {claim.metric} values of {treat_v} and {ref_v} (same config and seed)"
    else:
        detail = f"{treat_v} vs {ref_v}, {delta.n} paired seed(s)"
        if delta.n < 2:
            detail += "; a confidence interval needs at least two"
    return Verdict(claim, treat_v, ref_v, delta, verdict, detail)


def _stability(claim: Claim, treat: Any, ref: Any, treat_v: str | None, ref_v: str | None) -> Verdict:
    def survived(frame: Any) -> dict[Any, float]:
        return {pair_key(r): float(r["status"] == "done") for _, r in frame.iterrows()}

    t, b = survived(treat), survived(ref)
    shared = set(t) & set(b)
    stormy = {k[0] for k in shared if t[k] == 0.0 or b[k] == 0.0}  # contexts where something diverged
    keys = [k for k in shared if k[0] in stormy]
    if not keys:
        return Verdict(claim, treat_v, ref_v, Delta(None, None, None, 0), UNCLEAR,
                       "no paired run of either arm diverged: raise the learning rate until the baseline does")
    delta = paired_delta({k: t[k] for k in keys}, {k: b[k] for k in keys})
    lrs = sorted({dict(k[0]).get("train.lr") for k in keys}, key=lambda x: (x is None, x))
    t_ok, b_ok = sum(t[k] for k in keys), sum(b[k] for k in keys)
    detail = (f"at lr {', '.join(f'{x:g}' for x in lrs if x is not None)}: {treat_v} survived {t_ok:.0f}/{len(keys)}, "
              f"{ref_v} {b_ok:.0f}/{len(keys)}")
    return Verdict(claim, treat_v, ref_v, delta, _verdict(delta, claim.expect), detail)


def scorecard(runs: Any, catalogue: Mapping[str, VariantInfo]) -> list[Verdict]:
    """Every claim of CLAIMS, measured on ``runs`` (the store's runs frame of one grid)."""
    return [evaluate_claim(c, runs, catalogue) for c in CLAIMS]


def _css(verdict: str) -> str:
    return {HOLDS: "holds", REVERSED: "reversed"}.get(verdict, "unclear")


def scorecard_html(verdicts: list[Verdict]) -> str:
    """The scorecard as an HTML table (``id="scorecard"``)."""
    e = html.escape
    out = ['<table class="ablate" id="scorecard"><caption>The paper\'s claims, as measured in this grid '
           '(paired by config and seed; 95% bootstrap CI)</caption>',
           "<thead><tr><th class=\"method\">Claim</th><th>Effect</th><th>95% CI</th><th>n</th><th>Verdict</th>"
           '<th class="method">Detail</th></tr></thead><tbody>']
    for v in verdicts:
        out.append(f'<tr><td class="method">{e(v.claim.text)}</td><td>{e(v.effect)}</td><td>{e(v.ci)}</td>'
                   f'<td>{v.delta.n}</td><td class="{_css(v.verdict)}">{e(v.verdict)}</td>'
                   f'<td class="method">{e(v.detail)}</td></tr>')
    out.append("</tbody></table>")
    return "\n".join(out) + "\n"


def scorecard_markdown(verdicts: list[Verdict]) -> str:
    """The scorecard as a markdown table."""
    lines = ["| Claim | Effect | 95% CI | n | Verdict | Detail |", "| --- | ---: | ---: | ---: | --- | --- |"]
    for v in verdicts:
        lines.append(f"| {v.claim.text} | {v.effect} | {v.ci} | {v.delta.n} | {v.verdict} | {v.detail} |")
    return "\n".join(lines) + "\n"
