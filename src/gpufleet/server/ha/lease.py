"""The leader lease, as one process sees it: pure, on the times it is given (a monotonic
clock's), so that its rules are tested by stepping a ``ManualClock``.

The lease is timed by each process on its own clock, never by comparing clocks of two hosts
(as Kubernetes' leader election does):

- a **standby** notes when it last saw the row change (its ``version`` rises at every
  renewal); once it has seen no change for ``lease_s``, the holder is presumed dead and the
  standby may take the row (a compare-and-set on what it saw, so two standbys cannot both);
- the **leader** counts its lease from the moment it *started* a renewal that succeeded, and
  stops leading (no command to an agent, no answer as the leader) ``guard_s`` before
  ``lease_s`` has passed since. A standby's count starts only once it saw that renewal, which
  is after it committed, so the old leader has stopped ``guard_s`` before anyone may take
  over, whatever happened to it meanwhile (frozen, partitioned, slow).

The epoch the row gets at each takeover is the fencing token: every write of the leader
checks it in the database (``store/leader.py``), and every command to an agent carries it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gpufleet.server.store.records import LeaderRow

Role = Literal["standby", "leader", "deposed"]


@dataclass(frozen=True, slots=True)
class LeaseTimes:
    lease_s: float = 3.0  # no renewal seen for this long: the leader is presumed gone
    renew_s: float = 0.75  # the leader renews this often
    poll_s: float = 0.25  # a standby reads the row this often
    guard_s: float = 0.75  # the leader stops this long before its lease could be taken

    def __post_init__(self) -> None:
        if not 0 < self.guard_s < self.lease_s:
            raise ValueError(
                f"leader lease: need 0 < guard ({self.guard_s:g} s) < lease ({self.lease_s:g} s)"
            )
        if not 0 < self.renew_s <= (self.lease_s - self.guard_s) / 2:
            raise ValueError(
                f"leader lease: renew every {self.renew_s:g} s is too seldom for a "
                f"{self.lease_s:g} s lease with a {self.guard_s:g} s guard (at most half of "
                "their difference, so that one lost renewal does not cost the lead)"
            )
        if not 0 < self.poll_s <= self.lease_s / 2:
            raise ValueError(f"leader lease: poll every {self.poll_s:g} s (0 < poll <= lease/2)")

    @classmethod
    def of(cls, lease_s: float) -> LeaseTimes:
        """The other timings from the lease: renew at a quarter, poll at a twelfth, a quarter
        of guard."""
        return cls(lease_s, lease_s / 4, lease_s / 12, lease_s / 4)


class LeaseBook:
    """What this process knows of the lease. ``me``: this process's holder name."""

    def __init__(self, me: str, times: LeaseTimes) -> None:
        self.me = me
        self.times = times
        self.role: Role = "standby"
        self.epoch = 0  # ours, while leading
        self.valid_until = 0.0  # while leading: lead until then, no later
        self.seen: LeaderRow | None = None  # the row as last read
        self.seen_at = 0.0  # when it last changed, as we saw it
        self._seen_any = False
        # a controller that gave the lead up takes it again no sooner than this (the standby
        # its agents reach goes first)
        self.not_before = 0.0

    # ----- a standby ------------------------------------------------------------------------

    def observed(self, row: LeaderRow | None, now: float) -> None:
        """A read of the row at ``now``: a change (another renewal, a new leader) restarts the
        count."""
        if not self._seen_any or _key(row) != _key(self.seen):
            self.seen, self.seen_at, self._seen_any = row, now, True

    def may_take(self, now: float) -> bool:
        """Whether a standby may try to take the lease now: nobody holds it, or nobody renewed
        it for a whole lease as far as we saw."""
        if self.role != "standby" or not self._seen_any or now < self.not_before:
            return False
        if self.seen is None or not self.seen.holder:
            return True
        return now - self.seen_at >= self.times.lease_s

    def last_contact(self, now: float) -> tuple[float | None, bool]:
        """(seconds since we last saw the leader renew, or let go of, the lease: None when we
        never saw one; whether one holds it as far as we saw), for a standby's stale reads."""
        if self.seen is None:
            return None, False
        age = max(0.0, now - self.seen_at)
        return age, bool(self.seen.holder) and age < self.times.lease_s

    def leader_address(self) -> str:
        """Where the leader is, as last seen ("" unknown, or ourselves while we lead)."""
        if self.role == "leader" or self.seen is None:
            return ""
        return self.seen.address

    # ----- the leader -----------------------------------------------------------------------

    def took(self, epoch: int, started: float) -> None:
        """We took the lease with a write that started at ``started``."""
        self.role, self.epoch = "leader", epoch
        self.valid_until = started + self.times.lease_s - self.times.guard_s

    def renewed(self, started: float) -> None:
        """A renewal that started at ``started`` succeeded."""
        if self.role == "leader":
            self.valid_until = max(
                self.valid_until, started + self.times.lease_s - self.times.guard_s
            )

    def deposed(self) -> None:
        """Another took the lease (a renewal or a write found a higher epoch)."""
        self.role = "deposed"

    def leading(self, now: float) -> bool:
        """Whether we may act as the leader now (answer, send commands)."""
        return self.role == "leader" and now < self.valid_until

    def renew_due(self, last_start: float, now: float) -> bool:
        return now - last_start >= self.times.renew_s


def outvoted(heard: set[str], claims: list[frozenset[str]]) -> frozenset[str]:
    """Raft's check-quorum, through the store (ADR 0048): the nodes of the standby's claim
    that shows the leader cut off from most of the agents it should lead, or none. ``heard``:
    the nodes the leader heard lately; each claim: the nodes that told one standby lately
    that they cannot reach the leader. A claim wins when the nodes it holds that the leader
    does not hear outnumber those the leader hears: a majority of the live agents reach that
    standby and not the leader. A standby that hears nobody claims nothing, so a leader that
    hears nobody either (every node down) stays: another would fare no better."""
    best: frozenset[str] = frozenset()
    for nodes in claims:
        only = nodes - heard
        if len(only) > len(heard) and len(only) > len(best):
            best = only
    return best


def _key(row: LeaderRow | None) -> tuple[int, int, str] | None:
    return None if row is None else (row.epoch, row.version, row.holder)
