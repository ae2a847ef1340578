"""runs.stem_id (the run id without its identity fields: ``ablate/grid/identity.py``) and grid_runs.current.

``stem_id`` lets ``ablate plan`` find a run that read other data (the same stem under another id: stale). Rows
from before it get NULL; ``ablate db rehash`` fills it (an upgrade's CONFIG_VERSION 2 moves every row anyway).
``current`` marks the runs of a grid's current configuration; every membership recorded before is current, so
a store from before reads as it did.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("stem_id", sa.String(64), nullable=True))
        batch.create_index("ix_runs_stem_id", ["stem_id"])
    with op.batch_alter_table("grid_runs") as batch:
        batch.add_column(sa.Column("current", sa.Boolean(), nullable=False, server_default=sa.true()))


def downgrade() -> None:
    with op.batch_alter_table("grid_runs") as batch:
        batch.drop_column("current")
    with op.batch_alter_table("runs") as batch:
        batch.drop_index("ix_runs_stem_id")
        batch.drop_column("stem_id")
