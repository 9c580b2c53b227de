"""jobs.hold: a job's hold (sbatch -H, scontrol hold/uhold/release): "user", "admin" or ""
(ADR 0074).

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as b:
        b.add_column(sa.Column("hold", sa.String(8), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as b:
        b.drop_column("hold")
