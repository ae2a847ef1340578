"""The paper's claims that the scorecard measures, as data: which arms each compares (by their catalogue refs,
``tableN:R``), on which metric, of which kind (a paired ``delta``, a ``ratio`` against a bound, one arm's
``level``, a ``stability`` count), which way the paper reports it, and the paper's own numbers.
``reports/scorecard.py`` measures them and decides each verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

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
CLAIM_DIGITS = {"val_ppl": 2, "m_act": 1}
