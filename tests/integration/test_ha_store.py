"""The leader lease row in a real PostgreSQL (server/store/leader.py): one takeover wins, the
epoch rises, a renewal of a deposed leader fails, and every write of a deposed leader fails
in the store (ADR 0032)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from gpufleet.model.queue import QueueSpec
from gpufleet.server.store import Store
from gpufleet.server.store import leader as rows
from gpufleet.server.store.records import Deposed, StoreUnavailable
from gpufleet.server.store.schema import leader_claims

pytestmark = pytest.mark.requires("postgres")


@pytest.fixture
def pg(pg_url: str) -> Iterator[Store]:
    s = Store.open(pg_url)
    try:
        yield s
    finally:
        s.close()


def test_two_standbys_that_saw_the_same_row_take_it_once(pg: Store) -> None:
    assert rows.read(pg.engine) is None
    won: list[int | None] = []
    go = threading.Barrier(2)

    def take(who: str) -> None:
        go.wait()
        won.append(rows.take(pg.engine, who, f"http://{who}", None))

    ts = [threading.Thread(target=take, args=(w,)) for w in ("a", "b")]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert sorted(won, key=lambda e: e is None)[1] is None  # exactly one won
    epoch = next(e for e in won if e is not None)
    row = rows.read(pg.engine)
    assert row is not None and row.epoch == epoch and row.holder in ("a", "b")


def test_a_takeover_raises_the_epoch_and_deposes_the_old_leader(pg: Store) -> None:
    first = rows.take(pg.engine, "a", "http://a", None)
    assert first is not None
    assert rows.renew(pg.engine, first) == 2  # its version
    seen = rows.read(pg.engine)
    assert seen is not None and seen.version == 2
    assert rows.take(pg.engine, "b", "http://b", rows.read(pg.engine)) == first + 1
    assert rows.renew(pg.engine, first) is None  # deposed
    stale = rows.take(pg.engine, "c", "http://c", seen)  # what c saw is old: it loses
    assert stale is None
    rows.let_go(pg.engine, first + 1)
    row = rows.read(pg.engine)
    assert row is not None and row.holder == "" and row.epoch == first + 1


def test_a_standbys_claim_is_read_by_the_leader_of_its_epoch_while_fresh(pg: Store) -> None:
    epoch = rows.take(pg.engine, "a", "http://a", None)
    assert epoch is not None
    seen = rows.read(pg.engine)
    assert seen is not None
    rows.claim(pg.engine, "b", "http://b", seen, frozenset({"n1", "n0"}))
    rows.claim(pg.engine, "b", "http://b", seen, frozenset({"n0", "n1", "n2"}))  # replaced
    assert rows.claims(pg.engine, epoch, seen.version) == {"http://b": {"n0", "n1", "n2"}}
    assert rows.claims(pg.engine, epoch, seen.version + 1) == {}  # older than wanted
    assert rows.claims(pg.engine, epoch + 1, 0) == {}  # against another leader
    rows.claim(pg.engine, "b", "http://b", seen, frozenset())  # withdrawn
    assert rows.claims(pg.engine, epoch, 0) == {}
    rows.claim(pg.engine, "b", "http://b", seen, frozenset({"n0"}))
    assert rows.take(pg.engine, "b", "http://b", rows.read(pg.engine)) == epoch + 1
    with pg.engine.connect() as c:  # a takeover clears the claims against older leaders
        assert c.execute(sa.select(sa.func.count()).select_from(leader_claims)).scalar() == 0


def test_every_write_of_a_deposed_leader_fails_and_stores_nothing(pg: Store) -> None:
    epoch = rows.take(pg.engine, "a", "http://a", None)
    assert epoch is not None
    pg.fence_epoch = epoch
    pg.put_queue(QueueSpec("mine"))  # the leader writes
    rows.take(pg.engine, "b", "http://b", rows.read(pg.engine))
    with pytest.raises(Deposed, match="no longer leads"):
        pg.put_queue(QueueSpec("late"))
    assert isinstance(Deposed("x"), StoreUnavailable)  # a turn's callers hear 503
    assert {q.name for q in pg.queues()} == {"mine"}
    pg.fence_epoch = 0  # a standby writes nothing
    with pytest.raises(Deposed):
        pg.audit("x", "admin", "a", "t")


def test_a_takeover_waits_for_the_leaders_write_in_flight(pg: Store) -> None:
    """The share lock a write holds on the lease row: a takeover cannot slip in between the
    check and the commit, so the new leader reads everything the old one committed."""
    epoch = rows.take(pg.engine, "a", "http://a", None)
    assert epoch is not None
    with pg.engine.connect() as c, c.begin():
        rows.check(c, epoch)
        seen = rows.read(pg.engine)
        with pytest.raises(sa.exc.OperationalError, match="lock timeout"):
            rows.take(pg.engine, "b", "http://b", seen)  # waits, then gives up (bounded)
    assert rows.take(pg.engine, "b", "http://b", seen) == epoch + 1


def test_the_idle_timeout_ends_a_slow_write_but_never_a_slow_read(pg: Store) -> None:
    """The server ends a session idle inside a write (a frozen leader's share lock on the
    lease row), not inside a read: a new leader reading the store back on a busy host (its
    Python slow between statements) was cut off and stood down, again and again."""
    epoch = rows.take(pg.engine, "a", "http://a", None)
    assert epoch is not None
    pg.fence_epoch = epoch
    rows.idle_timeout(pg.engine, 100)
    with pg._read(snapshot=True) as c:
        c.execute(sa.text("SELECT 1"))
        time.sleep(0.5)  # the server's timer, not ours: real time must pass
        assert c.execute(sa.text("SELECT 2")).scalar() == 2
    with pytest.raises(StoreUnavailable), pg._write() as c:
        time.sleep(0.5)
        c.execute(sa.text("SELECT 3"))
