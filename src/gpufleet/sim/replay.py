"""A replay's set-up and run: cluster, queues, profile and failures in, figures out.

The CLI (``gpufleet simulate replay|compare``) and ``bench/philly_replay.py`` share this, so the
benchmark measures exactly what users run.
"""

from __future__ import annotations

import csv
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gpufleet.io.specs import load_cluster
from gpufleet.model.cluster import ClusterSpec, NodeSpec
from gpufleet.model.errors import SpecError
from gpufleet.model.queue import QueueSpec
from gpufleet.scheduler.framework import Profile, ProfileError, available
from gpufleet.sim.engine import NodeFailure, SimConfig, Simulation, TraceJob
from gpufleet.sim.metrics import JobRow, ReplayMetrics, from_simulation

DEFAULT_GPU_MODEL = "A100-80GB"  # any catalog model: trace jobs ask for no particular one
NODE_CPU_CORES = 128
NODE_MEMORY_GIB = 1024


# ---------------------------------------------------------------------------------------------
# the cluster


def uniform_cluster(
    nodes: int,
    gpus_per_node: int = 8,
    leaves: int = 1,
    *,
    gpu_model: str = DEFAULT_GPU_MODEL,
    name: str = "sim",
) -> ClusterSpec:
    """``nodes`` identical nodes spread evenly over ``leaves`` leaf switches of one pod."""
    if nodes < 1:
        raise SpecError(f"must be at least 1, got {nodes}", field="--nodes")
    if gpus_per_node < 1 or gpus_per_node > 64:
        raise SpecError(f"must be 1 to 64, got {gpus_per_node}", field="--gpus-per-node")
    if leaves < 1 or leaves > nodes:
        raise SpecError(
            f"must be 1 to the number of nodes ({nodes}), got {leaves}", field="--leaves"
        )
    width = max(3, len(str(nodes - 1)))
    specs = [
        NodeSpec(
            f"node-{i:0{width}d}",
            gpu_model,
            gpus_per_node,
            NODE_CPU_CORES * 1000,
            NODE_MEMORY_GIB * 1024,
            f"leaf-{i * leaves // nodes}",
            "pod-0",
        )
        for i in range(nodes)
    ]
    return ClusterSpec.build(name, specs)


def load_cluster_file(path: str | Path) -> ClusterSpec:
    """A cluster spec (YAML), or an openb node list (``.csv``) as one flat leaf."""
    p = Path(path)
    if p.suffix.lower() == ".csv":
        from gpufleet.sim.openb import load_cluster as load_openb_cluster

        return load_openb_cluster(p)
    return load_cluster(p)


def equal_share_queues(jobs: Iterable[TraceJob]) -> tuple[QueueSpec, ...]:
    """One queue of weight 1, no quota, per distinct queue of the trace."""
    return tuple(QueueSpec(name) for name in sorted({j.spec.queue for j in jobs}))


def with_queues(cluster: ClusterSpec, queues: Sequence[QueueSpec]) -> ClusterSpec:
    return replace(cluster, queues=tuple(queues))


def load_failures(
    path: str | Path, cluster: ClusterSpec, default_repair_s: float
) -> list[NodeFailure]:
    """Scripted node failures, CSV ``time,node[,repair_s]``: node ``node`` is lost at ``time``
    and comes back ``repair_s`` seconds later (``--repair`` when the column is absent)."""
    p = Path(path)
    source = str(p)
    names = {n.name for n in cluster.nodes}
    try:
        fh = p.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"cannot read the file: {exc.strerror or exc}", source=source) from None
    out: list[NodeFailure] = []
    with fh:
        reader = csv.DictReader(fh)
        header = [h.strip() for h in reader.fieldnames or ()]
        if "time" not in header or "node" not in header:
            raise SpecError(
                "expected the columns time,node and optionally repair_s",
                source=source,
                field="line 1",
            )
        for raw in reader:
            row = {(k or "").strip(): (v or "").strip() for k, v in raw.items()}
            line = reader.line_num

            def number(column: str, row: dict[str, str] = row, line: int = line) -> float:
                try:
                    v = float(row[column])
                except ValueError:
                    raise SpecError(
                        f"must be a number, got {row[column]!r}",
                        source=source,
                        field=f"line {line}: {column}",
                    ) from None
                if not v >= 0:
                    raise SpecError(
                        f"must be at least 0, got {v:g}",
                        source=source,
                        field=f"line {line}: {column}",
                    )
                return v

            node = row.get("node", "")
            if node not in names:
                raise SpecError(
                    f"no node {node!r} in the cluster", source=source, field=f"line {line}: node"
                )
            repair = number("repair_s") if row.get("repair_s") else default_repair_s
            out.append(NodeFailure(number("time"), node, repair))
    return sorted(out, key=lambda f: f.time)


# ---------------------------------------------------------------------------------------------
# the profile


@dataclass(frozen=True, slots=True)
class ProfileChoice:
    """The plugins of one replay, by name."""

    order: str = "fifo"
    placement: str = "bestfit"
    backfill: str = "easy"
    preempt: tuple[str, ...] = ()
    admit: str = "quota"
    options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return "+".join((self.order, self.placement, self.backfill, *self.preempt))

    def build(self, seed: int = 0) -> Profile:
        # only the chosen order's options apply (e.g. LAS thresholds in a fifo/las comparison)
        opts = {k: v for k, v in self.options.items() if k == f"order/{self.order}"}
        return Profile.build(
            order=self.order,
            admit=self.admit,
            place=self.placement,
            backfill=self.backfill,
            preempt=self.preempt,
            options=opts,
            seed=seed,
            # the simulator needs no per-cycle reasons; the final ones come from one extra cycle
            explain=False,
        )


def parse_profile(text: str, base: ProfileChoice) -> ProfileChoice:
    """``ORDER[+PLACEMENT][+BACKFILL][+PREEMPT…]``; what is left out comes from ``base``.

    ``fifo+easy``, ``las+none+order`` (LAS preempting by its own rule), ``fairshare+topology+
    easy+reclaim``. After the order, each name is a placement, a backfill or a preempt plugin;
    the three sets of names do not overlap. Naming any preempt plugin replaces ``base``'s."""
    parts = [p.strip() for p in text.split("+") if p.strip()]
    if not parts:
        raise SpecError(f"empty profile in {text!r}", field="--profiles")
    orders, places = available("order"), available("place")
    backfills, preempts = available("backfill"), available("preempt")
    if parts[0] not in orders:
        raise SpecError(
            f"{text!r} must start with an order ({', '.join(orders)})", field="--profiles"
        )
    choice = replace(base, order=parts[0])
    preempt: list[str] = []
    for p in parts[1:]:
        if p in places:
            choice = replace(choice, placement=p)
        elif p in backfills:
            choice = replace(choice, backfill=p)
        elif p in preempts:
            preempt.append(p)
        else:
            raise SpecError(
                f"{p!r} in {text!r} is neither a placement ({', '.join(places)}), a backfill "
                f"({', '.join(backfills)}) nor a preempt plugin ({', '.join(preempts)})",
                field="--profiles",
            )
    if preempt:
        choice = replace(choice, preempt=tuple(preempt))
    check_profile(choice)
    return choice


def check_profile(choice: ProfileChoice) -> None:
    """Fail now, with the plugin's own message, rather than after loading a trace."""
    try:
        choice.build()
    except (ProfileError, ValueError) as exc:
        raise SpecError(str(exc), field="profile") from None


# ---------------------------------------------------------------------------------------------
# running


@dataclass(slots=True)
class ReplayRun:
    """What is kept of one replay: its figures, per-job rows and timeline (not the simulator)."""

    label: str
    metrics: ReplayMetrics
    rows: list[JobRow]
    timeline: list[tuple[float, int, int, int]]
    cycles: int
    gpus: int


Progress = Callable[[float, int], None]


def run_replay(
    cluster: ClusterSpec,
    jobs: Sequence[TraceJob],
    choice: ProfileChoice,
    config: SimConfig | None = None,
    *,
    progress: Progress | None = None,
) -> ReplayRun:
    cfg = config or SimConfig()
    sim = Simulation(cluster, choice.build(cfg.seed), jobs, cfg)
    start = time.perf_counter()
    sim.run(progress)
    wall = time.perf_counter() - start
    metrics, rows = from_simulation(sim, wall)
    return ReplayRun(choice.label, metrics, rows, sim.timeline, sim.cycles, cluster.total_gpus)
