"""The leader lease as one process sees it (server/ha/lease.py), on a ManualClock: when a
standby may take over, when a leader stops leading, and that the old leader always stops
before a standby may take over (ADR 0032)."""

from __future__ import annotations

import pytest

from gpufleet.base.clock import ManualClock
from gpufleet.server.ha.hearing import Hearing
from gpufleet.server.ha.lease import LeaseBook, LeaseTimes, outvoted
from gpufleet.server.store.records import LeaderRow

TIMES = LeaseTimes.of(3.0)


def row(epoch: int, version: int, holder: str = "a") -> LeaderRow:
    return LeaderRow(epoch, version, holder, f"http://{holder}")


def test_the_timings_follow_the_lease_and_refuse_what_cannot_fence() -> None:
    assert (TIMES.lease_s, TIMES.renew_s, TIMES.poll_s, TIMES.guard_s) == (3.0, 0.75, 0.25, 0.75)
    with pytest.raises(ValueError, match="guard"):
        LeaseTimes(3.0, 0.5, 0.25, 3.0)
    with pytest.raises(ValueError, match="too seldom"):
        LeaseTimes(3.0, 2.0, 0.25, 0.75)


def test_a_standby_takes_an_empty_or_released_lease_at_once() -> None:
    b = LeaseBook("b", TIMES)
    assert not b.may_take(0.0)  # nothing read yet
    b.observed(None, 0.0)
    assert b.may_take(0.0)
    b.observed(row(5, 9, holder=""), 0.1)  # a leader that stopped cleanly let go
    assert b.may_take(0.1)


def test_a_controller_that_gave_the_lead_up_lets_another_take_it_first() -> None:
    b = LeaseBook("b", TIMES)
    b.not_before = 6.0
    b.observed(None, 0.0)
    assert not b.may_take(5.9)
    assert b.may_take(6.0)


def test_a_standby_waits_a_whole_lease_without_a_renewal_it_saw() -> None:
    clock = ManualClock(100.0)
    b = LeaseBook("b", TIMES)
    b.observed(row(5, 1), clock.now())
    clock.advance(2.9)
    b.observed(row(5, 1), clock.now())  # unchanged: the count goes on
    assert not b.may_take(clock.now())
    b.observed(row(5, 2), clock.now())  # renewed: counted again from here
    clock.advance(2.9)
    assert not b.may_take(clock.now())
    clock.advance(0.1)
    assert b.may_take(clock.now())
    assert b.leader_address() == "http://a"


def test_a_leader_leads_until_a_guard_before_its_lease_from_the_renewal_start() -> None:
    clock = ManualClock(0.0)
    a = LeaseBook("a", TIMES)
    a.took(7, started=clock.now())
    assert a.leading(clock.now()) and a.epoch == 7
    clock.advance(1.0)
    a.renewed(started=clock.now())  # the renewal that started at 1.0 succeeded
    clock.advance(3.0 - 0.75 - 0.01)
    assert a.leading(clock.now())
    clock.advance(0.01)
    assert not a.leading(clock.now())  # no renewal since: it stops, while still holding it
    a.renewed(started=clock.now())
    assert a.leading(clock.now())  # nobody took it meanwhile: it leads again
    a.deposed()
    assert not a.leading(clock.now()) and not a.may_take(clock.now())


def test_the_old_leader_stops_before_any_standby_may_take_over() -> None:
    """Whatever happens to the leader after a renewal (frozen, cut off), the standby's count
    starts when it sees that renewal, after the leader's started: the leader has stopped a
    guard earlier."""
    for seen_after in (0.0, 0.01, 0.2, 0.74):
        clock = ManualClock(0.0)
        a, b = LeaseBook("a", TIMES), LeaseBook("b", TIMES)
        a.took(1, started=clock.now())
        clock.advance(0.5)
        a.renewed(started=clock.now())  # then a freezes
        clock.advance(seen_after)
        b.observed(row(1, 2), clock.now())
        while not b.may_take(clock.now()):
            clock.advance(0.05)
            b.observed(row(1, 2), clock.now())
        assert not a.leading(clock.now())
        assert a.valid_until <= clock.now() - TIMES.guard_s + 1e-9


def test_ha_with_sqlite_is_refused_with_why(tmp_path: object) -> None:
    from gpufleet.server.config import ServerConfig

    with pytest.raises(ValueError, match=r"--ha needs PostgreSQL .*SQLite is a file on one host"):
        ServerConfig(ha=True)
    ServerConfig(ha=True, db_url="postgresql://postgres@127.0.0.1/test")


def test_a_leader_steps_down_only_for_a_standby_that_hears_most_of_the_live_agents() -> None:
    some = frozenset({"n0", "n1", "n2"})
    assert outvoted(set(), []) == set()  # nobody claims: it stays
    assert outvoted(set(), [frozenset()]) == set()  # all nodes down: nobody hears any of them
    assert outvoted(set(), [some]) == some  # cut off from all: the standby hears them
    assert outvoted({"n3", "n4"}, [some]) == some  # three of five reach only the standby
    assert outvoted({"n3", "n4", "n5"}, [some]) == set()  # a tie: no flapping
    assert outvoted({"n0", "n1"}, [some]) == set()  # n0, n1 reach both: n2 alone is cut off
    best = frozenset({"n0", "n1", "n2", "n3"})
    assert outvoted(set(), [some, best]) == best  # the standby that hears the most


def test_a_standby_hears_an_agent_cut_off_from_the_leader_for_a_window() -> None:
    h = Hearing(window_s=10.0)
    h.told("n0", frozenset({"http://a:1"}), 100.0)
    h.told("n1", frozenset({"http://b:1"}), 100.0)  # another controller: not the leader
    assert h.cut_off_from("http://a:1/", 105.0) == {"n0"}
    assert h.cut_off_from("", 105.0) == set()  # no leader: nothing to claim against
    h.told("n1", frozenset({"http://a:1", "http://b:1"}), 108.0)
    assert h.cut_off_from("http://a:1", 111.0) == {"n1"}  # n0 said so 11 s ago: forgotten


def test_a_standby_says_how_long_ago_it_saw_the_leader_for_its_stale_reads() -> None:
    b, clock = LeaseBook("b", TIMES), ManualClock(100.0)
    assert b.last_contact(clock.now()) == (None, False)  # never saw a row: no age to give
    b.observed(row(1, 1), clock.now())
    clock.advance(0.5)
    assert b.last_contact(clock.now()) == (0.5, True)
    b.observed(row(1, 1), clock.now())  # the same version: no renewal, the age goes on
    clock.advance(TIMES.lease_s)
    assert b.last_contact(clock.now()) == (0.5 + TIMES.lease_s, False)  # it lapsed
    b.observed(row(1, 2), clock.now())  # renewed after all
    assert b.last_contact(clock.now()) == (0.0, True)
    b.observed(row(1, 3, holder=""), clock.now())  # let go cleanly: its data, no leader
    clock.advance(2.0)
    assert b.last_contact(clock.now()) == (2.0, False)
