"""The store's tables (SQLAlchemy Core). Migrations in ``gpufleet/server/migrations`` create
exactly this; a test compares the two on both dialects.

Times are float seconds since the epoch, as the core counts them. Columns copied out of the
JSON spec (user, queue, max_retries, total_gpu_milli) are immutable and exist to be indexed or
used in SQL (restart load, accounting)."""

from __future__ import annotations

import sqlalchemy as sa

from gpufleet.model.job import JobState

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
metadata = sa.MetaData(naming_convention=NAMING)

# SQLite only auto-increments an INTEGER PRIMARY KEY (the rowid); BIGINT elsewhere.
SeqType = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
NAME_MAX = 128  # user, queue, node and token names
SERVICE_MAX = 63  # a service's name: a DNS label (model/service.py)
STATES = ", ".join(f"'{s.value}'" for s in JobState)

counters = sa.Table(
    "counters",
    metadata,
    sa.Column("name", sa.String(32), primary_key=True),
    sa.Column("value", sa.BigInteger, nullable=False),
)

jobs = sa.Table(
    "jobs",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("seq", sa.BigInteger, nullable=False, unique=True),  # allocation order
    sa.Column("user", sa.String(NAME_MAX), nullable=False),
    sa.Column("queue", sa.String(NAME_MAX), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("retries_used", sa.Integer, nullable=False),
    sa.Column("max_retries", sa.Integer, nullable=False),
    sa.Column("total_gpu_milli", sa.BigInteger, nullable=False),
    sa.Column("submit_time", sa.Double, nullable=False),
    sa.Column("start_time", sa.Double),
    sa.Column("end_time", sa.Double),
    sa.Column("ended", sa.JSON),  # how it ended: model/job_end.py's JobEnd; NULL until then
    # its hold (sbatch -H, scontrol hold/uhold/release): "user", "admin", "" (ADR 0074)
    sa.Column("hold", sa.String(8), nullable=False, server_default=""),
    sa.Column("eligible_time", sa.Double, nullable=False),
    sa.Column("attained_gpu_s", sa.Double, nullable=False),
    sa.Column("spec", sa.JSON, nullable=False),
    sa.Column("allocation", sa.JSON, nullable=False),
    sa.Column("borrowing", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("depends_on", sa.JSON, nullable=False),
    sa.Column("array_id", sa.String(32)),
    sa.Column("array_index", sa.Integer),
    sa.Column("array_limit", sa.Integer),  # Slurm's %N: at most N of the array's tasks run
    sa.Column("idempotency_key", sa.String(200), unique=True),
    # a service's replica (id ``<service>.<n>``): its service and generation; NULL otherwise
    sa.Column("service", sa.String(SERVICE_MAX)),
    sa.Column("generation", sa.Integer),
    sa.UniqueConstraint("array_id", "array_index"),
    sa.CheckConstraint(f"state IN ({STATES})", name="state"),
    sa.CheckConstraint("attempt >= 0 AND retries_used >= 0", name="counts"),
    sa.Index(None, "state"),
    sa.Index(None, "user", "seq"),
    sa.Index(None, "queue", "seq"),
    sa.Index(None, "service"),
)

job_events = sa.Table(
    "job_events",
    metadata,
    sa.Column("seq", SeqType, primary_key=True, autoincrement=True),
    sa.Column(
        "job_id", sa.String(32), sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False
    ),
    sa.Column("time", sa.Double, nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("old_state", sa.String(16)),
    sa.Column("new_state", sa.String(16), nullable=False),
    sa.Column("why", sa.Text, nullable=False),
    sa.Index(None, "job_id", "seq"),
    sa.Index(None, "new_state", "time"),  # accounting: attempts started in a period
)

nodes = sa.Table(
    "nodes",
    metadata,
    sa.Column("name", sa.String(128), primary_key=True),
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
)

# No foreign key to nodes: the controller also reports on nodes known only from a cluster spec.
node_events = sa.Table(
    "node_events",
    metadata,
    sa.Column("seq", SeqType, primary_key=True, autoincrement=True),
    sa.Column("node", sa.String(128), nullable=False),
    sa.Column("time", sa.Double, nullable=False),
    sa.Column("what", sa.String(32), nullable=False),
    sa.Column("why", sa.Text, nullable=False),
    sa.Index(None, "node", "seq"),
)

queues = sa.Table(
    "queues",
    metadata,
    sa.Column("name", sa.String(128), primary_key=True),
    sa.Column("spec", sa.JSON, nullable=False),
    sa.Column("updated_time", sa.Double, nullable=False),
)

# advance reservations (maintenance windows): model/reservation.py, as JSON
reservations = sa.Table(
    "reservations",
    metadata,
    sa.Column("name", sa.String(63), primary_key=True),
    sa.Column("spec", sa.JSON, nullable=False),
    sa.Column("updated_time", sa.Double, nullable=False),
)

# operators' commands run on a node through its agent (api/nodecommands.py)
node_commands = sa.Table(
    "node_commands",
    metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("node", sa.String(NAME_MAX), nullable=False),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("command", sa.Text, nullable=False),
    sa.Column("timeout_s", sa.Double, nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("exit_code", sa.BigInteger),
    sa.Column("output", sa.Text, nullable=False),
    sa.Column("why", sa.Text, nullable=False),
    sa.Column("requested_by", sa.String(NAME_MAX), nullable=False),
    sa.Column("created", sa.Double, nullable=False),
    sa.Column("started", sa.Double),
    sa.Column("ended", sa.Double),
    sa.Index(None, "node", "state"),
)

# rolling maintenance (core/rollout.py): each rollout's state, as JSON, the controller drives
maintenance = sa.Table(
    "maintenance",
    metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("doc", sa.JSON, nullable=False),
    sa.Column("active", sa.Boolean, nullable=False),
    sa.Column("created", sa.Double, nullable=False),
    sa.Column("updated_time", sa.Double, nullable=False),
)

tokens = sa.Table(
    "tokens",
    metadata,
    sa.Column("id", SeqType, primary_key=True, autoincrement=True),
    sa.Column("name", sa.String(128), nullable=False, unique=True),
    sa.Column("role", sa.String(8), nullable=False),
    sa.Column("user", sa.String(128)),
    sa.Column("node", sa.String(128)),
    sa.Column("secret_sha256", sa.String(64), nullable=False, unique=True),
    sa.Column("created_time", sa.Double, nullable=False),
    sa.Column("revoked_time", sa.Double),
    sa.CheckConstraint("role IN ('user', 'admin', 'agent', 'metrics')", name="role"),
    sa.CheckConstraint(
        "(role <> 'user' OR \"user\" IS NOT NULL) AND (role <> 'agent' OR node IS NOT NULL)",
        name="subject",
    ),
)

audit = sa.Table(
    "audit",
    metadata,
    sa.Column("seq", SeqType, primary_key=True, autoincrement=True),
    sa.Column("time", sa.Double, nullable=False),
    sa.Column("actor", sa.String(128), nullable=False),
    sa.Column("actor_role", sa.String(8), nullable=False),
    sa.Column("action", sa.String(64), nullable=False),
    sa.Column("target", sa.String(256), nullable=False),
    sa.Column("detail", sa.JSON, nullable=False),
    sa.Index(None, "time"),
    sa.Index(None, "target", "seq"),
)

# The fair-share ledger (``scheduler.usage.DecayedUsage``): each queue's decayed past usage in
# share·seconds as of ``as_of``, saved by the controller on its interval so that a restart
# does not forget who used the cluster (Slurm keeps this in slurmdbd).
fairshare_usage = sa.Table(
    "fairshare_usage",
    metadata,
    sa.Column("queue", sa.String(NAME_MAX), primary_key=True),
    sa.Column("usage", sa.Double, nullable=False),
    sa.Column("as_of", sa.Double, nullable=False),
)

# GPU-time used, weighted by utilization (DCGM_FI_DEV_GPU_UTIL from the agents' samples), per
# user, queue and hour (server/store/gpuuse.py): `gpufleet accounting`'s "used" beside the
# GPU-hours allocated, kept across restarts
gpu_use = sa.Table(
    "gpu_use",
    metadata,
    sa.Column("user", sa.String(NAME_MAX), primary_key=True),
    sa.Column("queue", sa.String(NAME_MAX), primary_key=True),
    sa.Column("hour", sa.Double, primary_key=True),  # the hour's start (epoch seconds)
    sa.Column("used_gpu_s", sa.Double, nullable=False),
)

# Job secrets (server/secrets.py): each value sealed with AES-GCM (server/secrets_box.py),
# bound to (scope, owner, name); never a plaintext column. owner: the user (scope user), the
# queue (scope queue), "" (scope cluster). key_id: the key that sealed it (rotation later).
secrets = sa.Table(
    "secrets",
    metadata,
    sa.Column("id", SeqType, primary_key=True, autoincrement=True),
    sa.Column("scope", sa.String(8), nullable=False),
    sa.Column("owner", sa.String(NAME_MAX), nullable=False),
    sa.Column("name", sa.String(NAME_MAX), nullable=False),
    sa.Column("key_id", sa.String(32), nullable=False),
    sa.Column("nonce", sa.LargeBinary, nullable=False),
    sa.Column("ciphertext", sa.LargeBinary, nullable=False),
    sa.Column("created_by", sa.String(NAME_MAX), nullable=False),
    sa.Column("created_time", sa.Double, nullable=False),
    sa.Column("updated_time", sa.Double, nullable=False),
    sa.Column("last_used_time", sa.Double),
    sa.UniqueConstraint("scope", "owner", "name"),
    sa.CheckConstraint("scope IN ('user', 'queue', 'cluster')", name="scope"),
)

# Services (core/services.py): one row per service while it exists, the current spec and the
# ServiceMaster's ``RestoredService`` (generations, rollout, replicas) that a restart reads
# back. user and queue are the replica template's, copied out to be filtered on.
services = sa.Table(
    "services",
    metadata,
    sa.Column("name", sa.String(SERVICE_MAX), primary_key=True),
    sa.Column("user", sa.String(NAME_MAX), nullable=False),
    sa.Column("queue", sa.String(NAME_MAX), nullable=False),
    sa.Column("spec", sa.JSON, nullable=False),
    sa.Column("record", sa.JSON, nullable=False),
    sa.Column("created_time", sa.Double, nullable=False),
    sa.Column("updated_time", sa.Double, nullable=False),
    sa.Index(None, "user"),
)

# A service's history (ServiceEvent): kept after the service is gone, so no foreign key.
service_events = sa.Table(
    "service_events",
    metadata,
    sa.Column("seq", SeqType, primary_key=True, autoincrement=True),
    sa.Column("service", sa.String(SERVICE_MAX), nullable=False),
    sa.Column("time", sa.Double, nullable=False),
    sa.Column("what", sa.String(32), nullable=False),
    sa.Column("why", sa.Text, nullable=False),
    sa.Index(None, "service", "seq"),
)

# The leader lease of controllers in high availability (server/ha/, ADR 0032): one row (id 1).
# ``epoch`` rises at every takeover (the fencing token every write of the leader checks);
# ``version`` rises at every renewal (a standby times the lease by when it last saw it change,
# on its own clock); ``holder`` is the leading process ("" once it let go), ``address`` its
# URL (what a standby tells clients).
leader = sa.Table(
    "leader",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("epoch", sa.BigInteger, nullable=False),
    sa.Column("version", sa.BigInteger, nullable=False),
    sa.Column("holder", sa.String(256), nullable=False),
    sa.Column("address", sa.String(512), nullable=False),
    sa.Column("renewed_time", sa.Double, nullable=False),
)

# What a standby heard (server/ha/, ADR 0048): the agents that told it lately that they cannot
# reach the leader of ``epoch``, as the standby saw the lease at ``version``; ``nodes`` a JSON
# list. The leader reads the fresh claims against its epoch at each renewal and steps down
# when one shows it cut off from most of its agents. One row per standby process.
leader_claims = sa.Table(
    "leader_claims",
    metadata,
    sa.Column("standby", sa.String(256), primary_key=True),
    sa.Column("address", sa.String(512), nullable=False),
    sa.Column("epoch", sa.BigInteger, nullable=False),
    sa.Column("version", sa.BigInteger, nullable=False),
    sa.Column("nodes", sa.Text, nullable=False),
)

# Each service's endpoint on the gateway (server/endpoints.py) where controllers are in high
# availability: every one of them hands out the same port and token (ADR 0044). A single
# controller keeps them in its data directory instead.
endpoints = sa.Table(
    "endpoints",
    metadata,
    sa.Column("service", sa.String(SERVICE_MAX), primary_key=True),
    sa.Column("port", sa.Integer, nullable=False),
    sa.Column("token", sa.String(128), nullable=False),
)

# Each leaf's last defragmentation move (core ``DefragMoved``, ADR 0045): what a restarted
# controller needs of the moves in progress (their victims and attempts, the gang, the Reason).
defrag_moves = sa.Table(
    "defrag_moves",
    metadata,
    sa.Column("leaf", sa.String(NAME_MAX), primary_key=True),
    sa.Column("time", sa.Double, nullable=False),
    sa.Column("record", sa.JSON, nullable=False),
)
