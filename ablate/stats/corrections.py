"""A family of comparisons corrected together: Holm's step-down (family-wise error), Benjamini-Hochberg's
step-up (false discovery rate) or none; the family in words (``family_text``), the level a planned comparison
must reach (``level_for``), and the line a table prints under it (``method_note``).

Pure: numpy, imported when called.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ablate.errors import UserInputError, one_of
from ablate.stats.delta import (
    ALPHA,
    BOOTSTRAP_MIN_N,
    CORRECTION_NAMES,
    CORRECTIONS,
    DEFAULT,
    Delta,
    Stats,
)

if TYPE_CHECKING:
    from numpy.typing import ArrayLike


def adjust(p: ArrayLike, correction: str = "holm") -> Any:
    """p-values corrected over their family: Holm's step-down (family-wise error), Benjamini-Hochberg's
    step-up (false discovery rate) or ``none``. A list gives a list; an array gives an array, one family per
    row.

    >>> adjust([0.01, 0.04, 0.03], "holm")
    [0.03, 0.06, 0.06]
    """
    import numpy as np

    a = np.asarray(p, dtype=float)
    m = a.shape[-1] if a.ndim else 0
    if correction not in CORRECTIONS:
        raise UserInputError(one_of(correction, CORRECTIONS, what="correction") + " (option --correction)")
    if m == 0 or correction == "none":
        adj = a
    else:
        order = np.argsort(a, axis=-1, kind="stable")
        ranked = np.take_along_axis(a, order, axis=-1)
        if correction == "holm":
            steps = np.maximum.accumulate(np.minimum(1.0, (m - np.arange(m)) * ranked), axis=-1)
        else:  # bh
            scaled = (m / np.arange(1, m + 1) * ranked)[..., ::-1]
            steps = np.minimum(1.0, np.minimum.accumulate(scaled, axis=-1)[..., ::-1])
        adj = np.empty_like(a)
        np.put_along_axis(adj, order, steps, axis=-1)
    return [round(float(v), 15) for v in adj] if a.ndim == 1 else adj


def _in_family(d: Delta) -> bool:
    """A delta with a p that no ``--until-resolved`` look decided (that one carries its look's correction)."""
    return d.p is not None and d.decision is None


def correct(deltas: Sequence[Delta], stats: Stats = DEFAULT) -> list[Delta]:
    """The family's deltas with ``p_adj`` set; a delta without a p (n < 2) is not part of the family, nor one
    that ``--until-resolved`` decided (its ``p_adj`` is its deciding look's)."""
    idx = [i for i, d in enumerate(deltas) if _in_family(d)]
    adjusted = adjust([p for i in idx if (p := deltas[i].p) is not None], stats.correction)
    out = list(deltas)
    for i, q in zip(idx, adjusted, strict=True):
        out[i] = replace(deltas[i], p_adj=q)
    return out


def family_size(deltas: Iterable[Delta]) -> int:
    """How many of ``deltas`` were corrected together (``correct``)."""
    return sum(_in_family(d) for d in deltas)


def family_text(stats: Stats, m: int, where: str = "in this table") -> str:
    """The family a p was corrected over, in words: ``Holm over 4 comparisons in this table``."""
    if stats.correction == "none":
        return f"no correction ({m} comparison{'s' * (m != 1)} {where})"
    return f"{CORRECTION_NAMES[stats.correction]} over {m} comparison{'s' * (m != 1)} {where}"


def level_for(stats: Stats, m: int) -> float:
    """The per-comparison level a planned comparison must reach: ``ALPHA / m`` under a correction (Holm's
    first step, the strictest; BH's too), ``ALPHA`` without."""
    return ALPHA if stats.correction == "none" else ALPHA / max(m, 1)


def family_of(d: Delta, stats: Stats = DEFAULT, m: int = 1, where: str = "in this table") -> str:
    """The family ``d``'s p was corrected over: its deciding look's, or ``m`` comparisons ``where``."""
    return d.decision.family_text() if d.decision is not None else family_text(stats, m, where)


def method_note(deltas: Sequence[Delta], stats: Stats = DEFAULT, what: str = "Δ",
                family: str | None = None) -> str:
    """The line under a table: the interval method, the n, the correction and the family's size, or the
    ``family`` the deltas were corrected in, in words, where a page shows some of a larger family's."""
    ns = sorted({d.n for d in deltas if d.mean is not None})
    m = family_size(deltas)
    nn = "n=" + ("/".join(map(str, ns)) if ns else "0")
    text = f"{what}: paired Student t 95% CI ({nn} seeds, n-1 df)"
    if stats.interval == "bootstrap":
        boot = [d for d in deltas if d.method == "bootstrap"]
        text = f"{what}: BCa bootstrap 95% CI ({nn} seeds)" if boot and len(boot) == len(
            [d for d in deltas if d.lo is not None]) else text
        if len(boot) < len([d for d in deltas if d.lo is not None]):
            text += f"; bootstrap needs n >= {BOOTSTRAP_MIN_N}, paired t used below that"
    if any(d.n == 1 for d in deltas):
        text += "; n=1: no interval"
    decided = [d.decision for d in deltas if d.decision is not None]
    if family is not None and m:
        text = f"{text}; significant (bold) after {family} at alpha={ALPHA:g}"
    elif m or not decided:
        text = (f"{text}; significant (bold) after {CORRECTION_NAMES[stats.correction]} over {m} comparison"
                f"{'s' * (m != 1)} at alpha={ALPHA:g}")
    if any(d.no_spread for d in deltas):
        text += ("; no spread (every pair differs by the same amount): no interval, and the p is the exact "
                 "sign-flip p, 2/2^n")
    elif any(d.tied and not d.identical for d in deltas):
        text += ("; where the pairs tie (a metric of few values), p is the larger of the t and the exact "
                 "sign-flip p")
    if decided:
        one = len(decided) == 1
        text += (f"; {len(decided)} decided by `ablate run --until-resolved`, read at the look that decided "
                 f"{'it' if one else 'them'} (bold only where a look resolved {'it' if one else 'one'}; "
                 f"{decided[0].family_text()})")
    return text
