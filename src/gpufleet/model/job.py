"""What a user asks for (JobSpec) and the job's life (JobState, transitions, attempts)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from gpufleet.model import catalog, hostlist
from gpufleet.model.constraint import parse as parse_constraint
from gpufleet.model.container import ContainerSpec, read_container
from gpufleet.model.limits import (  # kept apart for io/sbatch/; imported from here too
    MAX_NODE_NAMES,
    MAX_QUEUES,
    SIGNAL_BEFORE_S,
    SIGNALS,
    SPEC_BOUNDS,
)
from gpufleet.model.resources import MILLI, Resources
from gpufleet.model.secrets import SecretRef, read_secrets
from gpufleet.model.validate import (
    MAX_ARG,
    MAX_COMMAND,
    MAX_ENV,
    MAX_ENV_VALUE,
    MAX_ITEMS,
    MAX_NAME,
    MAX_TEXT,
    Fields,
)

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
    "nodelist": MAX_TEXT,  # each entry, a name or a hostlist before expansion
    "exclude": MAX_TEXT,
    "submit_env": MAX_ENV_VALUE,  # each value of the captured environment
    "workdir": MAX_TEXT,
    "output": MAX_TEXT,
    "error": MAX_TEXT,
    "input": MAX_TEXT,
}
OPEN_MODES = ("truncate", "append")  # sbatch's --open-mode


def _ints(key: str) -> dict[str, int]:
    lo, hi = SPEC_BOUNDS[key]
    assert isinstance(lo, int) and isinstance(hi, int)
    return {"minimum": lo, "maximum": hi}


def _floats(key: str) -> dict[str, float]:
    lo, hi = SPEC_BOUNDS[key]
    return {"minimum": lo, "maximum": hi}


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
    container: ContainerSpec | None = None  # the image its tasks run in (model/container.py)

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
    # given; () is just ``queue``. A job with several starts in the first of them that admits
    # it now without borrowing, else the first that admits it by borrowing (scheduler/cycle.py
    # step 2); ``queue`` is the one it runs (or last ran) in: at submit, the first of them
    # unless given. Until it starts (and again after a requeue), the order plugins order it
    # as a job of ``queue`` (its fair share), where Slurm considers higher-priority partitions
    # first.
    queues: tuple[str, ...] = ()

    @property
    def partitions(self) -> tuple[str, ...]:
        """Slurm's job partition string, as a tuple: the queues the job may use, the one it
        runs (or last ran) in first (``a,b`` while pending, ``b,a`` once started in b)."""
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
        f = Fields(data, source=source, path=path)
        name = f.text("name", required=True, max_len=SPEC_TEXT["name"])
        user = f.text("user", required=True, max_len=SPEC_TEXT["user"])
        queues = _read_queues(f)
        if f.has("queue"):
            queue = f.text("queue", "default", max_len=SPEC_TEXT["queue"])
            if queues and queue not in queues:
                raise f.error("queue", f"{queue!r} is not one of queues ({', '.join(queues)})")
        else:
            f.raw("queue")  # null: not given
            queue = queues[0] if queues else "default"
        if len(queues) == 1:
            queues = ()  # one queue is just ``queue``
        workers = f.integer("workers", 1, **_ints("workers"))
        gpus = f.integer("gpus_per_worker", 1, **_ints("gpus_per_worker"))
        milli = f.integer("gpu_milli", MILLI, **_ints("gpu_milli"))
        if milli < MILLI and gpus != 1:
            raise f.error(
                "gpu_milli", f"a GPU share below 1000 needs gpus_per_worker: 1, got {gpus}"
            )
        if gpus == 0:
            milli = MILLI
        cpus = f.number("cpus", 1.0, **_floats("cpus"))
        if f.has("memory_mib"):
            if f.has("memory_gib"):
                raise f.error("memory_gib", "give memory_mib or memory_gib, not both")
            f.raw("memory_gib")  # null: not given
            mem = f.integer("memory_mib", **_ints("memory_mib"))
        else:
            f.raw("memory_mib")  # null: not given, as for every other key
            mem = round(f.number("memory_gib", 4.0, **_floats("memory_gib")) * 1024)
        models = tuple(
            catalog.lookup(m, source=source, field=f.field("gpu_models")).name
            for m in f.names("gpu_models")
        )
        limit = f.number("time_limit_s", 0.0, **_floats("time_limit_s")) or None
        priority = f.integer("priority", 0, **_ints("priority"))
        preemptible = f.flag("preemptible", True)
        topology = _read_topology(f)
        dataset = f.text("dataset", "", max_len=SPEC_TEXT["dataset"])
        retries = f.integer("max_retries", 0, **_ints("max_retries"))
        if gpus == 0 and models:
            raise f.error(
                "gpu_models", "a CPU-only job (gpus_per_worker: 0) cannot ask for GPU models"
            )
        command = _read_command(f)
        env = _read_env(f)
        warning = _read_signal(f)
        requeue = f.flag("requeue", True)
        secrets = read_secrets(f, {k for k, _ in env})
        alloc = _read_allocation(f, workers, gpus)
        one_per_node = alloc.get("distinct_nodes") or alloc.get("exclusive")
        if one_per_node and workers > 1 and topology == Topology(TopologyLevel.NODE, True):
            raise f.error(
                "topology",
                "one worker per node (distinct_nodes or exclusive) cannot keep "
                f"{workers} workers under one node",
            )
        batch, workdir, output, error, open_mode, stdin = _read_batch(f)
        submit_env = _read_env(f, "submit_env")
        container = read_container(f)
        f.finish()
        spec = JobSpec(
            name,
            user,
            queue,
            workers,
            gpus,
            milli,
            round(cpus * MILLI),
            mem,
            models,
            limit,
            priority,
            preemptible,
            topology,
            dataset,
            retries,
            command,
            env,
            warning,
            requeue,
            secrets,
            batch=batch,
            workdir=workdir,
            output=output,
            error=error,
            open_mode=open_mode,
            input=stdin,
            submit_env=submit_env,
            container=container,
            queues=queues,
        )
        return replace(spec, **alloc) if alloc else spec


def _read_queues(f: Fields) -> tuple[str, ...]:
    """``queues``: a list of queue names or one comma-separated string (Slurm's ``-p a,b``);
    each a name as ``queue`` is, at most ``MAX_QUEUES``, none twice; every problem at once."""
    raw = f.raw("queues")
    if raw is None:
        return ()
    items = raw.split(",") if isinstance(raw, str) else raw
    if not isinstance(items, list) or not all(isinstance(x, str) for x in items):
        raise f.error("queues", "must be a list of queue names or one comma-separated string")
    problems: list[str] = []
    if len(items) > MAX_QUEUES:
        raise f.error("queues", f"must name at most {MAX_QUEUES} queues, got {len(items)}")
    names: list[str] = []
    for i, x in enumerate(items):
        name = f.checked(f"queues[{i}]", x, SPEC_TEXT["queues"]).strip()
        if not name:
            problems.append(f"queues[{i}] is empty")
        elif "," in name:
            problems.append(f"queues[{i}] {name!r} holds a comma (give one name per item)")
        elif name in names:
            problems.append(f"{name!r} is named twice")
        else:
            names.append(name)
    if problems:
        raise f.error("queues", "; ".join(problems))
    if not names:
        raise f.error("queues", "names no queue")
    return tuple(names)


def _read_allocation(f: Fields, workers: int, gpus: int) -> dict[str, Any]:
    """The allocation fields (only those given), every problem at once."""
    out: dict[str, Any] = {}
    problems: list[tuple[str, str]] = []
    distinct = f.flag("distinct_nodes", False)
    if distinct:
        out["distinct_nodes"] = True
    tasks = f.integer("tasks_per_worker", 1, **_ints("tasks_per_worker"))
    if tasks != 1:
        out["tasks_per_worker"] = tasks
    for key in ("nodelist", "exclude"):
        raw = f.raw(key)
        if raw is None:
            continue
        items = [raw] if isinstance(raw, str) else raw
        if not isinstance(items, list) or not all(isinstance(x, str) for x in items):
            problems.append((key, "must be a hostlist string or a list of them"))
            continue
        names: list[str] = []
        for x in items:
            f.checked(key, x, SPEC_TEXT[key])
            try:
                names += hostlist.expand(x, max_hosts=MAX_NODE_NAMES - len(names))
            except ValueError as e:
                problems.append((key, str(e)))
        names = list(dict.fromkeys(n for n in names if n))
        if names:
            out[key] = tuple(names)
    listed = out.get("nodelist", ())
    if listed and len(listed) > workers:
        problems.append(
            (
                "nodelist",
                f"names {len(listed)} nodes but the job has {workers} worker(s); each "
                "listed node must get one",
            )
        )
    both = set(listed) & set(out.get("exclude", ()))
    if both:
        problems.append(("exclude", f"excludes {', '.join(sorted(both))}, which nodelist requires"))
    f.raw("constraint")  # null: not given
    if f.has("constraint"):
        text = f.text("constraint", max_len=SPEC_TEXT["constraint"])
        try:
            out["constraint"] = parse_constraint(text).text()
        except ValueError as e:
            problems.append(("constraint", str(e)))
    if f.flag("exclusive", False):
        out["exclusive"] = True
    if f.flag("whole_node_memory", False):
        out["whole_node_memory"] = True
    gres_type = f.text("gres_type", "", max_len=SPEC_TEXT["gres_type"]).strip().lower()
    if gres_type:
        if gpus == 0:
            problems.append(("gres_type", "a CPU-only job cannot ask for a GPU type"))
        out["gres_type"] = gres_type
    if problems:
        key, message = problems[0]
        if len(problems) > 1:
            message += "".join(f"; {f.field(k)}: {m}" for k, m in problems[1:])
        raise f.error(key, message)
    return out


def _read_topology(f: Fields) -> Topology:
    raw = f.raw("topology")
    if raw is None:
        return Topology()
    if isinstance(raw, str):
        raw = {"level": raw}
    t = Fields(raw, source=f.source, path=f.field("topology"))
    level_s = t.text("level", "any")
    try:
        level = TopologyLevel(level_s)
    except ValueError:
        raise t.error("level", f"must be one of node, leaf, pod, any; got {level_s!r}") from None
    required = t.flag("required", False)
    t.finish()
    return Topology(level, required)


def parse_signal(text: str) -> WarningSignal:
    """``[B:]SIG[@T]`` as Slurm's --signal reads it (SIG a name or a number; T 60 s when not
    given). ValueError says what is wrong. Slurm's ``R:`` (at the end of a reservation) has no
    meaning in gpufleet, which has no reservations, and is refused."""
    s = text.strip()
    batch = s[:2].upper() == "B:"
    if batch:
        s = s[2:]
    if s[:2].upper() in ("R:", "RB") or s[:3].upper() == "BR:":
        raise ValueError("R: (at the end of a reservation) is not supported: gpufleet has none")
    sig, at, when = s.partition("@")
    number = signal_number(sig)
    before = SIGNAL_BEFORE_S
    if at:
        lo, hi = SPEC_BOUNDS["signal.before_s"]
        if not when.isdigit() or not lo <= int(when) <= hi:
            raise ValueError(f"@{when}: the time before the limit must be {lo} to {hi} seconds")
        before = int(when)
    return WarningSignal(number, before, batch)


def signal_number(sig: str | int) -> int:
    """A signal by name (USR1, SIGUSR1, any case) or number, as its number; ValueError if none."""
    lo, hi = SPEC_BOUNDS["signal.signal"]
    if isinstance(sig, str):
        s = sig.strip()
        if not s.isdigit():
            name = s.upper().removeprefix("SIG")
            if name not in SIGNALS:
                raise ValueError(f"{sig!r} is not a signal (a name such as USR1, or {lo} to {hi})")
            return SIGNALS[name]
        sig = int(s)
    if not lo <= sig <= hi:
        raise ValueError(f"a signal number must be {lo} to {hi}, got {sig}")
    return sig


def _read_signal(f: Fields) -> WarningSignal | None:
    raw = f.raw("signal")
    if raw is None:
        return None
    if isinstance(raw, str):
        try:
            return parse_signal(f.checked("signal", raw, MAX_NAME))
        except ValueError as e:
            raise f.error("signal", f"expected [B:]SIG[@SECONDS]: {e}") from None
    s = Fields(raw, source=f.source, path=f.field("signal"))
    sig = s.raw("signal")
    if sig is None:
        raise s.error("signal", "is required")
    if isinstance(sig, bool) or not isinstance(sig, str | int):
        raise s.error("signal", f"must be a signal's name or number, got {sig!r}")
    try:
        number = signal_number(s.checked("signal", sig, MAX_NAME) if isinstance(sig, str) else sig)
    except ValueError as e:
        raise s.error("signal", str(e)) from None
    lo, hi = SPEC_BOUNDS["signal.before_s"]
    before = s.integer("before_s", SIGNAL_BEFORE_S, minimum=int(lo), maximum=int(hi))
    batch = s.flag("batch_only", False)
    s.finish()
    return WarningSignal(number, before, batch)


def _read_command(f: Fields) -> tuple[str, ...]:
    if not f.has("command"):
        f.items("command")
        return ()
    raw = f.data["command"]
    if isinstance(raw, str):
        return ("/bin/sh", "-c", f.text("command", max_len=SPEC_TEXT["command"]))
    items = f.items("command")
    if not all(isinstance(x, str) for x in items) or not items:
        raise f.error("command", "must be a string or a non-empty list of strings")
    if len(items) > MAX_ITEMS:
        raise f.error("command", f"must have at most {MAX_ITEMS} arguments, got {len(items)}")
    for i, x in enumerate(items):
        f.checked(f"command[{i}]", x, SPEC_TEXT["command"])
    if sum(len(x) for x in items) > MAX_COMMAND:
        raise f.error("command", f"must be at most {MAX_COMMAND} characters in all")
    return tuple(items)


def _read_env(f: Fields, key: str = "env") -> tuple[tuple[str, str], ...]:
    env = f.labels(key, max_key=MAX_NAME, max_value=SPEC_TEXT[key])
    for k in env:
        # execve takes "KEY=VALUE": a key with '=' (or none at all) would set another variable
        if not k or "=" in k:
            raise f.error(
                f"{key}.{k}", "an environment variable name must be non-empty, without '='"
            )
    if sum(len(k) + len(v) for k, v in env.items()) > MAX_ENV:
        raise f.error(key, f"must be at most {MAX_ENV} characters in all")
    return tuple(sorted(env.items()))


def _read_batch(f: Fields) -> tuple[bool, str, str, str, str, str]:
    """``batch``, ``workdir`` and the batch script's files (``output``, ``error``,
    ``open_mode``), which only a batch job has: a plain job's every rank logs to gpufleet."""
    batch = f.flag("batch", False)
    workdir = f.text("workdir", "", max_len=SPEC_TEXT["workdir"])
    if workdir and not workdir.startswith("/"):
        raise f.error("workdir", f"must be an absolute path, got {workdir!r}")
    output = f.text("output", "", max_len=SPEC_TEXT["output"])
    error = f.text("error", "", max_len=SPEC_TEXT["error"])
    stdin = f.text("input", "", max_len=SPEC_TEXT["input"])
    open_mode = f.text("open_mode", "truncate", max_len=MAX_NAME)
    if open_mode not in OPEN_MODES:
        raise f.error("open_mode", f"must be one of {', '.join(OPEN_MODES)}; got {open_mode!r}")
    for key, given in (
        ("output", output),
        ("error", error),
        ("input", stdin),
        ("open_mode", open_mode != "truncate"),
    ):
        if given and not batch:
            raise f.error(key, "is the batch script's file; it needs batch: true")
    return batch, workdir, output, error, open_mode, stdin


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

    def to(self, state: JobState, now: float, why: str = "") -> None:
        if state not in TRANSITIONS[self.state]:
            raise InvalidTransition(
                f"job {self.id}: {self.state.value} → {state.value} is not allowed"
            )
        self.state = state
        self.history.append((now, state, why))

    @property
    def finished(self) -> bool:
        return self.state in TERMINAL or (
            self.state is JobState.FAILED and self.retries_used >= self.spec.max_retries
        )
