"""gpu_use: utilization-weighted GPU-seconds per user, queue and hour (accounting's "used").

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "gpu_use",
        sa.Column("user", sa.String(128), nullable=False),
        sa.Column("queue", sa.String(128), nullable=False),
        sa.Column("hour", sa.Double, nullable=False),
        sa.Column("used_gpu_s", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("user", "queue", "hour", name="pk_gpu_use"),
    )


def downgrade() -> None:
    op.drop_table("gpu_use")
