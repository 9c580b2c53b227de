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

import math
import re
from dataclasses import dataclass, field
from typing import Any

from gpufleet.model.container import ContainerSpec
from gpufleet.model.errors import SpecError
from gpufleet.model.job import JobSpec
from gpufleet.model.secrets import SecretRef

# the gateway's rule for a service's name (gateway/routes.py): it is written into proxy configs
NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
MAX_REPLICAS = 1024
MAX_DELAY_S = 7 * 86400.0  # a week: any probe period, delay, deadline or back-off
MAX_QPS = 1e9
MAX_THRESHOLD = 1000


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

    def ready_after(self, up_s: float) -> float:
        """Seconds from a replica's start to the probe's verdict "ready", for a replica that
        answers from ``up_s`` after its start (the agent's probe runner: a first probe after
        ``initial_delay_s``, one per ``period_s``, ready after ``success_threshold`` passes
        in a row; a probe's own duration not counted). The simulator's replicas are ready so."""
        late = max(0.0, up_s - self.initial_delay_s)
        periods = math.ceil(late / self.period_s) if self.period_s > 0 else 0
        first = self.initial_delay_s + periods * self.period_s
        return first + (self.success_threshold - 1) * self.period_s

    @staticmethod
    def from_dict(
        data: Any, *, kind: str = "readiness", source: str = "request", path: str = ""
    ) -> Probe:
        """One probe as ``to_dict`` writes it (a launch carries it so to the agent), as the
        service's ``readiness`` or ``liveness`` (``kind``: a liveness probe's success
        threshold must be 1). Every problem at once, each with its path."""
        from gpufleet.model.service_read import read_probe  # it builds this class

        return read_probe(data, kind=kind, source=source, path=path)


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
    ``avoid_node_after`` failures in a row on one node, replacements avoid that node (while the
    replica may run on another)."""

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
class Desktop:
    """A service that is one user's remote desktop (``gpufleet desktop run``): its endpoint
    lets in only its owner's (and admins') own gpufleet tokens, never a service token, and
    carries WebSocket; after ``idle_suspend_s`` with no open connection and no request
    through the gateway, the core scales it to 0 (suspended; ``desktop run`` again resumes
    it). ``geometry``: the X screen, WIDTHxHEIGHT."""

    idle_suspend_s: float = 1800.0
    geometry: str = "1280x800"

    def to_dict(self) -> dict[str, Any]:
        return {"idle_suspend_s": self.idle_suspend_s, "geometry": self.geometry}


GEOMETRY = re.compile(r"^([1-9][0-9]{2,3})x([1-9][0-9]{2,3})$")


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
    desktop: Desktop | None = None  # a user's remote desktop (see Desktop)

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
        if self.desktop is not None:
            out["desktop"] = self.desktop.to_dict()
        return out

    @staticmethod
    def from_dict(data: Any, *, source: str = "request", path: str = "") -> ServiceSpec:
        from gpufleet.model.service_read import read_service  # it builds this class

        return read_service(data, source=source, path=path)


class ServiceSpecError(SpecError):
    """A refused service spec; ``problems``: each (field path, message), for an API that
    reports them one by one."""

    def __init__(self, message: str, problems: list[tuple[str, str]], **kw: str) -> None:
        super().__init__(message, **kw)
        self.problems = list(problems)


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
    if s.gpu_engines:
        out["gpu_engines"] = dict(s.gpu_engines)
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
