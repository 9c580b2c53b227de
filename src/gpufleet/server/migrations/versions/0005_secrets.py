"""secrets: job secrets sealed with AES-GCM (server/secrets_box.py), one row per
(scope, owner, name); no plaintext column.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

Seq = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "secrets",
        sa.Column("id", Seq, nullable=False, autoincrement=True),
        sa.Column("scope", sa.String(8), nullable=False),
        sa.Column("owner", sa.String(128), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("key_id", sa.String(32), nullable=False),
        sa.Column("nonce", sa.LargeBinary, nullable=False),
        sa.Column("ciphertext", sa.LargeBinary, nullable=False),
        sa.Column("created_by", sa.String(128), nullable=False),
        sa.Column("created_time", sa.Double, nullable=False),
        sa.Column("updated_time", sa.Double, nullable=False),
        sa.Column("last_used_time", sa.Double),
        sa.PrimaryKeyConstraint("id", name="pk_secrets"),
        sa.UniqueConstraint("scope", "owner", "name", name="uq_secrets_scope_owner_name"),
        sa.CheckConstraint("scope IN ('user', 'queue', 'cluster')", name="ck_secrets_scope"),
    )


def downgrade() -> None:
    op.drop_table("secrets")
