"""What ``ablate run --until-resolved`` decided, kept with its looks (``sequential_decisions``), and read back
for the reports (``ablate.stats.sequential.Decision``).

Functions take a Session and never commit: the caller owns ``Session.begin()``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from ablate.errors import StoreError
from ablate.stats import Decision, LookRecord
from ablate.store.records import utcnow
from ablate.store.schema import RegisteredGrid, SequentialDecision


def comparison_key(decision: Decision) -> str:
    """What names a comparison within its grid and metric: its arms and its cell, hashed."""
    text = json.dumps({"treatment": decision.treatment, "reference": decision.reference,
                       "cell": decision.cell}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def record_decisions(session: Session, *, grid: str, decisions: Sequence[Decision]) -> int:
    """Store ``decisions`` of grid ``grid``, each replacing an earlier decision of the same comparison;
    returns how many. A grid the store does not hold is a StoreError (the grid is registered before it
    runs)."""
    grid_id = session.scalar(select(RegisteredGrid.id).where(RegisteredGrid.name == grid))
    if grid_id is None:
        raise StoreError(f"cannot record --until-resolved's decisions: the store has no grid {grid!r}")
    now = utcnow()
    for d in decisions:
        key = comparison_key(d)
        session.execute(delete(SequentialDecision).where(
            SequentialDecision.grid_id == grid_id, SequentialDecision.metric == d.metric,
            SequentialDecision.key == key))
        session.add(SequentialDecision(
            grid_id=grid_id, metric=d.metric, key=key, treatment=d.treatment, reference=d.reference,
            cell=dict(d.cell), runs=sorted(d.runs), look=d.look, n=d.n, level=d.level, p_adj=d.p_adj,
            family=d.family, correction=d.correction, plan=list(d.plan),
            looks=[h.as_dict() for h in d.history], recorded=now))
    session.flush()
    return len(decisions)


def decisions(session: Session, grid: str) -> list[Decision]:
    """The decisions stored for grid ``grid`` (none for a grid without them, or unknown)."""
    rows = session.scalars(
        select(SequentialDecision).join(RegisteredGrid, RegisteredGrid.id == SequentialDecision.grid_id)
        .where(RegisteredGrid.name == grid).order_by(SequentialDecision.id)).all()
    return [Decision(grid=grid, treatment=r.treatment, reference=r.reference, metric=r.metric,
                     cell=dict(r.cell), runs=tuple(r.runs), look=r.look, n=r.n, level=r.level, p_adj=r.p_adj,
                     family=r.family, correction=r.correction, plan=tuple(r.plan),
                     history=tuple(LookRecord(**h) for h in r.looks))
            for r in rows]
