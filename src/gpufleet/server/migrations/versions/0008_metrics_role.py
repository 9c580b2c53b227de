"""tokens.role may be ``metrics``: a token that reads /metrics and nothing else (Prometheus's
scrape token, ``gpufleet token create NAME --role metrics``).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-06
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

NAME = "ck_tokens_role"


def upgrade() -> None:
    with op.batch_alter_table("tokens") as b:
        b.drop_constraint(NAME, type_="check")
        b.create_check_constraint(NAME, "role IN ('user', 'admin', 'agent', 'metrics')")


def downgrade() -> None:
    op.execute("DELETE FROM tokens WHERE role = 'metrics'")
    with op.batch_alter_table("tokens") as b:
        b.drop_constraint(NAME, type_="check")
        b.create_check_constraint(NAME, "role IN ('user', 'admin', 'agent')")
