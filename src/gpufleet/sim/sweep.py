"""Sweeps: one workload replayed over profiles × capacities × seeds, in local processes or on Ray.

A sweep is a grid of runs (``Point``: a profile, a node count, a seed). Every run replays the
same jobs with the same settings (``SweepWorkload``, loaded once by the caller); what differs is
the profile, the cluster of that many nodes and ``SimConfig.seed``. The seed reaches the only
random draws a replay has: ``place/random`` (placement) and the random node failures of an
MTBF. Traces are replayed as given (no sampling, no jitter), so without those two every seed of
a run gives the same figures (``seeds_matter`` says which).

``run_point`` is the one run function, a plain module-level function of picklable arguments, so
the three runners behind ``Runner`` (in this process, a local process pool, Ray tasks) run the
very same code. A run that raises is a ``RunResult`` with its error: the others go on.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import socket
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from gpufleet.model.cluster import ClusterSpec
from gpufleet.model.errors import SpecError
from gpufleet.sim.engine import SimConfig, TraceJob
from gpufleet.sim.metrics import ReplayMetrics
from gpufleet.sim.replay import ProfileChoice, run_replay, uniform_cluster
from gpufleet.sim.whatif import resize

# the figures of a sweep's tables, per run and aggregated over seeds: ReplayMetrics key, label
FIGURES = (
    ("avg_jct_s", "avg JCT"),
    ("p95_jct_s", "p95 JCT"),
    ("avg_wait_s", "avg wait"),
    ("utilization", "utilization"),
    ("makespan_s", "makespan"),
)


# ---------------------------------------------------------------------------------------------
# the grid


@dataclass(frozen=True, slots=True)
class Point:
    """One run of a sweep."""

    profile: ProfileChoice
    nodes: int
    seed: int

    @property
    def label(self) -> str:
        return f"{self.profile.label} on {self.nodes} nodes, seed {self.seed}"


def grid(
    profiles: Sequence[ProfileChoice], capacities: Sequence[int], seeds: Sequence[int]
) -> list[Point]:
    """The cross product, profile-major: a profile's capacities together, seeds innermost."""
    return [Point(p, n, s) for p in profiles for n in capacities for s in seeds]


def parse_counts(text: str, option: str, *, minimum: int) -> tuple[list[int], list[SpecError]]:
    """A comma list of whole numbers ≥ ``minimum``: the values, and every problem found."""
    values: list[int] = []
    problems: list[SpecError] = []
    items = [x.strip() for x in text.split(",")]
    if not any(items):
        return [], [SpecError("give at least one value", field=option)]
    for x in items:
        if not x:
            problems.append(SpecError(f"an empty item in {text!r}", field=option))
            continue
        try:
            v = int(x)
        except ValueError:
            problems.append(SpecError(f"{x!r} is not a whole number", field=option))
            continue
        if v < minimum:
            problems.append(SpecError(f"{v} is less than {minimum}", field=option))
        elif v in values:
            problems.append(SpecError(f"{v} is named twice", field=option))
        else:
            values.append(v)
    return values, problems


class Problems(SpecError):
    """Every problem of a sweep's options at once (each with its option)."""

    def __init__(self, problems: Sequence[SpecError]) -> None:
        self.problems = list(problems)
        super().__init__("; ".join(str(p) for p in self.problems))


# ---------------------------------------------------------------------------------------------
# the workload


@dataclass(frozen=True, slots=True)
class SweepWorkload:
    """What every run shares: the jobs, the settings, and the cluster of each capacity."""

    jobs: Sequence[TraceJob]
    config: SimConfig
    clusters: Mapping[int, ClusterSpec]


def clusters_for(
    base: ClusterSpec,
    capacities: Sequence[int],
    *,
    uniform: tuple[int, int] | None,
) -> tuple[dict[int, ClusterSpec], list[SpecError]]:
    """The cluster of each node count, and every count that cannot be made.

    ``uniform`` (GPUs per node, leaves): the nodes are identical and each count is laid out as
    ``simulate replay --nodes N`` lays it out (spread over the leaves), so a sweep's run equals
    that replay. Otherwise (a cluster file) ``whatif.resize`` grows the cluster with copies of
    its last node or drops its last nodes. The queues stay the base cluster's."""
    out: dict[int, ClusterSpec] = {}
    problems: list[SpecError] = []
    for n in capacities:
        try:
            if uniform is not None:
                made = uniform_cluster(n, uniform[0], uniform[1], name=base.name)
                out[n] = replace(made, queues=base.queues)
            else:
                out[n] = resize(base, n, f"--nodes {n}")
        except SpecError as exc:
            # the option at fault (--leaves, --gpus-per-node), for this count of --nodes
            problems.append(SpecError(f"with --nodes {n}: {exc.reason}", field=exc.field))
    return out, problems


def check_failures(config: SimConfig, clusters: Mapping[int, ClusterSpec]) -> list[SpecError]:
    """Scripted failures must name a node of every capacity (a smaller one drops nodes)."""
    problems = []
    for n, cluster in clusters.items():
        names = {x.name for x in cluster.nodes}
        lost = sorted({f.node for f in config.failures} - names)
        if lost:
            problems.append(
                SpecError(
                    f"the cluster of {n} nodes has no node {', '.join(lost[:3])}"
                    f"{', …' if len(lost) > 3 else ''} that --fail names",
                    field="--nodes",
                )
            )
    return problems


def seeds_matter(profiles: Sequence[ProfileChoice], config: SimConfig) -> bool:
    """Whether a seed changes anything: random placement or random failures (MTBF)."""
    return bool(config.mtbf_s) or any(p.placement == "random" for p in profiles)


# ---------------------------------------------------------------------------------------------
# one run


@dataclass(frozen=True, slots=True)
class RunResult:
    point: Point
    metrics: ReplayMetrics | None = None
    error: str | None = None  # why the run failed (then no metrics)
    cycles: int = 0

    @property
    def ok(self) -> bool:
        return self.error is None


def run_point(workload: SweepWorkload, point: Point) -> RunResult:
    """One run. An exception is the run's failure, kept with its point (the sweep goes on)."""
    try:
        cluster = workload.clusters[point.nodes]
        config = replace(workload.config, seed=point.seed)
        run = run_replay(cluster, workload.jobs, point.profile, config)
    except Exception as exc:  # any failure of one run is reported, not raised
        return RunResult(point, error=_why(exc))
    return RunResult(point, run.metrics, cycles=run.cycles)


def _why(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


# ---------------------------------------------------------------------------------------------
# runners: one interface, three ways to run the same run function

OnDone = Callable[[RunResult], None]


class Runner(Protocol):
    def run(
        self, workload: SweepWorkload, points: Sequence[Point], on_done: OnDone | None = None
    ) -> list[RunResult]:
        """Every point's result, in the order of ``points``; ``on_done`` as each one ends."""
        ...


def _in_order(points: Sequence[Point], results: Mapping[int, RunResult]) -> list[RunResult]:
    return [results[i] for i in range(len(points))]


class InProcess:
    """One run after the other, in this process."""

    def run(
        self, workload: SweepWorkload, points: Sequence[Point], on_done: OnDone | None = None
    ) -> list[RunResult]:
        out = []
        for p in points:
            r = run_point(workload, p)
            if on_done is not None:
                on_done(r)
            out.append(r)
        return out


_WORKLOAD: SweepWorkload | None = None  # a pool worker's copy, sent once per worker


def _install(workload: SweepWorkload) -> None:
    global _WORKLOAD
    _WORKLOAD = workload


def _run_installed(point: Point) -> RunResult:
    assert _WORKLOAD is not None, "a pool worker without its workload"
    return run_point(_WORKLOAD, point)


@dataclass(frozen=True, slots=True)
class LocalProcesses:
    """``workers`` local processes (a ProcessPoolExecutor); the workload goes once to each."""

    workers: int = field(default_factory=lambda: os.cpu_count() or 1)

    def run(
        self, workload: SweepWorkload, points: Sequence[Point], on_done: OnDone | None = None
    ) -> list[RunResult]:
        results: dict[int, RunResult] = {}
        if not points:
            return []
        # forkserver: a clean child (no copy of the caller's threads, e.g. a progress bar's)
        ctx = multiprocessing.get_context("forkserver")
        with ProcessPoolExecutor(
            max_workers=max(1, min(self.workers, len(points))),
            mp_context=ctx,
            initializer=_install,
            initargs=(workload,),
        ) as pool:
            futures = {pool.submit(_run_installed, p): i for i, p in enumerate(points)}
            for fut in as_completed(futures):
                i = futures[fut]
                try:
                    r = fut.result()
                except Exception as exc:  # the worker died (killed, out of memory, …)
                    r = RunResult(points[i], error=f"its worker process failed: {_why(exc)}")
                results[i] = r
                if on_done is not None:
                    on_done(r)
        return _in_order(points, results)


@dataclass(frozen=True, slots=True)
class RayCluster:
    """One Ray task per run on the cluster at ``address`` (``ray.init(address=…)``); the
    workload is put in Ray's object store once. The cluster's Python must have gpufleet."""

    address: str

    def run(
        self, workload: SweepWorkload, points: Sequence[Point], on_done: OnDone | None = None
    ) -> list[RunResult]:
        ray = _ray()
        import logging

        _check_reachable(self.address)
        try:
            ray.init(
                address=self.address,
                logging_level=logging.WARNING,
                log_to_driver=False,
                configure_logging=True,
            )
        except Exception as exc:
            raise SpecError(
                f"cannot connect to Ray at {self.address!r}: {_why(exc)}", field="--ray"
            ) from None
        try:
            ref = ray.put(workload)
            task = ray.remote(num_cpus=1, max_retries=0)(run_point)
            pending = {task.remote(ref, p): i for i, p in enumerate(points)}
            results: dict[int, RunResult] = {}
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                for obj in done:
                    i = pending.pop(obj)
                    try:
                        r = ray.get(obj)
                    except Exception as exc:  # the task's worker died, or Ray lost it
                        r = RunResult(points[i], error=f"its Ray task failed: {_why(exc)}")
                    results[i] = r
                    if on_done is not None:
                        on_done(r)
            return _in_order(points, results)
        finally:
            ray.shutdown()


def _check_reachable(address: str) -> None:
    """A HOST:PORT where nothing listens fails now: ray.init would retry for minutes."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "://" in address:
        return  # "auto", or a form Ray resolves itself
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=10).close()
    except OSError as exc:
        raise SpecError(
            f"nothing answers at {address} ({exc.strerror or exc}); is the head started "
            "(ray start --head)?",
            field="--ray",
        ) from None


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise SpecError(
            "Ray is not installed here: pip install 'gpufleet[ray]'", field="--ray"
        ) from None
    return ray


# ---------------------------------------------------------------------------------------------
# over seeds


@dataclass(frozen=True, slots=True)
class Spread:
    """A figure over a group's runs: mean, sample standard deviation (0 for one run), range."""

    mean: float
    std: float
    min: float
    max: float

    @staticmethod
    def of(values: Sequence[float]) -> Spread:
        n = len(values)
        mean = math.fsum(values) / n
        var = math.fsum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
        return Spread(mean, math.sqrt(var), min(values), max(values))

    def to_json(self) -> dict[str, float]:
        return {k: round(getattr(self, k), 6) for k in ("mean", "std", "min", "max")}


@dataclass(frozen=True, slots=True)
class Aggregate:
    """One (profile, capacity) over its seeds; failed runs are counted and left out."""

    profile: str
    nodes: int
    runs: int
    failed: int
    figures: dict[str, Spread | None]


def aggregate(results: Sequence[RunResult]) -> list[Aggregate]:
    groups: dict[tuple[str, int], list[RunResult]] = {}
    for r in results:
        groups.setdefault((r.point.profile.label, r.point.nodes), []).append(r)
    out = []
    for (label, nodes), rs in groups.items():
        ok = [r.metrics for r in rs if r.metrics is not None]
        figures: dict[str, Spread | None] = {}
        for key, _ in FIGURES:
            values = [float(v) for m in ok if (v := getattr(m, key)) is not None]
            figures[key] = Spread.of(values) if values else None
        out.append(Aggregate(label, nodes, len(rs), len(rs) - len(ok), figures))
    return out


# ---------------------------------------------------------------------------------------------
# as JSON


def run_json(r: RunResult) -> dict[str, Any]:
    out: dict[str, Any] = {"profile": r.point.profile.label, "nodes": r.point.nodes}
    out["seed"] = r.point.seed
    if r.metrics is None:
        out["error"] = r.error
        return out
    m = r.metrics.to_json()
    out.update({k: m[k] for k, _ in FIGURES})
    out["metrics"] = m
    return out


def sweep_json(results: Sequence[RunResult]) -> dict[str, Any]:
    return {
        "runs": [run_json(r) for r in results],
        "aggregates": [
            {
                "profile": a.profile,
                "nodes": a.nodes,
                "runs": a.runs,
                "failed": a.failed,
                **{k: (None if s is None else s.to_json()) for k, s in a.figures.items()},
            }
            for a in aggregate(results)
        ],
        "failed": sum(1 for r in results if not r.ok),
    }
