"""maintenance: operators' commands on nodes (through their agents) and rolling maintenance.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "node_commands",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("node", sa.String(128), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("command", sa.Text, nullable=False),
        sa.Column("timeout_s", sa.Double, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("exit_code", sa.BigInteger),
        sa.Column("output", sa.Text, nullable=False),
        sa.Column("why", sa.Text, nullable=False),
        sa.Column("requested_by", sa.String(128), nullable=False),
        sa.Column("created", sa.Double, nullable=False),
        sa.Column("started", sa.Double),
        sa.Column("ended", sa.Double),
        sa.PrimaryKeyConstraint("id", name="pk_node_commands"),
    )
    op.create_index("ix_node_commands_node_state", "node_commands", ["node", "state"])
    op.create_table(
        "maintenance",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("doc", sa.JSON, nullable=False),
        sa.Column("active", sa.Boolean, nullable=False),
        sa.Column("created", sa.Double, nullable=False),
        sa.Column("updated_time", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_maintenance"),
    )


def downgrade() -> None:
    op.drop_table("maintenance")
    op.drop_index("ix_node_commands_node_state", table_name="node_commands")
    op.drop_table("node_commands")
