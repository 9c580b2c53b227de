"""What the contract compares: decisions, with no times in them. The order of starts, each
job's states in order, each attempt's placement (node and GPU indices per rank) and how it
ended. Starts at the same moment (one scheduling pass) are ordered by name."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

ATTEMPT_STATES = frozenset({"STARTING", "RUNNING"})

Where = tuple[tuple[str, tuple[int, ...]], ...]  # per rank: node, GPU indices


@dataclass(frozen=True)
class Step:
    """One transition of one job, as either side records it."""

    job: str
    attempt: int
    state: str
    time: float


@dataclass(frozen=True)
class Decisions:
    starts: tuple[str, ...]  # "job#attempt" in start order
    histories: tuple[tuple[str, tuple[str, ...]], ...]  # per job: its states in order
    attempts: tuple[tuple[str, int, str, str], ...]  # job, attempt, placement, how it ended

    def lines(self) -> list[str]:
        """One line per decision: what the test compares, so a failure shows a line diff."""
        out = ["start order: " + ", ".join(self.starts)]
        out += [f"{job}: {' '.join(states)}" for job, states in self.histories]
        out += [f"{job} attempt {a}: {where} -> {end}" for job, a, where, end in self.attempts]
        return out


def decide(
    job_names: Iterable[str], steps: Sequence[Step], where: dict[tuple[str, int], Where]
) -> Decisions:
    names = sorted(job_names)
    starts = sorted((s.time, s.job, s.attempt) for s in steps if s.state == "STARTING")
    histories = []
    attempts = []
    for name in names:
        mine = [s for s in steps if s.job == name]
        histories.append((name, tuple(s.state for s in mine)))
        for a in sorted({s.attempt for s in mine if s.state == "STARTING"}):
            after = [s.state for s in mine if s.attempt == a and s.state not in ATTEMPT_STATES]
            end = next((st for st in after if st != "PENDING"), "(running)")
            attempts.append((name, a, _where_text(where.get((name, a))), end))
    return Decisions(tuple(f"{j}#{a}" for _, j, a in starts), tuple(histories), tuple(attempts))


def _where_text(w: Where | None) -> str:
    if w is None:
        return "(placement not seen)"
    return " ".join(f"{node}[{','.join(map(str, gpus))}]" for node, gpus in w)
