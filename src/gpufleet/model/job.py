"""What a user asks for (JobSpec) and the job's life (JobState, transitions, attempts)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from gpufleet.model.container import ContainerSpec
from gpufleet.model.errors import SpecError, every
from gpufleet.model.job_end import JobEnd
from gpufleet.model.limits import SIGNAL_BEFORE_S, SIGNALS
from gpufleet.model.notice import CheckpointNotice
from gpufleet.model.resources import MILLI, Resources
from gpufleet.model.secrets import SecretRef
from gpufleet.model.validate import MAX_ARG, MAX_ENV_VALUE, MAX_NAME, MAX_TEXT

# The longest each string of a spec may be (characters).
SPEC_TEXT: dict[str, int] = {
    "name": MAX_NAME,
    "user": MAX_NAME,
    "queue": MAX_NAME,
    "queues": MAX_NAME,  # each
    "dataset": MAX_TEXT,
    "gpu_models": MAX_NAME,  # each
    "command": MAX_ARG,  # each argument, or the one shell line
    "env": MAX_ENV_VALUE,  # each value (keys are names)
    "constraint": 1024,
    "gres_type": MAX_NAME,
    "reservation": MAX_NAME,
    "nodelist": MAX_TEXT,  # each entry, a name or a hostlist before expansion
    "exclude": MAX_TEXT,
    "submit_env": MAX_ENV_VALUE,  # each value of the captured environment
    "workdir": MAX_TEXT,
    "output": MAX_TEXT,
    "error": MAX_TEXT,
    "input": MAX_TEXT,
}
OPEN_MODES = ("truncate", "append")  # sbatch's --open-mode


class TopologyLevel(StrEnum):
    """How far up ``cluster → pod → leaf → node`` a gang may spread."""

    NODE = "node"
    LEAF = "leaf"
    POD = "pod"
    ANY = "any"

    @property
    def rank(self) -> int:
        return _LEVEL_RANK[self]


_LEVEL_RANK = {
    TopologyLevel.NODE: 0,
    TopologyLevel.LEAF: 1,
    TopologyLevel.POD: 2,
    TopologyLevel.ANY: 3,
}


@dataclass(frozen=True, slots=True)
class Topology:
    level: TopologyLevel = TopologyLevel.ANY
    required: bool = False

    def describe(self) -> str:
        if self.level is TopologyLevel.ANY:
            return "anywhere"
        return f"under one {self.level.value}" + ("" if self.required else " (preferred)")


@dataclass(frozen=True, slots=True)
class WarningSignal:
    """Slurm's ``--signal=[B:]SIG[@T]``: send ``number`` ``before_s`` seconds before the time
    limit (once per attempt; at the start when the limit is shorter), to the whole process
    group of every task, or with ``batch_only`` to each task's main process alone (gpufleet runs
    the command once per rank: B: means that rank's own process, not its children)."""

    number: int
    before_s: int = SIGNAL_BEFORE_S
    batch_only: bool = False

    def describe(self) -> str:
        names = {n: k for k, n in SIGNALS.items()}
        sig = f"SIG{names[self.number]}" if self.number in names else f"signal {self.number}"
        to = "each task's main process" if self.batch_only else "each task's process group"
        return f"{sig} to {to} {self.before_s} s before the time limit"


@dataclass(frozen=True, slots=True)
class JobSpec:
    name: str
    user: str
    queue: str = "default"
    workers: int = 1  # gang size: all start together or none does
    gpus_per_worker: int = 1
    gpu_milli: int = MILLI  # share of each GPU; < 1000 shares a device (one GPU per worker)
    cpu_milli: int = 1000  # per worker
    memory_mib: int = 4096  # per worker
    gpu_models: tuple[str, ...] = ()  # allowed models; empty = any
    time_limit_s: float | None = None
    priority: int = 0
    preemptible: bool = True
    topology: Topology = field(default_factory=Topology)
    dataset: str = ""
    max_retries: int = 0
    command: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    signal: WarningSignal | None = None  # a warning before the time limit (Slurm's --signal)
    # requeued after a lost node (the default); False: the job fails instead (--no-requeue)
    requeue: bool = True
    # the secrets its tasks get (references only; values are opened at launch)
    secrets: tuple[SecretRef, ...] = ()
    # Slurm's allocation shape: every worker on its own node (--nodes); the tasks that share
    # one worker's resources (--ntasks-per-node); nodes the job must include (-w) or must not
    # use (-x); a node feature expression (-C); whole nodes (--exclusive); all of each node's
    # memory (--mem=0); the site's GPU type name (--gres=gpu:TYPE:N), matched on the nodes'
    # gres_type, not on the catalog
    distinct_nodes: bool = False
    tasks_per_worker: int = 1
    nodelist: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    constraint: str = ""
    exclusive: bool = False
    whole_node_memory: bool = False
    gres_type: str = ""
    # what each of its GPUs must have beside compute (model/engines.py): an engine name
    # (nvenc, nvdec, nvjpg) and how many at least, or a capability (graphics, display, fp64)
    gpu_engines: tuple[tuple[str, int], ...] = ()
    container: ContainerSpec | None = None  # the image its tasks run in (model/container.py)
    # the advance reservation it runs in (Slurm's --reservation): only on its nodes, only while
    # it is active (model/reservation.py); "": none (it keeps off every reservation's nodes)
    reservation: str = ""
    # what it gets before a preemption stops it (model/notice.py); None: its warning signal
    # stands in, as Slurm's send_user_signal sends it (``preempt_notice``)
    checkpoint: CheckpointNotice | None = None
    # not preempted before it has run this long (Kueue KEP-9876's minAdmitDuration, per job)
    min_runtime_s: float = 0.0
    # asks its queue's idle-GPU policy to spare it this much longer idle (model/idle.py; capped
    # by the queue's exempt_max)
    idle_exempt_s: float = 0.0
    # Slurm's sbatch --kill-on-invalid-dep=yes|no: a dependency of its that can never be met
    # cancels it at once (True) or leaves it waiting (False); None: the controller's
    # --kill-invalid-depend decides (ADR 0072)
    kill_invalid_dep: bool | None = None
    # Slurm's sbatch -H/--hold: submitted held (a user hold), pending until released; the
    # hold itself is the job's (``Job.held``), which ``scontrol release`` clears (ADR 0074)
    hold: bool = False
    # Slurm's sbatch --begin: not started before this time (seconds since the epoch; 0: none),
    # pending with Reason BeginTime until then
    begin_time: float = 0.0

    @property
    def preempt_notice(self) -> CheckpointNotice | None:
        """The signal and grace a preemption gives: ``checkpoint``, else the warning signal
        (Slurm's ``--signal=[B:]SIG@T``: SIG now, T seconds to checkpoint), else none."""
        if self.checkpoint is not None:
            return self.checkpoint
        w = self.signal
        return None if w is None else CheckpointNotice(w.number, w.before_s, w.batch_only)

    @property
    def tasks(self) -> int:
        return self.workers * self.tasks_per_worker

    @property
    def selects_nodes(self) -> bool:
        """Whether anything beyond resources decides which nodes may take a worker."""
        return bool(
            self.distinct_nodes
            or self.nodelist
            or self.exclude
            or self.constraint
            or self.exclusive
            or self.whole_node_memory
            or self.gres_type
            or self.gpu_engines
            or self.container is not None
        )

    # Slurm's batch job: the command (the script) runs on rank 0 alone, every other rank runs
    # the step daemon; the job's outcome is the script's (see core/jobmaster.py)
    batch: bool = False
    workdir: str = ""  # where the tasks start (absolute); "": the job user's home
    output: str = ""  # the batch script's stdout file (sbatch's --output pattern)
    error: str = ""  # its stderr file; "": with the output
    open_mode: str = "truncate"  # of those files on the first attempt (later ones append)
    input: str = ""  # the batch script's stdin file (sbatch's --input); "": /dev/null
    # the submitter's environment, captured at submit (sbatch's --export); never shown
    submit_env: tuple[tuple[str, str], ...] = ()
    # Slurm's partition list (sbatch -p a,b): every queue the job may start in, in the order
    # given; () is just ``queue``. A job with several starts as the job of the first of them
    # that admits it now without borrowing and has room on its nodes, else of the first that
    # admits it by borrowing and has room (scheduler/cycle.py, ADR 0073); ``queue`` is the
    # one it runs (or last ran) in: at submit, the first of them
    # unless given. Until it starts (and again after a requeue), the order plugins order it
    # as a job of ``queue`` (its fair share), where Slurm considers higher-priority partitions
    # first.
    queues: tuple[str, ...] = ()

    @property
    def partitions(self) -> tuple[str, ...]:
        """Slurm's job partition string, as a tuple: the queues the job may use, the one it
        runs (or last ran) in first (``a,b`` while pending, ``b,a`` once started in b; Slurm's
        squeue then shows ``b`` alone: io/slurm_style.partitions)."""
        if not self.queues:
            return (self.queue,)
        return (self.queue, *(q for q in self.queues if q != self.queue))

    @property
    def worker_resources(self) -> Resources:
        return Resources(self.gpus_per_worker * self.gpu_milli, self.cpu_milli, self.memory_mib)

    @property
    def total_resources(self) -> Resources:
        w = self.worker_resources
        n = self.workers
        return Resources(w.gpu_milli * n, w.cpu_milli * n, w.memory_mib * n)

    @property
    def total_gpu_milli(self) -> int:
        return self.workers * self.gpus_per_worker * self.gpu_milli

    @property
    def fractional(self) -> bool:
        return self.gpu_milli < MILLI

    def describe(self) -> str:
        g = (
            f"{self.gpu_milli / MILLI:g} GPU"
            if self.fractional
            else f"{self.gpus_per_worker} GPU{'s' if self.gpus_per_worker != 1 else ''}"
        )
        return f"{self.workers} × {g}" if self.workers > 1 else g

    @staticmethod
    def from_dict(data: Any, *, source: str = "request", path: str = "") -> JobSpec:
        """A spec from a request's (or a file's) mapping; a SpecError (SpecErrors: every
        problem at once) names each field at fault
        (``model/jobspec_read.py``, each group of fields in its step)."""
        spec, problems = JobSpec.read_all(data, source=source, path=path)
        if problems:
            raise every(problems)
        assert spec is not None
        return spec

    @staticmethod
    def read_all(
        data: Any, *, source: str = "request", path: str = ""
    ) -> tuple[JobSpec | None, list[SpecError]]:
        """(the spec of ``data`` without its faulty fields, or None; every problem at once,
        each naming its field: ``model/every.py``)."""
        from gpufleet.model.every import every_problem
        from gpufleet.model.jobspec_read import read_spec  # it builds this class

        return every_problem(
            lambda d: read_spec(d, source=source, path=path),
            data,
            path=path,
            placeholders={"name": "job", "user": "user"},
        )


class JobState(StrEnum):
    PENDING = "PENDING"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMED_OUT = "TIMED_OUT"
    PREEMPTED = "PREEMPTED"
    NODE_LOST = "NODE_LOST"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


TERMINAL = frozenset({JobState.SUCCEEDED, JobState.CANCELLED, JobState.TIMED_OUT})
# FAILED is terminal only when no retry remains; the JobMaster decides (see Job.fail).

_S = JobState
TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    _S.PENDING: frozenset({_S.STARTING, _S.CANCELLED}),
    _S.STARTING: frozenset(
        {_S.RUNNING, _S.FAILED, _S.CANCELLED, _S.PREEMPTED, _S.NODE_LOST, _S.TIMED_OUT}
    ),
    _S.RUNNING: frozenset(
        {_S.SUCCEEDED, _S.FAILED, _S.CANCELLED, _S.TIMED_OUT, _S.PREEMPTED, _S.NODE_LOST}
    ),
    _S.FAILED: frozenset({_S.PENDING}),
    _S.PREEMPTED: frozenset({_S.PENDING, _S.CANCELLED}),
    _S.NODE_LOST: frozenset({_S.PENDING, _S.CANCELLED}),
    _S.SUCCEEDED: frozenset(),
    _S.CANCELLED: frozenset(),
    _S.TIMED_OUT: frozenset(),
}


class InvalidTransition(ValueError):
    pass


@dataclass(slots=True)
class Job:
    """A job's mutable life: its state, its numbered attempts and what it has used."""

    id: str
    spec: JobSpec
    submit_time: float
    state: JobState = JobState.PENDING
    attempt: int = 0  # number of the current (or last) attempt; 0 = never started
    retries_used: int = 0
    start_time: float | None = None  # of the current attempt
    end_time: float | None = None
    eligible_time: float = 0.0  # not before (retry back-off)
    attained_gpu_s: float = 0.0  # GPU-seconds of service so far (LAS)
    history: list[tuple[float, JobState, str]] = field(default_factory=list)
    ended: JobEnd | None = None  # how it ended, once it has (model/job_end.py)
    # held: "user" (sbatch -H, scontrol uhold) or "admin" (an admin's scontrol hold); "" not
    # held. A held job is never started while pending (ADR 0074)
    held: str = ""

    def to(self, state: JobState, now: float, why: str = "") -> None:
        if state not in TRANSITIONS[self.state]:
            raise InvalidTransition(
                f"job {self.id}: {self.state.value} → {state.value} is not allowed"
            )
        self.state = state
        self.history.append((now, state, why))

    def limit_reached(self, now: float) -> bool:
        """Whether the attempt has run its time limit by ``now``: the timer set at its start
        may outlive a limit raised since (scontrol update, ADR 0076); that timer's time is
        start + limit, so reaching it counts."""
        limit = self.spec.time_limit_s
        return limit is not None and (self.start_time or 0.0) + limit <= now

    @property
    def finished(self) -> bool:
        return self.state in TERMINAL or (
            self.state is JobState.FAILED and self.retries_used >= self.spec.max_retries
        )
