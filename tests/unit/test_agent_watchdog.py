"""The watchdog's rule with numbers for the time, and the lease file it reads."""

from __future__ import annotations

import math
import os
import signal
from pathlib import Path

from gpufleet.agent.watchdog import IDLE_WAIT_S, Fence, Lease, quiet_for, read_lease, write_lease

A, B = (100, 1.0), (200, 2.0)  # (process group, create time)


def test_nothing_happens_while_the_lease_holds() -> None:
    f = Fence()
    assert f.step(9.9, Lease(10.0, 2.0), {A, B}) == []


def test_a_live_agent_s_watchdog_sleeps_until_its_lease_ends_at_most_a_second() -> None:
    f = Fence()
    assert quiet_for(9.5, Lease(10.0, 2.0), False, f) == 0.5  # wakes at the deadline itself
    assert quiet_for(0.0, Lease(10.0, 2.0), False, f) == IDLE_WAIT_S
    # polled instead: no lease on the pipe yet, lapsed, its agent gone, or a task being fenced
    assert quiet_for(0.0, None, False, f) is None
    assert quiet_for(10.0, Lease(10.0, 2.0), False, f) is None
    assert quiet_for(0.0, Lease(10.0, 2.0), True, f) is None
    f.step(10.0, Lease(10.0, 2.0), {A})
    assert quiet_for(11.0, Lease(20.0, 2.0), False, f) is None


def test_a_lapsed_lease_terms_every_task_then_kills_after_the_grace() -> None:
    f = Fence()
    lease = Lease(10.0, 2.0)
    assert f.step(10.0, lease, {A, B}) == [(A, signal.SIGTERM), (B, signal.SIGTERM)]
    assert f.step(11.0, lease, {A, B}) == []  # one SIGTERM each, then the grace
    assert f.step(12.0, lease, {A, B}) == [(A, signal.SIGKILL), (B, signal.SIGKILL)]
    # gone: forgotten; one still there is killed again
    assert f.step(12.1, lease, {B}) == [(B, signal.SIGKILL)]
    assert f.step(12.2, lease, set()) == [] and not f.kill_at


def test_a_renewal_does_not_save_a_task_already_fenced() -> None:
    # the controller may have counted it lost already: it must die all the same
    f = Fence()
    f.step(10.0, Lease(10.0, 2.0), {A})
    assert f.step(12.0, Lease(20.0, 2.0), {A, B}) == [(A, signal.SIGKILL)]  # B: new, leased


def test_no_lease_is_a_lapsed_lease() -> None:
    f = Fence(default_grace_s=1.0)
    assert f.step(0.0, None, {A}) == [(A, signal.SIGTERM)]
    assert f.step(1.0, None, {A}) == [(A, signal.SIGKILL)]


def test_the_lease_file_round_trips_and_a_bad_one_reads_as_none(tmp_path: Path) -> None:
    assert read_lease(tmp_path) is None
    write_lease(tmp_path, 123.5, 2.0)
    assert read_lease(tmp_path) == Lease(123.5, 2.0, os.getpid())
    assert (tmp_path / "lease.json").stat().st_mode & 0o777 == 0o600
    write_lease(tmp_path, -math.inf, 2.0)  # before the first registration
    lease = read_lease(tmp_path)
    assert lease is not None and lease.until == 0.0
    (tmp_path / "lease.json").write_text("{not json")
    assert read_lease(tmp_path) is None
    assert [p.name for p in tmp_path.iterdir()] == ["lease.json"]  # no temporary left
