"""The task runner: each rank a subprocess in its own process group, logs to files, time limits
and kills by signal to the whole group.

Nothing here blocks on a task. ``poll(now)`` reaps what has exited and acts on deadlines
(warning signal → the job's signal; time limit → SIGTERM; grace over → SIGKILL), so a test
steps a ``ManualClock`` instead of sleeping through a grace period. Exits are reported as the
shell does: a task killed by a signal exits ``128 + signal``.

The warning signal is Slurm's ``--signal=[B:]SIG@T``: SIG goes out once per attempt, T seconds
before the time limit (at the first poll after the start when the limit is shorter than T), to
the task's whole process group; with ``B:`` only to its main process, the command the rank runs
(gpufleet runs the command once per rank and has no batch shell apart from it, so B: means that
rank's own process, not the children it started). The time limit's kill follows unchanged.

The steps, one module each: ``launch`` (a bare task; ``in_container`` one in an image, ``argv``
the command lines around it), ``supervise`` (deadlines and signals), ``exits`` (how a task ends,
and the orphans of a previous agent); ``process`` the live task and its process group;
``taskrunner`` the node's live tasks behind the agent's calls. The types the agent's pure state
machine shares with it are in ``agent/tasks.py``.
"""

from gpufleet.agent.runner.argv import STEP_DAEMON, TASKSTART
from gpufleet.agent.runner.in_container import IMAGE_ENV_TTL_S
from gpufleet.agent.runner.taskrunner import TaskRunner
from gpufleet.agent.tasks import (
    EXIT_NOT_EXECUTABLE,
    EXIT_NOT_FOUND,
    EXIT_REFUSED,
    FENCED,
    Key,
    LatestAttempts,
    RunnerEvent,
    signal_name,
)

__all__ = [
    "EXIT_NOT_EXECUTABLE",
    "EXIT_NOT_FOUND",
    "EXIT_REFUSED",
    "FENCED",
    "IMAGE_ENV_TTL_S",
    "STEP_DAEMON",
    "TASKSTART",
    "Key",
    "LatestAttempts",
    "RunnerEvent",
    "TaskRunner",
    "signal_name",
]
