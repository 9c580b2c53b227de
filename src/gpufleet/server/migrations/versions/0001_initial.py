"""The first schema: jobs and their transitions, nodes, queues, tokens, audit.

Revision ID: 0001
Revises:
Create Date: 2026-05-09
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

# Written out rather than taken from schema.py: a migration must not change when the schema
# module does. tests/integration/test_store_schema.py checks that they agree.
Seq = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
STATES = (
    "'PENDING', 'STARTING', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED', 'TIMED_OUT', "
    "'PREEMPTED', 'NODE_LOST'"
)


def upgrade() -> None:
    counters = op.create_table(
        "counters",
        sa.Column("name", sa.String(32), nullable=False),
        sa.Column("value", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_counters"),
    )
    op.bulk_insert(counters, [{"name": "job", "value": 0}])

    op.create_table(
        "jobs",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("seq", sa.BigInteger, nullable=False),
        sa.Column("user", sa.String(128), nullable=False),
        sa.Column("queue", sa.String(128), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("retries_used", sa.Integer, nullable=False),
        sa.Column("max_retries", sa.Integer, nullable=False),
        sa.Column("total_gpu_milli", sa.BigInteger, nullable=False),
        sa.Column("submit_time", sa.Double, nullable=False),
        sa.Column("start_time", sa.Double),
        sa.Column("end_time", sa.Double),
        sa.Column("eligible_time", sa.Double, nullable=False),
        sa.Column("attained_gpu_s", sa.Double, nullable=False),
        sa.Column("spec", sa.JSON, nullable=False),
        sa.Column("allocation", sa.JSON, nullable=False),
        sa.Column("depends_on", sa.JSON, nullable=False),
        sa.Column("array_id", sa.String(32)),
        sa.Column("array_index", sa.Integer),
        sa.Column("idempotency_key", sa.String(200)),
        sa.PrimaryKeyConstraint("id", name="pk_jobs"),
        sa.UniqueConstraint("seq", name="uq_jobs_seq"),
        sa.UniqueConstraint("idempotency_key", name="uq_jobs_idempotency_key"),
        sa.UniqueConstraint("array_id", "array_index", name="uq_jobs_array_id_array_index"),
        sa.CheckConstraint(f"state IN ({STATES})", name="ck_jobs_state"),
        sa.CheckConstraint("attempt >= 0 AND retries_used >= 0", name="ck_jobs_counts"),
    )
    op.create_index("ix_jobs_state", "jobs", ["state"])
    op.create_index("ix_jobs_user_seq", "jobs", ["user", "seq"])
    op.create_index("ix_jobs_queue_seq", "jobs", ["queue", "seq"])

    op.create_table(
        "job_events",
        sa.Column("seq", Seq, nullable=False, autoincrement=True),
        sa.Column("job_id", sa.String(32), nullable=False),
        sa.Column("time", sa.Double, nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("old_state", sa.String(16)),
        sa.Column("new_state", sa.String(16), nullable=False),
        sa.Column("why", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("seq", name="pk_job_events"),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name="fk_job_events_job_id_jobs", ondelete="CASCADE"
        ),
    )
    op.create_index("ix_job_events_job_id_seq", "job_events", ["job_id", "seq"])
    op.create_index("ix_job_events_new_state_time", "job_events", ["new_state", "time"])

    op.create_table(
        "nodes",
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("spec", sa.JSON, nullable=False),
        sa.Column("address", sa.String(256), nullable=False),
        sa.Column("labels", sa.JSON, nullable=False),
        sa.Column("healthy", sa.Boolean, nullable=False),
        sa.Column("drained", sa.Boolean, nullable=False),
        sa.Column("lost", sa.Boolean, nullable=False),
        sa.Column("why", sa.Text, nullable=False),
        sa.Column("last_heartbeat", sa.Double),
        sa.Column("driver_version", sa.String(64), nullable=False),
        sa.Column("cuda_version", sa.String(64), nullable=False),
        sa.Column("gpu_info", sa.JSON, nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_nodes"),
    )

    op.create_table(
        "node_events",
        sa.Column("seq", Seq, nullable=False, autoincrement=True),
        sa.Column("node", sa.String(128), nullable=False),
        sa.Column("time", sa.Double, nullable=False),
        sa.Column("what", sa.String(32), nullable=False),
        sa.Column("why", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("seq", name="pk_node_events"),
    )
    op.create_index("ix_node_events_node_seq", "node_events", ["node", "seq"])

    op.create_table(
        "queues",
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("spec", sa.JSON, nullable=False),
        sa.Column("updated_time", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_queues"),
    )

    op.create_table(
        "tokens",
        sa.Column("id", Seq, nullable=False, autoincrement=True),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("role", sa.String(8), nullable=False),
        sa.Column("user", sa.String(128)),
        sa.Column("node", sa.String(128)),
        sa.Column("secret_sha256", sa.String(64), nullable=False),
        sa.Column("created_time", sa.Double, nullable=False),
        sa.Column("revoked_time", sa.Double),
        sa.PrimaryKeyConstraint("id", name="pk_tokens"),
        sa.UniqueConstraint("name", name="uq_tokens_name"),
        sa.UniqueConstraint("secret_sha256", name="uq_tokens_secret_sha256"),
        sa.CheckConstraint("role IN ('user', 'admin', 'agent')", name="ck_tokens_role"),
        sa.CheckConstraint(
            "(role <> 'user' OR \"user\" IS NOT NULL) AND (role <> 'agent' OR node IS NOT NULL)",
            name="ck_tokens_subject",
        ),
    )

    op.create_table(
        "audit",
        sa.Column("seq", Seq, nullable=False, autoincrement=True),
        sa.Column("time", sa.Double, nullable=False),
        sa.Column("actor", sa.String(128), nullable=False),
        sa.Column("actor_role", sa.String(8), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("target", sa.String(256), nullable=False),
        sa.Column("detail", sa.JSON, nullable=False),
        sa.PrimaryKeyConstraint("seq", name="pk_audit"),
    )
    op.create_index("ix_audit_time", "audit", ["time"])
    op.create_index("ix_audit_target_seq", "audit", ["target", "seq"])


def downgrade() -> None:
    for table in ("audit", "tokens", "queues", "node_events", "nodes", "job_events", "jobs"):
        op.drop_table(table)
    op.drop_table("counters")
