"""reservations: advance reservations of nodes (maintenance windows), as Slurm's
``scontrol create reservation``.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "reservations",
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("spec", sa.JSON, nullable=False),
        sa.Column("updated_time", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_reservations"),
    )


def downgrade() -> None:
    op.drop_table("reservations")
