"""Defragmentation moves in the store on SQLite and PostgreSQL (ADR 0045): the core's
``DefragMoved`` committed with its step (through the journal, live: tests/e2e/test_defrag_live.py),
each leaf's last kept, read back for a restart; a replica's make-before-break move kept in its
service's record."""

from __future__ import annotations

import pytest

from gpufleet.core.commands import DefragMoved, ServiceRecord
from gpufleet.core.services import RestoredReplica, RestoredService
from gpufleet.model.service import ServiceSpec
from gpufleet.scheduler.snapshot import DefragMove
from gpufleet.server.store import Store
from gpufleet.server.store.services import record_from_dict, record_to_dict

pytestmark = pytest.mark.both_stores

MOVE = DefragMove(
    "leaf-1",
    100.0,
    "g",
    ("b2", "b3"),
    "moving 2 jobs to free 2 nodes under leaf-1",
    {"victims": ["b2", "b3"], "leaf": "leaf-1", "nodes": ["n02", "n03"], "lost_gpu_s": 396.0},
    ("b2",),
    (1, 3),
)


def test_each_leafs_last_move_is_kept_for_a_restart(store: Store) -> None:
    store.apply_transitions([], defrag_moves=[DefragMoved(MOVE)], time=100.0)
    assert store.load_jobs_for_restart().defrag_moves == (MOVE,)
    later = DefragMove("leaf-1", 700.0, "h", ("c1",), "moving 1 job", {}, (), (2,))
    other = DefragMove("leaf-0", 400.0, "k", ("d1",), "moving 1 job", {}, (), (1,))
    store.apply_transitions([], defrag_moves=[DefragMoved(other), DefragMoved(later)])
    assert store.load_jobs_for_restart().defrag_moves == (other, later)  # oldest first


def test_a_replicas_move_is_in_its_services_record() -> None:
    spec = ServiceSpec.from_dict(
        {"name": "web", "replicas": 1, "replica": {"user": "alice", "command": ["serve"]}}
    )
    moving = RestoredReplica("web.1", 1, 1, 8000, 1.0, 2.0, False, "", ("n02", "n03"), 100.0)
    rec = RestoredService(((1, spec),), 1, 1, (moving,))
    assert record_from_dict(record_to_dict(rec)) == rec
    old = record_to_dict(rec)
    for r in old["replicas"]:  # a record written before moves were stored
        del r["moving"], r["moving_since"]
    assert record_from_dict(old).replicas[0].moving == ()
    assert ServiceRecord("web", rec).record == rec
