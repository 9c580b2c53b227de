"""jobs.ended: how a job ended (Slurm's reason and exit status, model/job_end.py).

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as b:
        b.add_column(sa.Column("ended", sa.JSON))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as b:
        b.drop_column("ended")
