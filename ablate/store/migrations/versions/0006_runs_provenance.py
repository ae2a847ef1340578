"""runs.provenance: the software, device and grid commit that produced a run (``ablate/provenance.py``).

Rows from before get NULL: their provenance was not recorded (``ablate show`` says nothing of it, and reports
leave them out of the check that compared runs share one config version and model code).

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("provenance", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("provenance")
