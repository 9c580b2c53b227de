"""The Philly set-up the replay benches share: ``philly_dev.csv`` read in place from
``../shared/traces/``, 64 nodes × 8 GPUs in 4 leaves, the virtual clusters as equal-share queues,
exact time limits."""

from __future__ import annotations

from pathlib import Path

from bench.paths import SHARED
from gpufleet.model.cluster import ClusterSpec
from gpufleet.sim.engine import TraceJob
from gpufleet.sim.replay import equal_share_queues, uniform_cluster, with_queues
from gpufleet.sim.traces import TimeLimit, apply_time_limits, load_trace

DEFAULT_TRACE = SHARED / "traces" / "philly" / "philly_dev.csv"
NODES, GPUS_PER_NODE, LEAVES = 64, 8, 4


def philly_workload(trace: Path, limit: int | None = None) -> tuple[ClusterSpec, list[TraceJob]]:
    """The first ``limit`` jobs of ``trace`` (all with None) and the cluster they run on."""
    jobs = apply_time_limits(load_trace(trace, "philly"), TimeLimit("exact"))[:limit]
    cluster = with_queues(uniform_cluster(NODES, GPUS_PER_NODE, LEAVES), equal_share_queues(jobs))
    return cluster, jobs
