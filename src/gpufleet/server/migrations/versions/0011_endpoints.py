"""endpoints: each service's gateway port and token, shared by controllers in high
availability (ADR 0044).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "endpoints",
        sa.Column("service", sa.String(63), nullable=False),
        sa.Column("port", sa.Integer, nullable=False),
        sa.Column("token", sa.String(128), nullable=False),
        sa.PrimaryKeyConstraint("service", name="pk_endpoints"),
    )


def downgrade() -> None:
    op.drop_table("endpoints")
