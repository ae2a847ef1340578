"""p-values of a comparison's values against a null: the one-sample t test's, the exact sign-flip permutation
test's, and the p a verdict reads (``evidence_p``: the t p, or where the values tie, no smaller than the
sign-flip p). No spread has no t statistic: it reads as the exact sign-flip p of n values of one sign,
``2 / 2**n``, never 0.

Pure: numpy and scipy, imported when called.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

PERM_MAX_N = 12  # 2**12 sign flips: exact and instant


def t_pvalue(x: ArrayLike, null: float = 0.0) -> Any:
    """Two-sided one-sample t p-value of ``mean(x) == null`` (a float; an array for samples along the last
    axis); None with fewer than two values. No spread has no t statistic: it gives the exact sign-flip p of n
    values of one sign, ``2 / 2**n`` (1 exactly at the null), the evidence n equal values carry.

    >>> t_pvalue([0.0625, 0.0625]), t_pvalue([1.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    (0.5, 0.03125)
    """
    import numpy as np
    from scipy.stats import t as student

    a = np.asarray(x, dtype=float) - null
    n = a.shape[-1]
    if n < 2:
        return None
    mean, sd = a.mean(axis=-1), a.std(ddof=1, axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = 2 * student.sf(np.abs(mean) / (sd / math.sqrt(n)), n - 1)
    p = np.where(sd > 0, p, np.where(mean == 0, 1.0, 2.0 / 2.0 ** n))
    return float(p) if a.ndim == 1 else p


def sign_flip_pvalue(x: ArrayLike, null: float = 0.0) -> float | None:
    """Exact two-sided sign-flip permutation p of ``mean(x) == null`` (every one of the 2**n flips), for
    2 <= n <= ``PERM_MAX_N``; None otherwise.

    >>> sign_flip_pvalue([1.0, 2.0, 3.0])
    0.25
    """
    import numpy as np

    a = np.asarray(x, dtype=float) - null
    if not 2 <= a.size <= PERM_MAX_N:
        return None
    flips = 1 - 2 * ((np.arange(2 ** a.size)[:, None] >> np.arange(a.size)) & 1)  # (2**n, n) of +-1
    sums = np.abs(flips @ a)
    return float(np.mean(sums >= abs(a.sum()) * (1 - 1e-12)))


def ties(x: ArrayLike) -> bool:
    """Whether the values ``x`` (differences from the null) take few values: two of them equal in magnitude,
    or one of them zero. Measurements that vary continuously never do; a count, a share of a few rows or two
    arms that agree at a seed do.

    >>> ties([0.0625, 0.0625, 0.125]), ties([0.013, -0.02, 0.007])
    (True, False)
    """
    import numpy as np

    mags = np.round(np.abs(np.asarray(x, dtype=float)), 12)
    return bool(mags.size and (np.unique(mags).size < mags.size or (mags == 0).any()))


def evidence_p(x: ArrayLike, null: float = 0.0) -> float | None:
    """The p a verdict reads: the t p (``t_pvalue``), or where the values tie (``ties``) the larger of it and
    the exact sign-flip p, whose error rate holds for any symmetric null however few values the metric
    takes. None with fewer than two values.

    >>> evidence_p([0.0625, 0.0625]), evidence_p([1.0, 1.0, 0.0])
    (0.5, 0.5)
    """
    import numpy as np

    a = np.asarray(x, dtype=float)
    p = t_pvalue(a, null)
    if p is None:
        return None
    perm = sign_flip_pvalue(a, null)
    return float(max(p, perm)) if perm is not None and ties(a - null) else float(p)
