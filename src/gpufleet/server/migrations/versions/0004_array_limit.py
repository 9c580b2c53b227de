"""jobs.array_limit: Slurm's ``--array=0-15%4`` throttle (at most 4 of the array's tasks run
at once), which the controller needs again after a restart.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as b:
        b.add_column(sa.Column("array_limit", sa.Integer))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as b:
        b.drop_column("array_limit")
