"""leader: the leader lease of controllers in high availability (one row; ADR 0032).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "leader",
        sa.Column("id", sa.Integer, nullable=False, autoincrement=False),
        sa.Column("epoch", sa.BigInteger, nullable=False),
        sa.Column("version", sa.BigInteger, nullable=False),
        sa.Column("holder", sa.String(256), nullable=False),
        sa.Column("address", sa.String(512), nullable=False),
        sa.Column("renewed_time", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_leader"),
    )


def downgrade() -> None:
    op.drop_table("leader")
