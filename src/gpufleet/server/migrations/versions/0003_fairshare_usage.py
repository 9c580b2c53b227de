"""fairshare_usage: the fair-share ledger (each queue's decayed past usage), so that a
controller restart does not forget it.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "fairshare_usage",
        sa.Column("queue", sa.String(128), nullable=False),
        sa.Column("usage", sa.Double, nullable=False),
        sa.Column("as_of", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("queue", name="pk_fairshare_usage"),
    )


def downgrade() -> None:
    op.drop_table("fairshare_usage")
