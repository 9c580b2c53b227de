"""An advance reservation of nodes for a window of time (Slurm's ``scontrol create reservation``).

During ``[start, end)`` the reservation's nodes take only jobs that ask for it by name
(``--reservation=NAME``) and whose user it names; no other job may run on them then, so a job
whose time limit would cross ``start`` does not start there (backfill fills the gap before the
window with jobs that end in time). ``maint`` marks a maintenance window (Slurm's
``flags=maint``): the same rules, told as maintenance in the Reasons.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.model.hostlist import compress

MAX_NAME = 63


@dataclass(frozen=True, slots=True)
class NodeReservation:
    name: str
    nodes: tuple[str, ...]  # node names, expanded and sorted as given
    start: float  # the Clock's seconds
    end: float
    users: tuple[str, ...] = ()  # who may run jobs inside it (with --reservation=NAME)
    maint: bool = False  # a maintenance window (Slurm's flags=maint)
    created_by: str = ""

    def __post_init__(self) -> None:
        if not self.name or len(self.name) > MAX_NAME:
            raise ValueError(f"reservation name must be 1 to {MAX_NAME} characters")
        if not self.nodes:
            raise ValueError(f"reservation {self.name}: names no node")
        if not self.end > self.start:
            raise ValueError(f"reservation {self.name}: its end must come after its start")

    @property
    def duration_s(self) -> float:
        return self.end - self.start

    @property
    def hostlist(self) -> str:
        """Its nodes in Slurm's hostlist syntax (``node-[3-6]``)."""
        return compress(self.nodes)

    def active(self, now: float) -> bool:
        return self.start <= now < self.end

    def state(self, now: float) -> str:
        """``ACTIVE`` or ``INACTIVE`` (not started yet, or over), as scontrol shows it."""
        return "ACTIVE" if self.active(now) else "INACTIVE"

    def admits(self, user: str) -> bool:
        """Whether ``user``'s jobs may run inside it (asking for it by name)."""
        return user in self.users

    def crossed_by(self, now: float, limit_s: float | None) -> bool:
        """Whether a job started ``now`` with time limit ``limit_s`` (None: none) would still
        run at some moment of the window: it may not start on its nodes then, unless it
        belongs to the reservation."""
        if now >= self.end:
            return False
        return limit_s is None or now + limit_s > self.start
