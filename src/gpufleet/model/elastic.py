"""Elastic node pools: a pool whose nodes are created when jobs need them and released when
they sit idle, as Slurm's power saving (ResumeProgram, SuspendProgram, ResumeTimeout,
SuspendTime) and cloud autoscalers do.

A pool of the cluster spec is elastic when it has an ``elastic`` mapping instead of a ``count``::

    pools:
      - name: burst
        gpu_model: H100-SXM
        gpus: 8
        cpu_cores: 112
        memory_gib: 2048
        elastic:
          min: 0                 # nodes kept up even when idle
          max: 8                 # nodes it may have at once (their names: burst-000..burst-007)
          provider: local        # or {name: command, resume: /site/resume, suspend: /site/suspend}
          resume_timeout_s: 600  # Slurm's ResumeTimeout: not registered by then → failed
          suspend_after_s: 600   # Slurm's SuspendTime: released once idle this long
          node_hour_cost: 12.5   # what one node costs per hour up (reports and the simulator)

Every one of its ``max`` nodes is named up front (as Slurm's cloud nodes are configured in
slurm.conf), so a node keeps its name, leaf and shape across its resumes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpufleet.model.errors import SpecError
from gpufleet.model.validate import MAX_NAME, Fields

if TYPE_CHECKING:
    from gpufleet.model.cluster import NodeSpec

# the providers gpufleet ships (``server/elastic/``: command, local; ``sim/elastic.py``: sim)
PROVIDERS = ("command", "local", "sim")
DEFAULT_RESUME_TIMEOUT_S = 600.0  # a cloud GPU node boots in minutes (ParallelCluster: 10 min)
DEFAULT_SUSPEND_AFTER_S = 600.0  # ParallelCluster's scaledown_idletime: 10 minutes
MAX_ELASTIC_NODES = 10_000


@dataclass(frozen=True, slots=True)
class Provider:
    """A provider plugin by name, with its options (the ``command`` provider's scripts)."""

    name: str
    options: tuple[tuple[str, str], ...] = ()

    def option(self, key: str, default: str = "") -> str:
        return dict(self.options).get(key, default)


@dataclass(frozen=True, slots=True)
class ElasticSpec:
    min: int
    max: int
    provider: Provider
    resume_timeout_s: float = DEFAULT_RESUME_TIMEOUT_S
    suspend_after_s: float = DEFAULT_SUSPEND_AFTER_S
    node_hour_cost: float = 0.0


@dataclass(frozen=True, slots=True)
class ElasticPool:
    """An elastic pool: its settings and every node it may have (``max`` of them, in order)."""

    name: str
    spec: ElasticSpec
    nodes: tuple[NodeSpec, ...]


def read_elastic(f: Fields, key: str = "elastic") -> ElasticSpec:
    """The pool's ``elastic`` mapping (the pool has no ``count``: its caller checks)."""
    e = Fields(f.mapping(key), source=f.source, path=f.field(key))
    hi = e.integer("max", minimum=1, maximum=MAX_ELASTIC_NODES)
    lo = e.integer("min", 0, minimum=0, maximum=MAX_ELASTIC_NODES)
    if lo > hi:
        raise e.error("min", f"must be at most max ({hi}), got {lo}")
    provider = _provider(e)
    spec = ElasticSpec(
        lo,
        hi,
        provider,
        e.number("resume_timeout_s", DEFAULT_RESUME_TIMEOUT_S, minimum=1.0, maximum=86_400.0),
        e.number("suspend_after_s", DEFAULT_SUSPEND_AFTER_S, minimum=0.0, maximum=31_536_000.0),
        e.number("node_hour_cost", 0.0, minimum=0.0, maximum=1e9),
    )
    e.finish()
    return spec


def _provider(e: Fields) -> Provider:
    raw: Any = e.raw("provider")
    if raw is None:
        raise e.error("provider", f"is required: one of {', '.join(PROVIDERS)}")
    if isinstance(raw, str):
        return _named(e, raw, ())
    p = Fields(e.mapping("provider"), source=e.source, path=e.field("provider"))
    name = p.text("name", required=True)
    opts: list[tuple[str, str]] = []
    if name == "command":
        opts.append(("resume", p.text("resume", required=True)))
        opts.append(("suspend", p.text("suspend", required=True)))
        opts.append(("timeout_s", str(p.number("timeout_s", 60.0, minimum=1.0, maximum=3600.0))))
    elif name == "local":
        opts.append(("start_s", str(p.number("start_s", 0.0, minimum=0.0, maximum=3600.0))))
    elif name == "sim":
        opts.append(("start_s", str(p.number("start_s", 120.0, minimum=0.0, maximum=86_400.0))))
    p.finish()
    return _named(e, name, tuple(opts))


def _named(e: Fields, name: str, opts: tuple[tuple[str, str], ...]) -> Provider:
    if name not in PROVIDERS:
        raise e.error("provider", f"unknown provider {name[:MAX_NAME]!r}: one of {PROVIDERS}")
    if name == "command" and not opts:
        raise e.error("provider", "the command provider needs {name: command, resume, suspend}")
    return Provider(name, opts)


def check_no_count(f: Fields) -> None:
    if f.has("count"):
        raise SpecError(
            "an elastic pool has no count: its nodes come and go between elastic.min and "
            "elastic.max",
            source=f.source,
            field=f.field("count"),
        )
