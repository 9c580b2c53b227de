"""jobs.borrowing: whether the running attempt borrows idle quota of its cohort, which the
controller needs again after a restart (``core.controller.RestoredJob``).

Revision ID: 0002
Revises: 0001
Create Date: 2026-05-09
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as b:
        b.add_column(sa.Column("borrowing", sa.Boolean, nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as b:
        b.drop_column("borrowing")
