"""runs.slurm_job_id -> runs.executor + runs.job_id: the job that trains a run, in any executor's terms.

A row Slurm held keeps its job: ``executor = 'slurm'`` and ``job_id`` its ``<array>_<index>``. Downgrading
keeps only the Slurm jobs (the old column knew no other executor).

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("executor", sa.String(16), nullable=True))
        batch.add_column(sa.Column("job_id", sa.String(128), nullable=True))
    op.execute("UPDATE runs SET executor = 'slurm', job_id = slurm_job_id WHERE slurm_job_id IS NOT NULL")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("slurm_job_id")


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("slurm_job_id", sa.String(64), nullable=True))
    op.execute("UPDATE runs SET slurm_job_id = job_id WHERE executor = 'slurm'")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("job_id")
        batch.drop_column("executor")
