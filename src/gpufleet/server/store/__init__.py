"""The controller's durable store: SQLAlchemy Core tables, Alembic migrations, one ``Store``."""

from gpufleet.server.store.codec import spec_from_dict, spec_to_dict
from gpufleet.server.store.engine import sqlite_url
from gpufleet.server.store.records import (
    AuditEntry,
    IdempotencyConflict,
    JobEvent,
    JobUpdate,
    LastAdminToken,
    NewJob,
    NodeEventRecord,
    NodeRecord,
    RestartState,
    StoredJob,
    StoreError,
    SubmitAudit,
    TokenInfo,
    Usage,
)
from gpufleet.server.store.store import Store

__all__ = [
    "AuditEntry",
    "IdempotencyConflict",
    "JobEvent",
    "JobUpdate",
    "LastAdminToken",
    "NewJob",
    "NodeEventRecord",
    "NodeRecord",
    "RestartState",
    "Store",
    "StoreError",
    "StoredJob",
    "SubmitAudit",
    "TokenInfo",
    "Usage",
    "spec_from_dict",
    "spec_to_dict",
    "sqlite_url",
]
