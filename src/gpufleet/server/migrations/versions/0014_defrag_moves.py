"""defrag_moves: each leaf's last defragmentation move, for a restarted controller (ADR 0045).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "defrag_moves",
        sa.Column("leaf", sa.String(128), nullable=False),
        sa.Column("time", sa.Double, nullable=False),
        sa.Column("record", sa.JSON, nullable=False),
        sa.PrimaryKeyConstraint("leaf", name="pk_defrag_moves"),
    )


def downgrade() -> None:
    op.drop_table("defrag_moves")
