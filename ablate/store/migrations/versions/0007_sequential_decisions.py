"""sequential_decisions: what ``ablate run --until-resolved`` decided for each comparison, with its looks.

Every report reads such a comparison at the look that decided it ("resolved at look 2 of 3, n=4 seeds"), not
again at a fixed-n level. A store from before holds none: its comparisons read as they did.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sequential_decisions",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("grid_id", sa.Integer(), nullable=False),
        sa.Column("metric", sa.String(200), nullable=False),
        sa.Column("key", sa.String(64), nullable=False),
        sa.Column("treatment", sa.String(300), nullable=False),
        sa.Column("reference", sa.String(300), nullable=False),
        sa.Column("cell", sa.JSON(), nullable=False),
        sa.Column("runs", sa.JSON(), nullable=False),
        sa.Column("look", sa.Integer(), nullable=True),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("level", sa.Float(), nullable=False),
        sa.Column("p_adj", sa.Float(), nullable=True),
        sa.Column("family", sa.Integer(), nullable=False),
        sa.Column("correction", sa.String(16), nullable=False),
        sa.Column("plan", sa.JSON(), nullable=False),
        sa.Column("looks", sa.JSON(), nullable=False),
        sa.Column("recorded", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["grid_id"], ["grids.id"], name="fk_sequential_decisions_grid_id_grids",
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_sequential_decisions"),
        sa.UniqueConstraint("grid_id", "metric", "key", name="uq_sequential_decisions_grid_id_metric_key"),
    )


def downgrade() -> None:
    op.drop_table("sequential_decisions")
