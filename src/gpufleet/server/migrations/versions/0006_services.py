"""services: the services table, their event history, and each replica job's link to its
service and generation (jobs.service, jobs.generation).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

Seq = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("jobs") as b:
        b.add_column(sa.Column("service", sa.String(63)))
        b.add_column(sa.Column("generation", sa.Integer))
        b.create_index("ix_jobs_service", ["service"])
    op.create_table(
        "services",
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("user", sa.String(128), nullable=False),
        sa.Column("queue", sa.String(128), nullable=False),
        sa.Column("spec", sa.JSON, nullable=False),
        sa.Column("record", sa.JSON, nullable=False),
        sa.Column("created_time", sa.Double, nullable=False),
        sa.Column("updated_time", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_services"),
    )
    op.create_index("ix_services_user", "services", ["user"])
    op.create_table(
        "service_events",
        sa.Column("seq", Seq, nullable=False, autoincrement=True),
        sa.Column("service", sa.String(63), nullable=False),
        sa.Column("time", sa.Double, nullable=False),
        sa.Column("what", sa.String(32), nullable=False),
        sa.Column("why", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("seq", name="pk_service_events"),
    )
    op.create_index("ix_service_events_service_seq", "service_events", ["service", "seq"])


def downgrade() -> None:
    op.drop_table("service_events")
    op.drop_table("services")
    with op.batch_alter_table("jobs") as b:
        b.drop_index("ix_jobs_service")
        b.drop_column("generation")
        b.drop_column("service")
