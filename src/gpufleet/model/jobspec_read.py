"""How ``JobSpec.from_dict`` reads a spec: each group of fields (queues, GPUs, memory, the
allocation terms, topology, the warning signal, the command and environment, the batch script's
files) in its own step, in the order the request's keys are checked, every step refusing with a
SpecError that names the field."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from gpufleet.model import catalog, hostlist
from gpufleet.model.constraint import parse as parse_constraint
from gpufleet.model.container import read_container
from gpufleet.model.job import (
    OPEN_MODES,
    SPEC_TEXT,
    JobSpec,
    Topology,
    TopologyLevel,
    WarningSignal,
)
from gpufleet.model.limits import (
    MAX_NODE_NAMES,
    MAX_QUEUES,
    SIGNAL_BEFORE_S,
    SIGNALS,
    SPEC_BOUNDS,
)
from gpufleet.model.notice import CheckpointNotice
from gpufleet.model.resources import MILLI
from gpufleet.model.secrets import read_secrets
from gpufleet.model.validate import (
    MAX_COMMAND,
    MAX_ENV,
    MAX_ITEMS,
    MAX_NAME,
    Fields,
    did_you_mean,
)


def _ints(key: str) -> dict[str, int]:
    lo, hi = SPEC_BOUNDS[key]
    assert isinstance(lo, int) and isinstance(hi, int)
    return {"minimum": lo, "maximum": hi}


def _floats(key: str) -> dict[str, float]:
    lo, hi = SPEC_BOUNDS[key]
    return {"minimum": lo, "maximum": hi}


def read_spec(data: Any, *, source: str = "request", path: str = "") -> JobSpec:
    f = Fields(data, source=source, path=path)
    # text others' terminals print (squeue, sacct, scontrol): one line, no control character
    name = f.text("name", required=True, max_len=SPEC_TEXT["name"], line=True)
    user = f.text("user", required=True, max_len=SPEC_TEXT["user"], line=True)
    queue, queues = _read_queue(f)
    size = _read_size(f)
    models = tuple(
        catalog.lookup(m, source=source, field=f.field("gpu_models")).name
        for m in f.names("gpu_models")
    )
    limit = f.number("time_limit_s", 0.0, **_floats("time_limit_s")) or None
    priority = f.integer("priority", 0, **_ints("priority"))
    preemptible = f.flag("preemptible", True)
    topology = _read_topology(f)
    dataset = f.text("dataset", "", max_len=SPEC_TEXT["dataset"], line=True)
    retries = f.integer("max_retries", 0, **_ints("max_retries"))
    if size.gpus == 0 and models:
        raise f.error("gpu_models", "a CPU-only job (gpus_per_worker: 0) cannot ask for GPU models")
    command = _read_command(f)
    env = _read_env(f)
    warning = _read_signal(f)
    checkpoint = _read_checkpoint(f)
    min_runtime = f.number("min_runtime_s", 0.0, **_floats("min_runtime_s"))
    idle_exempt = f.number("idle_exempt_s", 0.0, **_floats("idle_exempt_s"))
    requeue = f.flag("requeue", True)
    slurm = _read_slurm_terms(f)
    secrets = read_secrets(f, {k for k, _ in env})
    alloc = _read_allocation(f, size.workers, size.gpus)
    one_per_node = alloc.get("distinct_nodes") or alloc.get("exclusive")
    if one_per_node and size.workers > 1 and topology == Topology(TopologyLevel.NODE, True):
        raise f.error(
            "topology",
            "one worker per node (distinct_nodes or exclusive) cannot keep "
            f"{size.workers} workers under one node",
        )
    batch, workdir, output, error, open_mode, stdin = _read_batch(f)
    submit_env = _read_env(f, "submit_env")
    container = read_container(f)
    f.finish()
    spec = JobSpec(
        name,
        user,
        queue,
        size.workers,
        size.gpus,
        size.milli,
        round(size.cpus * MILLI),
        size.memory_mib,
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
        checkpoint=checkpoint,
        min_runtime_s=min_runtime,
        idle_exempt_s=idle_exempt,
        **slurm,
    )
    return replace(spec, **alloc) if alloc else spec


def _read_slurm_terms(f: Fields) -> dict[str, Any]:
    """sbatch's --kill-on-invalid-dep, -H and --begin, as the spec's fields."""
    kill = None if f.raw("kill_invalid_dep") is None else f.flag("kill_invalid_dep", False)
    return {
        "kill_invalid_dep": kill,
        "hold": f.flag("hold", False),
        "begin_time": f.number("begin_time", 0.0, **_floats("begin_time")),
    }


def _read_queue(f: Fields) -> tuple[str, tuple[str, ...]]:
    """``queue`` and ``queues``: the queue, and the others it may run in (none when one)."""
    queues = _read_queues(f)
    if f.has("queue"):
        queue = f.text("queue", "default", max_len=SPEC_TEXT["queue"], line=True)
        if queues and queue not in queues:
            raise f.error("queue", f"{queue!r} is not one of queues ({', '.join(queues)})")
    else:
        f.raw("queue")  # null: not given
        queue = queues[0] if queues else "default"
    if len(queues) == 1:
        queues = ()  # one queue is just ``queue``
    return queue, queues


@dataclass(frozen=True)
class _Size:
    workers: int
    gpus: int
    milli: int
    cpus: float
    memory_mib: int


def _read_size(f: Fields) -> _Size:
    """Workers, and each one's GPUs (or GPU share), CPUs and memory."""
    workers = f.integer("workers", 1, **_ints("workers"))
    gpus = f.integer("gpus_per_worker", 1, **_ints("gpus_per_worker"))
    milli = f.integer("gpu_milli", MILLI, **_ints("gpu_milli"))
    if milli < MILLI and gpus != 1:
        raise f.error("gpu_milli", f"a GPU share below 1000 needs gpus_per_worker: 1, got {gpus}")
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
    return _Size(workers, gpus, milli, cpus, mem)


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
        name = f.checked(f"queues[{i}]", x, SPEC_TEXT["queues"], line=True).strip()
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
            f.checked(key, x, SPEC_TEXT[key], line=True)
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
        text = f.text("constraint", max_len=SPEC_TEXT["constraint"], line=True)
        try:
            out["constraint"] = parse_constraint(text).text()
        except ValueError as e:
            problems.append(("constraint", str(e)))
    if f.flag("exclusive", False):
        out["exclusive"] = True
    if f.flag("whole_node_memory", False):
        out["whole_node_memory"] = True
    gres_type = f.text("gres_type", "", max_len=SPEC_TEXT["gres_type"], line=True).strip().lower()
    if gres_type:
        if gpus == 0:
            problems.append(("gres_type", "a CPU-only job cannot ask for a GPU type"))
        out["gres_type"] = gres_type
    engines = _read_engines(f, gpus, problems)
    if engines:
        out["gpu_engines"] = engines
    reservation = f.text("reservation", "", max_len=SPEC_TEXT["reservation"], line=True).strip()
    if reservation:
        out["reservation"] = reservation
    if problems:
        key, message = problems[0]
        if len(problems) > 1:
            message += "".join(f"; {f.field(k)}: {m}" for k, m in problems[1:])
        raise f.error(key, message)
    return out


def _read_engines(
    f: Fields, gpus: int, problems: list[tuple[str, str]]
) -> tuple[tuple[str, int], ...]:
    """``gpu_engines: {nvenc: 1, graphics: 1}``: what each GPU must have (model/engines.py)."""
    from gpufleet.model.engines import CAPABILITIES, ENGINES
    from gpufleet.model.validate import did_you_mean

    raw = f.raw("gpu_engines")
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        problems.append(("gpu_engines", "must be a mapping of engine to count, e.g. {nvenc: 1}"))
        return ()
    out: list[tuple[str, int]] = []
    for name, n in raw.items():
        key = str(name).strip().lower()
        if key not in CAPABILITIES:
            hint = did_you_mean(key, list(CAPABILITIES))
            problems.append(
                ("gpu_engines", f"unknown engine {name!r}{hint} (known: {', '.join(CAPABILITIES)})")
            )
        elif isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 64:
            problems.append(("gpu_engines", f"{key}: a count from 1 to 64, got {n!r}"))
        elif key not in ENGINES and n != 1:
            problems.append(("gpu_engines", f"{key} is a capability, not counted: give 1"))
        else:
            out.append((key, n))
    if out and gpus == 0:
        problems.append(("gpu_engines", "a CPU-only job cannot ask for GPU engines"))
    return tuple(sorted(dict(out).items()))


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
        levels = [x.value for x in TopologyLevel]
        raise t.error(
            "level",
            f"must be one of {', '.join(levels)}; got {level_s!r}{did_you_mean(level_s, levels)}",
        ) from None
    required = t.flag("required", False)
    t.finish()
    return Topology(level, required)


def parse_signal(text: str) -> WarningSignal:
    """``[B:]SIG[@T]`` as Slurm's --signal reads it (SIG a name or a number; T 60 s when not
    given). ValueError says what is wrong. Slurm's ``R:`` (at the end of a reservation) has no
    meaning in gpufleet (which does not signal a job when its reservation ends) and is
    refused."""
    s = text.strip()
    batch = s[:2].upper() == "B:"
    if batch:
        s = s[2:]
    if s[:2].upper() in ("R:", "RB") or s[:3].upper() == "BR:":
        raise ValueError(
            "R: (at the end of a reservation) is not supported: gpufleet does not signal a job "
            "when its reservation ends"
        )
    sig, at, when = s.partition("@")
    number = signal_number(sig)
    before = SIGNAL_BEFORE_S
    if at:
        lo, hi = SPEC_BOUNDS["signal.before_s"]
        if not (when.isascii() and when.isdigit()) or not lo <= int(when) <= hi:
            raise ValueError(f"@{when}: the time before the limit must be {lo} to {hi} seconds")
        before = int(when)
    return WarningSignal(number, before, batch)


def signal_number(sig: str | int) -> int:
    """A signal by name (USR1, SIGUSR1, any case) or number, as its number; ValueError if none."""
    lo, hi = SPEC_BOUNDS["signal.signal"]
    if isinstance(sig, str):
        s = sig.strip()
        if not (s.isascii() and s.isdigit()):
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


def _read_checkpoint(f: Fields) -> CheckpointNotice | None:
    """``checkpoint``: ``{signal, grace_s, batch_only}``, or Slurm's ``[B:]SIG[@T]`` (T the
    grace, 60 s when not given)."""
    raw = f.raw("checkpoint")
    if raw is None:
        return None
    if isinstance(raw, str):
        try:
            w = parse_signal(f.checked("checkpoint", raw, MAX_NAME))
        except ValueError as e:
            raise f.error("checkpoint", f"expected [B:]SIG[@SECONDS]: {e}") from None
        return CheckpointNotice(w.number, w.before_s, w.batch_only)
    c = Fields(raw, source=f.source, path=f.field("checkpoint"))
    sig = c.raw("signal")  # checked last: a field left out for its problem leaves the rest
    grace = c.integer("grace_s", SIGNAL_BEFORE_S, **_ints("checkpoint.grace_s"))
    batch = c.flag("batch_only", False)
    c.finish()
    if sig is None:
        raise f.error("checkpoint", "needs its signal (the one a preemption sends first: USR1)")
    if isinstance(sig, bool) or not isinstance(sig, str | int):
        raise c.error("signal", f"must be a signal's name or number, got {sig!r}")
    try:
        number = signal_number(c.checked("signal", sig, MAX_NAME) if isinstance(sig, str) else sig)
    except ValueError as e:
        raise c.error("signal", str(e)) from None
    return CheckpointNotice(number, grace, batch)


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
    workdir = f.text("workdir", "", max_len=SPEC_TEXT["workdir"], line=True)
    if workdir and not workdir.startswith("/"):
        raise f.error("workdir", f"must be an absolute path, got {workdir!r}")
    output = f.text("output", "", max_len=SPEC_TEXT["output"], line=True)
    error = f.text("error", "", max_len=SPEC_TEXT["error"], line=True)
    stdin = f.text("input", "", max_len=SPEC_TEXT["input"], line=True)
    open_mode = f.text("open_mode", "truncate", max_len=MAX_NAME)
    if open_mode not in OPEN_MODES:
        raise f.error(
            "open_mode",
            f"must be one of {', '.join(OPEN_MODES)}; got {open_mode!r}"
            + did_you_mean(open_mode, OPEN_MODES),
        )
    for key, given in (
        ("output", output),
        ("error", error),
        ("input", stdin),
        ("open_mode", open_mode != "truncate"),
    ):
        if given and not batch:
            raise f.error(key, "is the batch script's file; it needs batch: true")
    return batch, workdir, output, error, open_mode, stdin
