"""How a job ended, as Slurm says it: the reason (``scontrol show job``'s ``Reason=``, squeue's
``%r``) and the exit status (``ExitCode=CODE:SIGNAL``), worked out once, when the job ends, and
stored with it (the jobs table's ``ended``).

What a real Slurm 22.05 printed (``/work/shared/tools/slurm_local.sh``): a batch script that
exited 3, ``FAILED Reason=NonZeroExitCode ExitCode=3:0``; one killed by a signal (9),
``FAILED Reason=JobLaunchFailure ExitCode=0:9``; one past its time limit, ``TIMEOUT
Reason=TimeLimit ExitCode=0:15``; a running one cancelled, ``CANCELLED Reason=None
ExitCode=0:15``; a pending one cancelled, its pending reason and ``0:0``; one that completed,
``Reason=None ExitCode=0:0``. A job that ended pending keeps its dependencies not met then
(``Dependency=afterok:1(failed)``, ``afterok:9(unfulfilled)``); one that ran, ``(null)``
(tests/integration/test_dependency_never_vs_slurm.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gpufleet.model.limits import SIGNALS

NONE = "None"  # Slurm's reason of a job that ended as it should (or was cancelled running)
EXIT_CODE = "NonZeroExitCode"
SIGNALED = "JobLaunchFailure"  # Slurm's for a batch script killed by a signal
TIME_LIMIT = "TimeLimit"
NODE_DOWN = "NodeDown"  # a node failure ended it (--no-requeue)
DEPENDENCY = "DependencyNeverSatisfied"
_KILLED = re.compile(r"killed by SIG([A-Z0-9]+)")


@dataclass(frozen=True, slots=True)
class JobEnd:
    reason: str = NONE
    code: int = 0  # the exit code of the process that decided the job's end
    signal: int = 0  # the signal that killed it (0: none)
    # a job that ended pending: its dependencies not met then, as ``scontrol show job``'s
    # ``Dependency=`` goes on printing them (``afterok:1(failed)``); "": none (or it ran)
    dependency: str = ""

    @property
    def exit_code(self) -> str:
        """As ``scontrol show job`` and ``sacct`` print it: ``CODE:SIGNAL``."""
        return f"{self.code}:{self.signal}"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"reason": self.reason, "code": self.code, "signal": self.signal}
        if self.dependency:
            out["dependency"] = self.dependency
        return out

    @staticmethod
    def from_dict(d: Any) -> JobEnd | None:
        if not isinstance(d, dict):
            return None
        code, signal = int(d.get("code", 0)), int(d.get("signal", 0))
        return JobEnd(str(d.get("reason", NONE)), code, signal, str(d.get("dependency", "")))


def exit_status(code: int, why: str) -> tuple[int, int]:
    """(exit code, signal) of a task's exit as the agent reports it: a task killed by a signal
    exits ``128 + N``, its why saying ``killed by SIGNAME`` (agent/runner/exits.py)."""
    m = _KILLED.search(why)
    if m is not None and m.group(1) in SIGNALS:
        return 0, SIGNALS[m.group(1)]
    return code, 0


def ended_as(state: str, status: tuple[int, int] | None, *, node_lost: bool = False) -> JobEnd:
    """The end of a job that ran (an attempt ended it): ``state`` its final state's value,
    ``status`` the deciding rank's (code, signal), None when no rank reported one."""
    code, sig = status or (0, 0)
    if state == "TIMED_OUT":
        return JobEnd(TIME_LIMIT, code, sig or 15)
    if state == "CANCELLED":
        return JobEnd(NONE, code, sig or (15 if status is None else 0))
    if state == "FAILED":
        if node_lost:
            return JobEnd(NODE_DOWN, code, sig)
        if sig:
            return JobEnd(SIGNALED, 0, sig)
        return JobEnd(EXIT_CODE, code or 1, 0)
    return JobEnd(NONE, code, sig)
