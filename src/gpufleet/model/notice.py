"""The notice a job gets before it is stopped for another's sake (a preemption): its
checkpoint declaration, and how long each stop may wait for it. Pure: no clock, no I/O.

A job declares ``checkpoint: {signal: USR1, grace_s: 120}`` (or Slurm's ``--signal=B:USR1@120``,
whose signal Slurm's ``PreemptParameters=send_user_signal`` sends at a preemption too). At the
stop its tasks get the signal, then up to the grace (capped by its queue's
``preempt_grace_max_s``) to exit or to write the file named by ``GPUFLEET_CHECKPOINT_FILE``,
which ends the wait; then SIGTERM, and SIGKILL after the kill grace (ADR 0036)."""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.model.limits import SIGNALS

# a queue's cap on a job's grace when its spec says none (Kubernetes' terminationGracePeriod
# is 30 s; a large model's checkpoint to shared storage takes minutes)
PREEMPT_GRACE_MAX_S = 300
# the file a job writes to say its checkpoint is done, in its working directory
CHECKPOINT_FILE = "gpufleet-{job}.checkpoint"


@dataclass(frozen=True, slots=True)
class CheckpointNotice:
    """``signal`` to the job's tasks (with ``batch_only``, Slurm's B:, to the batch script's
    shell alone; else as the warning signal goes), then up to ``grace_s`` for its checkpoint."""

    signal: int
    grace_s: int
    batch_only: bool = False


@dataclass(frozen=True, slots=True)
class StopNotice:
    """What one stop gives a job's tasks: the signal now, then up to ``wait_s`` (its grace,
    capped by its queue) before SIGTERM, unless the checkpoint file is written first."""

    signal: int
    wait_s: float
    batch_only: bool = False

    def describe(self) -> str:
        names = {n: k for k, n in SIGNALS.items()}
        sig = f"SIG{names[self.signal]}" if self.signal in names else f"signal {self.signal}"
        return f"{sig}, then up to {self.wait_s:g} s for its checkpoint"


def stop_notice(notice: CheckpointNotice | None, cap_s: float) -> StopNotice | None:
    """The notice a preemption gives under a queue's cap; None: SIGTERM at once."""
    if notice is None:
        return None
    return StopNotice(notice.signal, float(max(0.0, min(notice.grace_s, cap_s))), notice.batch_only)


def checkpoint_file(job_id: str) -> str:
    """The job's checkpoint file, relative to its working directory: the same for every attempt
    (the submit directory's, as Slurm's ``slurm-%j.out``)."""
    return CHECKPOINT_FILE.format(job=job_id)


# The reasons of the controller's Kills that evict a job (``JobMaster.evict``: a preemption, a
# drain's deadline, the idle policy's requeue): an agent that stopped a rank for one of them
# says so with its exit (cause "evicted"), so that a controller restarted meanwhile, which
# forgot the stop, requeues the job instead of reading the exit as a failure.
EVICTION_KILLS = frozenset({"preempted", "drained", "idle"})
