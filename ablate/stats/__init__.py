"""ablate.stats: statistics over seeds, the one owner of every interval, p-value, family correction, power
figure and sequential look that the tables, the scorecard and ``ablate run --until-resolved`` use. It sits at
the floor of the layers (docs/internals.md): it imports numpy and scipy (when called) and ``ablate.errors``,
and nothing of the store, the grid, the config or the reports, which all import it.

One module per family of methods, as scipy.stats:

- ``delta``: ``Stats`` (how a report reads: the interval, the correction), ``Summary``, ``Delta``, the
  constants;
- ``pvalues``: the t p, the exact sign-flip p, ties, ``evidence_p``;
- ``intervals``: the t interval, the bootstrap, ``compare`` and the paired comparisons;
- ``corrections``: Holm, Benjamini-Hochberg, the family in words, the note under a table;
- ``power``: power, the minimum detectable effect, the seeds a comparison needs;
- ``sequential``: the looks of ``--until-resolved``, their alpha spending and ``Decision``;
- ``pairing``: what pairing by seed did.

A comparison is a set of paired values ``x`` (treatment minus reference per seed; for a ratio, the log of
treatment over reference per seed; for a level, the runs' values) read against a null value ``m0``:

- the interval is paired Student t with n-1 degrees of freedom (``Stats.interval = "t"``, the default). It
  keeps its 95% coverage at 2-10 seeds, where a bootstrap of n values cannot reach outside their range. The
  BCa bootstrap is opt-in (``"bootstrap"``) and used only from ``BOOTSTRAP_MIN_N`` pairs; below that the t
  interval is used and the table says so. One value gets no interval ("n=1");
- a ratio's interval is the t interval of the mean paired log ratio, exponentiated: its point estimate is the
  geometric mean of the per-seed ratios;
- the p-value is the paired t test's (two-sided), beside an exact sign-flip permutation p for n <=
  ``PERM_MAX_N`` as a distribution-free check (reported; with 3 seeds it cannot go below 0.25, so it does not
  replace the t test for measurements that vary continuously);
- no verdict from no evidence: a metric that takes few values (a count, loss spikes, a share of 16 probe
  rows) ties, and n pairs with no spread at all carry only the evidence of their signs. Where the paired
  values tie (two equal magnitudes, or a zero), the p is the larger of the t p and the exact sign-flip p; with
  no spread it is the sign-flip p itself, ``2 / 2**n`` (0.5 at n = 2), never 0, and there is no interval
  (``Delta.no_spread``: a t interval of zero width is not a measurement of the spread).
  ``tests/unit/stats/test_stats_validity.py`` simulates such metrics under the null at n = 2-10;
- a family (a table's deltas, the scorecard's claims) is corrected together: Holm by default (family-wise
  error), Benjamini-Hochberg or none. A comparison is *resolved* (bold, "holds") only when its corrected p is
  below ``ALPHA``;
- power: the minimum effect the seeds detect with 80% power, and the seeds needed to resolve the effect
  observed (noncentral t, at the per-comparison level ``ALPHA / m`` of a corrected family of m), are
  ``power``'s, on these deltas and families;
- pairing: the arms' correlation across seeds, and how many unpaired seeds the pairing was worth
  (``Pairing``). A negative correlation makes the paired difference noisier than two independent means; the
  paired t is kept all the same, because it keeps its coverage at any correlation while an unpaired test of
  runs paired by seed does not (``tests/unit/stats/test_stats_validity.py`` simulates both);
- a paired difference of exactly zero at every seed (two arms that are one function give the same runs) is
  read as such (``Delta.identical``): p = 1, nothing to resolve, no seeds that would.

The looks of ``ablate run --until-resolved`` and what it decided are ``sequential``'s.

Everything is deterministic: the bootstrap draws from a fixed seed, the permutation is exact.
"""

from ablate.stats.corrections import (
    adjust,
    correct,
    family_of,
    family_size,
    family_text,
    level_for,
    method_note,
)
from ablate.stats.delta import (
    ALPHA,
    BOOTSTRAP_DRAWS,
    BOOTSTRAP_MIN_N,
    BOOTSTRAP_SEED,
    CI_LEVEL,
    CORRECTION_NAMES,
    CORRECTIONS,
    DEFAULT,
    EMPTY,
    INTERVALS,
    MAX_SEEDS,
    POWER,
    Decision,
    Delta,
    LookRecord,
    Scale,
    Stats,
    Summary,
    summarize,
)
from ablate.stats.intervals import (
    bootstrap_ci,
    compare,
    level,
    paired_delta,
    paired_ratio,
    pairs,
    t_interval,
)
from ablate.stats.pairing import Pairing, pairing
from ablate.stats.power import (
    NEEDS_MEANING,
    mde,
    needs,
    needs_text,
    power,
    seeds_needed,
    sign_seeds,
    unresolved_line,
)
from ablate.stats.pvalues import PERM_MAX_N, evidence_p, sign_flip_pvalue, t_pvalue, ties
from ablate.stats.sequential import (
    decided,
    look_levels,
    looks,
    resolved_at_look,
    spent,
    with_decision,
)

__all__ = [
    "ALPHA", "BOOTSTRAP_DRAWS", "BOOTSTRAP_MIN_N", "BOOTSTRAP_SEED", "CI_LEVEL", "CORRECTIONS",
    "CORRECTION_NAMES", "DEFAULT", "EMPTY", "INTERVALS", "MAX_SEEDS", "NEEDS_MEANING", "PERM_MAX_N", "POWER",
    "Decision", "Delta", "LookRecord", "Pairing", "Scale", "Stats", "Summary", "adjust", "bootstrap_ci",
    "compare", "correct", "decided", "evidence_p", "family_of", "family_size", "family_text", "level",
    "level_for", "look_levels", "looks", "mde", "method_note", "needs", "needs_text", "paired_delta",
    "paired_ratio", "pairing", "pairs", "power", "resolved_at_look", "seeds_needed", "sign_flip_pvalue",
    "sign_seeds", "spent", "summarize", "t_interval", "t_pvalue", "ties", "unresolved_line", "with_decision",
]
