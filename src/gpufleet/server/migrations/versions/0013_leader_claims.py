"""leader_claims: a standby's proof that agents reach it and not the leader (ADR 0048).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "leader_claims",
        sa.Column("standby", sa.String(256), nullable=False),
        sa.Column("address", sa.String(512), nullable=False),
        sa.Column("epoch", sa.BigInteger, nullable=False),
        sa.Column("version", sa.BigInteger, nullable=False),
        sa.Column("nodes", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("standby", name="pk_leader_claims"),
    )


def downgrade() -> None:
    op.drop_table("leader_claims")
