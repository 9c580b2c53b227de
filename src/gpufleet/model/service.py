"""What a user asks for when a job is a service (``kind: service``): ServiceSpec.

A service keeps ``replicas`` copies of one replica template (a JobSpec of one worker) alive,
restarts them with back-off, routes traffic only to the ready ones, replaces them by a rolling
update and may scale them on the measured request rate. The anchors, whose names and defaults
are kept where they exist:

- probes: Kubernetes' (``initialDelaySeconds`` 0, ``periodSeconds`` 10, ``timeoutSeconds`` 1,
  ``failureThreshold`` 3, ``successThreshold`` 1, which a liveness probe must keep at 1);
- rollout: a Deployment's ``maxSurge``/``maxUnavailable`` (25 % each; a percentage of the
  desired count, the surge rounded up, the unavailable rounded down; both 0 is refused) and its
  ``progressDeadlineSeconds`` (600);
- restart back-off: the kubelet's CrashLoopBackOff (10 s doubling to 300 s, reset once a
  replica has run fine for 10 minutes);
- autoscaling: SkyServe's ``target_qps_per_replica`` between ``min`` and ``max`` replicas, with
  Ray Serve's ``upscale_delay_s`` (30) and ``downscale_delay_s`` (600).

``from_dict`` reports every problem at once, each with its path (``readiness.http.path``);
``to_dict`` gives back a dict that ``from_dict`` reads to the same spec.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from gpufleet.model.container import ContainerSpec
from gpufleet.model.errors import SpecError
from gpufleet.model.job import JobSpec
from gpufleet.model.secrets import SecretRef
from gpufleet.model.validate import MAX_ARG, MAX_COMMAND, MAX_ITEMS, MAX_TEXT, Fields

# the gateway's rule for a service's name (gateway/routes.py): it is written into proxy configs
NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
MAX_REPLICAS = 1024
MAX_DELAY_S = 7 * 86400.0  # a week: any probe period, delay, deadline or back-off
MAX_QPS = 1e9
MAX_THRESHOLD = 1000

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Probe:
    """One probe of a replica: ``http`` (a GET of ``path``: any status 200–399 passes), ``tcp``
    (a connection opens) or ``command`` (exits 0, run beside the replica as its user).
    ``port`` None: the replica's port. The agent's probe runner applies the thresholds and
    reports only a change of verdict (core ``ReplicaProbe``)."""

    kind: str  # "http" | "tcp" | "command"
    path: str = "/"
    port: int | None = None
    command: tuple[str, ...] = ()
    initial_delay_s: float = 0.0
    period_s: float = 10.0
    timeout_s: float = 1.0
    failure_threshold: int = 3
    success_threshold: int = 1

    def to_dict(self) -> dict[str, Any]:
        how: dict[str, Any]
        if self.kind == "http":
            how = {"path": self.path}
            if self.port is not None:
                how["port"] = self.port
        elif self.kind == "tcp":
            how = {} if self.port is None else {"port": self.port}
        else:
            how = {}
        out: dict[str, Any] = {self.kind: list(self.command) if self.kind == "command" else how}
        out |= {
            "initial_delay_s": self.initial_delay_s,
            "period_s": self.period_s,
            "timeout_s": self.timeout_s,
            "failure_threshold": self.failure_threshold,
            "success_threshold": self.success_threshold,
        }
        return out

    @staticmethod
    def from_dict(
        data: Any, *, kind: str = "readiness", source: str = "request", path: str = ""
    ) -> Probe:
        """One probe as ``to_dict`` writes it (a launch carries it so to the agent), as the
        service's ``readiness`` or ``liveness`` (``kind``: a liveness probe's success
        threshold must be 1). Every problem at once, each with its path."""
        if kind not in ("readiness", "liveness"):
            raise SpecError(
                f"a probe is a readiness or a liveness probe, not {kind!r}",
                source=source,
                field=path,
            )
        r = _Reader(source)
        holder = Fields({kind: data}, source=source, path=path)
        probe = r.probe(holder, kind)
        if probe is None and not r.problems:
            r.problems.append((holder.field(kind), "is required (http, tcp or command)"))
        if probe is not None and kind == "liveness" and probe.success_threshold != 1:
            r.problems.append(
                (holder.field("liveness.success_threshold"), "must be 1 for a liveness probe")
            )
        if r.problems:
            raise _refusal(r.problems, source, path)
        assert probe is not None
        return probe


@dataclass(frozen=True, slots=True)
class Amount:
    """A count of replicas: absolute, or a percentage of the desired count."""

    value: int
    percent: bool = False

    def of(self, desired: int, *, round_up: bool) -> int:
        if not self.percent:
            return self.value
        exact = desired * self.value
        return -(-exact // 100) if round_up else exact // 100

    def to_json(self) -> int | str:
        return f"{self.value}%" if self.percent else self.value


@dataclass(frozen=True, slots=True)
class Rollout:
    """How an update replaces the replicas: at most ``max_surge`` above the desired count and
    ``max_unavailable`` ready ones below it. It failed, and rolls back by itself, when no new
    replica became ready for ``progress_deadline_s`` (from the update, or from the last one that
    became ready) or new replicas failed (exited, or failed liveness) ``max_failures`` times.

    The default differs from a Kubernetes Deployment's 25 %/25 %: no ready replica stops before
    its replacement is ready (``max_unavailable`` 0), at most a quarter of them (at least one)
    at a time, so a rollout never lowers a service's capacity (SkyServe and Ray Serve roll so)."""

    max_surge: Amount = Amount(25, True)
    max_unavailable: Amount = Amount(0, False)
    progress_deadline_s: float = 600.0
    max_failures: int = 3

    def limits(self, desired: int) -> tuple[int, int]:
        """(surge, unavailable) for ``desired`` replicas; never both 0 (as Kubernetes: a
        surge of 1 then, so that an update can proceed)."""
        surge = self.max_surge.of(desired, round_up=True)
        unavailable = self.max_unavailable.of(desired, round_up=False)
        if surge == 0 and unavailable == 0:
            surge = 1
        return surge, unavailable


@dataclass(frozen=True, slots=True)
class Backoff:
    """A failed replica's replacement waits ``base_s`` doubled for each failure in a row, at
    most ``max_s``; a replica that stayed ready ``reset_s`` starts the count again. After
    ``avoid_node_after`` failures in a row on one node, replacements avoid that node."""

    base_s: float = 10.0
    max_s: float = 300.0
    reset_s: float = 600.0
    avoid_node_after: int = 3

    def delay(self, failures: int) -> float:
        if failures <= 0:
            return 0.0
        return min(self.max_s, self.base_s * 2.0 ** min(failures - 1, 64))


@dataclass(frozen=True, slots=True)
class Autoscale:
    """Replicas between ``min`` and ``max``: ceil(request rate / ``target_qps_per_replica``),
    up only once the rate has asked for more for ``upscale_delay_s``, down only once it has
    asked for fewer for ``downscale_delay_s``; from zero at the first request."""

    min: int
    max: int
    target_qps_per_replica: float
    upscale_delay_s: float = 30.0
    downscale_delay_s: float = 600.0


@dataclass(frozen=True, slots=True)
class ServiceSpec:
    name: str
    replica: JobSpec  # the template of every replica: one worker, no time limit, no retries
    # where a replica listens, as its process sees it in $PORT; 0: one is assigned to each
    # replica, free on its node (replicas of a service often share a node: 8 one-GPU replicas
    # on an 8-GPU node). A fixed port suits replicas in their own network namespace.
    port: int = 0
    replicas: int = 1  # the desired count without autoscaling (with it: where it starts)
    autoscale: Autoscale | None = None
    readiness: Probe | None = None
    liveness: Probe | None = None
    rollout: Rollout = field(default_factory=Rollout)
    restart: Backoff = field(default_factory=Backoff)

    @property
    def initial_replicas(self) -> int:
        a = self.autoscale
        return self.replicas if a is None else max(a.min, min(a.max, self.replicas))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "replica": _job_to_dict(self.replica),
            "replicas": self.replicas,
        }
        if self.port:
            out["port"] = self.port
        if self.autoscale is not None:
            a = self.autoscale
            out |= {
                "min": a.min,
                "max": a.max,
                "target_qps_per_replica": a.target_qps_per_replica,
                "upscale_delay_s": a.upscale_delay_s,
                "downscale_delay_s": a.downscale_delay_s,
            }
        if self.readiness is not None:
            out["readiness"] = self.readiness.to_dict()
        if self.liveness is not None:
            out["liveness"] = self.liveness.to_dict()
        r = self.rollout
        out["rollout"] = {
            "max_surge": r.max_surge.to_json(),
            "max_unavailable": r.max_unavailable.to_json(),
            "progress_deadline_s": r.progress_deadline_s,
            "max_failures": r.max_failures,
        }
        b = self.restart
        out["restart_backoff"] = {
            "base_s": b.base_s,
            "max_s": b.max_s,
            "reset_s": b.reset_s,
            "avoid_node_after": b.avoid_node_after,
        }
        return out

    @staticmethod
    def from_dict(data: Any, *, source: str = "request", path: str = "") -> ServiceSpec:
        return _Reader(source).spec(data, path)


# ----- reading -------------------------------------------------------------------------------


class _Reader:
    """Reads a service spec, collecting every problem (path, message) before it refuses."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.problems: list[tuple[str, str]] = []

    def get(self, read: Callable[[], T], default: T) -> T:
        try:
            return read()
        except SpecError as e:
            self.problems.append((e.field, e.reason))
            return default

    def fields(self, data: Any, path: str) -> Fields | None:
        return self.get(lambda: Fields(data, source=self.source, path=path), None)

    def finish(self, f: Fields) -> None:
        unknown = sorted(str(k) for k in f.data if k not in f._seen)
        for k in unknown:
            self.problems.append(
                (f.field(k), f"unknown key (allowed: {', '.join(sorted(f._seen))})")
            )

    def spec(self, data: Any, path: str) -> ServiceSpec:
        f = Fields(data, source=self.source, path=path)  # not a mapping: nothing else to say
        name = self.get(lambda: f.text("name", required=True, max_len=63), "")
        if name and not NAME.match(name):
            self.problems.append(
                (
                    f.field("name"),
                    "must be 1-63 lowercase letters, digits and '-', starting "
                    f"and ending with a letter or digit; got {name!r}"[:300],
                )
            )
        port = self.get(lambda: f.integer("port", 0, minimum=1, maximum=65535), 0)
        replicas_given = f.has("replicas")
        replicas = self.get(lambda: f.integer("replicas", 1, minimum=0, maximum=MAX_REPLICAS), 1)
        autoscale = self.autoscale(f)
        if autoscale is not None and not replicas_given:
            replicas = autoscale.min
        replica = self.replica(f, name)
        readiness = self.probe(f, "readiness")
        liveness = self.probe(f, "liveness")
        if liveness is not None and liveness.success_threshold != 1:
            self.problems.append(
                (f.field("liveness.success_threshold"), "must be 1 for a liveness probe")
            )
        rollout = self.rollout(f)
        restart = self.backoff(f)
        self.finish(f)
        if self.problems:
            raise _refusal(self.problems, self.source, path)
        assert replica is not None
        return ServiceSpec(
            name, replica, port, replicas, autoscale, readiness, liveness, rollout, restart
        )

    def autoscale(self, f: Fields) -> Autoscale | None:
        keys = ("min", "max", "target_qps_per_replica", "upscale_delay_s", "downscale_delay_s")
        given = [k for k in keys if f.has(k)]
        for k in keys:
            f.raw(k)  # marked as read
        if not given:
            return None
        lo = self.get(lambda: f.integer("min", 1, minimum=0, maximum=MAX_REPLICAS), 1)
        hi = self.get(lambda: f.integer("max", minimum=1, maximum=MAX_REPLICAS), lo or 1)
        target = self.get(lambda: f.number("target_qps_per_replica", maximum=MAX_QPS), 1.0)
        if target <= 0 and f.has("target_qps_per_replica"):
            self.problems.append((f.field("target_qps_per_replica"), "must be above 0"))
        up = self.get(
            lambda: f.number("upscale_delay_s", 30.0, minimum=0, maximum=MAX_DELAY_S), 0.0
        )
        down = self.get(
            lambda: f.number("downscale_delay_s", 600.0, minimum=0, maximum=MAX_DELAY_S), 0.0
        )
        if lo > hi:
            self.problems.append((f.field("min"), f"must be at most max ({hi}), got {lo}"))
        if f.has("replicas"):
            n = f.data["replicas"]
            if isinstance(n, int) and not isinstance(n, bool) and not lo <= n <= hi:
                self.problems.append(
                    (f.field("replicas"), f"must be within min and max ({lo}-{hi}), got {n}")
                )
        return Autoscale(lo, hi, target if target > 0 else 1.0, up, down)

    def replica(self, f: Fields, name: str) -> JobSpec | None:
        raw = f.raw("replica")
        if raw is None:
            self.problems.append((f.field("replica"), "is required (the replica's job spec)"))
            return None
        if not isinstance(raw, dict):
            self.problems.append(
                (f.field("replica"), f"must be a mapping, got {type(raw).__name__}")
            )
            return None
        at = f.field("replica")
        refused = {
            "workers": "a replica is one worker (scale with replicas)",
            "time_limit_s": "a replica has no time limit (the service keeps it running)",
            "max_retries": "a replica is not retried; the service replaces it (restart_backoff)",
            "batch": "a replica is not a batch job",
            "nodelist": "the service places its replicas (use constraint or exclude)",
            "signal": "a replica has no time limit to warn of",
            "distinct_nodes": "a replica is one worker",
        }
        data = dict(raw)
        for k, why in refused.items():
            if data.get(k) not in (None, {"workers": 1, "batch": False}.get(k)):
                self.problems.append((f"{at}.{k}", why))
            data.pop(k, None)
        data.setdefault("name", name or "service")
        spec = self.get(lambda: JobSpec.from_dict(data, source=self.source, path=at), None)
        if spec is not None and not spec.command and spec.container is None:
            self.problems.append((f"{at}.command", "is required (what a replica runs)"))
        return spec

    def probe(self, f: Fields, key: str) -> Probe | None:
        raw = f.raw(key)
        if raw is None:
            return None
        p = self.fields(raw, f.field(key))
        if p is None:
            return None
        kinds = [k for k in ("http", "tcp", "command") if p.has(k)]
        for k in ("http", "tcp", "command"):
            p.raw(k)
        if len(kinds) != 1:
            self.problems.append(
                (
                    p.path,
                    "needs exactly one of http, tcp or command"
                    + (f" (got {', '.join(kinds)})" if kinds else ""),
                )
            )
        kind = kinds[0] if kinds else "tcp"
        path: str = "/"
        port: int | None = None
        command: tuple[str, ...] = ()
        if not kinds:
            pass  # refused above: nothing kind-specific to read
        elif kind == "http":
            h = self.fields(p.data["http"], p.field("http"))
            if h is not None:
                path = self.get(lambda: h.text("path", "/", max_len=MAX_TEXT), "/")
                if not path.startswith("/"):
                    self.problems.append((h.field("path"), f"must start with '/', got {path!r}"))
                elif any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in path):
                    # it is written into a request line: no room for a second header
                    self.problems.append(
                        (h.field("path"), "must have no spaces or control characters")
                    )
                port = self.get(lambda: h.integer("port", 0, minimum=1, maximum=65535), 0) or None
                self.finish(h)
        elif kind == "tcp":
            t = self.fields(p.data["tcp"], p.field("tcp"))
            if t is not None:
                port = self.get(lambda: t.integer("port", 0, minimum=1, maximum=65535), 0) or None
                self.finish(t)
        else:
            command = self.command(p)
        initial = self.get(
            lambda: p.number("initial_delay_s", 0.0, minimum=0, maximum=MAX_DELAY_S), 0.0
        )
        period = self.get(lambda: p.number("period_s", 10.0, minimum=0, maximum=MAX_DELAY_S), 10.0)
        timeout = self.get(lambda: p.number("timeout_s", 1.0, minimum=0, maximum=MAX_DELAY_S), 1.0)
        for k, v in (("period_s", period), ("timeout_s", timeout)):
            if v <= 0 and p.has(k):
                self.problems.append((p.field(k), "must be above 0"))
        fail = self.get(
            lambda: p.integer("failure_threshold", 3, minimum=1, maximum=MAX_THRESHOLD), 3
        )
        ok = self.get(
            lambda: p.integer("success_threshold", 1, minimum=1, maximum=MAX_THRESHOLD), 1
        )
        self.finish(p)
        return Probe(
            kind, path, port, command, initial, max(period, 1e-3), max(timeout, 1e-3), fail, ok
        )

    def command(self, p: Fields) -> tuple[str, ...]:
        items = p.data["command"]
        at = p.field("command")
        if not isinstance(items, list) or not items or not all(isinstance(x, str) for x in items):
            self.problems.append((at, "must be a non-empty list of strings (an argv)"))
            return ()
        if len(items) > MAX_ITEMS:
            self.problems.append((at, f"must have at most {MAX_ITEMS} arguments"))
            return ()
        for i, x in enumerate(items):
            try:
                p.checked(f"command[{i}]", x, MAX_ARG)
            except SpecError as e:
                self.problems.append((e.field, e.reason))
        if sum(len(x) for x in items) > MAX_COMMAND:
            self.problems.append((at, f"must be at most {MAX_COMMAND} characters in all"))
        return tuple(items)

    def amount(self, r: Fields, key: str, default: Amount) -> Amount:
        raw = r.raw(key)
        if raw is None:
            return default
        at = r.field(key)
        digits = raw[:-1].strip() if isinstance(raw, str) and raw.endswith("%") else ""
        if digits.isascii() and digits.isdigit():  # not int()'s other digits ('²')
            pct = int(digits)
            if pct <= 100:
                return Amount(pct, True)
            self.problems.append((at, f"a percentage must be 0% to 100%, got {raw!r}"))
            return default
        if isinstance(raw, int) and not isinstance(raw, bool) and 0 <= raw <= MAX_REPLICAS:
            return Amount(raw)
        self.problems.append(
            (
                at,
                f"must be a count (0-{MAX_REPLICAS}) or a percentage such as '25%', got {raw!r}"[
                    :200
                ],
            )
        )
        return default

    def rollout(self, f: Fields) -> Rollout:
        raw = f.raw("rollout")
        if raw is None:
            return Rollout()
        r = self.fields(raw, f.field("rollout"))
        if r is None:
            return Rollout()
        d = Rollout()
        surge = self.amount(r, "max_surge", d.max_surge)
        unavailable = self.amount(r, "max_unavailable", d.max_unavailable)
        if surge.value == 0 and unavailable.value == 0:
            self.problems.append(
                (r.field("max_unavailable"), "max_surge and max_unavailable cannot both be 0")
            )
        deadline = self.get(
            lambda: r.number("progress_deadline_s", 600.0, minimum=1, maximum=MAX_DELAY_S), 600.0
        )
        failures = self.get(lambda: r.integer("max_failures", 3, minimum=1, maximum=1000), 3)
        self.finish(r)
        return Rollout(surge, unavailable, deadline, failures)

    def backoff(self, f: Fields) -> Backoff:
        raw = f.raw("restart_backoff")
        if raw is None:
            return Backoff()
        b = self.fields(raw, f.field("restart_backoff"))
        if b is None:
            return Backoff()
        base = self.get(lambda: b.number("base_s", 10.0, minimum=0, maximum=MAX_DELAY_S), 10.0)
        top = self.get(lambda: b.number("max_s", 300.0, minimum=0, maximum=MAX_DELAY_S), 300.0)
        if base > top:
            self.problems.append(
                (b.field("max_s"), f"must be at least base_s ({base:g}), got {top:g}")
            )
        reset = self.get(lambda: b.number("reset_s", 600.0, minimum=0, maximum=MAX_DELAY_S), 600.0)
        avoid = self.get(lambda: b.integer("avoid_node_after", 3, minimum=1, maximum=1000), 3)
        self.finish(b)
        return Backoff(base, max(top, base), reset, avoid)


class ServiceSpecError(SpecError):
    """A refused service spec; ``problems``: each (field path, message), for an API that
    reports them one by one."""

    def __init__(self, message: str, problems: list[tuple[str, str]], **kw: str) -> None:
        super().__init__(message, **kw)
        self.problems = list(problems)


def _refusal(problems: list[tuple[str, str]], source: str, path: str) -> SpecError:
    if len(problems) == 1:
        where, msg = problems[0]
        return ServiceSpecError(msg, problems, source=source, field=where)
    said = "; ".join(f"{where}: {msg}" if where else msg for where, msg in problems)
    return ServiceSpecError(
        f"{len(problems)} problems: {said}", problems, source=source, field=path
    )


def _job_to_dict(s: JobSpec) -> dict[str, Any]:
    """The replica template as ``JobSpec.from_dict`` reads it back (only what differs from
    the defaults, so that a round trip gives the same spec)."""
    out: dict[str, Any] = {"name": s.name, "user": s.user}
    d = JobSpec(s.name, s.user)
    if s.queue != d.queue:
        out["queue"] = s.queue
    out["gpus_per_worker"] = s.gpus_per_worker
    if s.gpu_milli != d.gpu_milli:
        out["gpu_milli"] = s.gpu_milli
    out["cpus"] = s.cpu_milli / 1000
    out["memory_mib"] = s.memory_mib
    if s.gpu_models:
        out["gpu_models"] = list(s.gpu_models)
    if s.priority:
        out["priority"] = s.priority
    if not s.preemptible:
        out["preemptible"] = False
    if s.topology != d.topology:
        out["topology"] = {"level": s.topology.level.value, "required": s.topology.required}
    if s.dataset:
        out["dataset"] = s.dataset
    if s.command:
        out["command"] = list(s.command)
    if s.env:
        out["env"] = dict(s.env)
    if not s.requeue:
        out["requeue"] = False
    if s.secrets:
        out["secrets"] = [_secret(x) for x in s.secrets]
    if s.exclude:
        out["exclude"] = list(s.exclude)
    if s.constraint:
        out["constraint"] = s.constraint
    if s.exclusive:
        out["exclusive"] = True
    if s.gres_type:
        out["gres_type"] = s.gres_type
    if s.workdir:
        out["workdir"] = s.workdir
    if s.container is not None:
        out["container"] = _container(s.container)
    if s.whole_node_memory:
        out["whole_node_memory"] = True
    if s.tasks_per_worker != 1:
        out["tasks_per_worker"] = s.tasks_per_worker
    if s.submit_env:
        out["submit_env"] = dict(s.submit_env)
    return out


def _secret(r: SecretRef) -> dict[str, str]:
    return {
        k: v
        for k, v in (("name", r.name), ("scope", r.scope), ("env", r.env), ("file", r.file))
        if v
    }


def _container(c: ContainerSpec) -> dict[str, Any]:
    out: dict[str, Any] = {"image": c.image, "mounts": [m.to_dict() for m in c.mounts]}
    if c.workdir:
        out["workdir"] = c.workdir
    return out
