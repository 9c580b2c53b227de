"""--gres=shard:N (Slurm's shares of a GPU) as gpufleet's time-sliced replicas (ADR 0052):
shard:1 is one replica of the cluster's replica nodes, more is refused, GPUs with shards too."""

from __future__ import annotations

import pytest

from gpufleet.io.sbatch import parse_sbatch_text
from gpufleet.io.sbatch.flags import read_flags
from gpufleet.model.errors import SpecError
from gpufleet.model.job import JobSpec


def script(*directives: str, replicas: tuple[int, ...] | None = (4,)):
    text = "\n".join(["#!/bin/bash", *(f"#SBATCH {d}" for d in directives), "", "nvidia-smi\n"])
    return parse_sbatch_text(text, source="job.sh", replicas=replicas)


def refused(*directives: str, replicas: tuple[int, ...] | None = (4,)) -> str:
    with pytest.raises(SpecError) as e:
        script(*directives, replicas=replicas)
    assert e.value.source == "job.sh"
    return str(e.value.reason)


@pytest.mark.parametrize(("n", "milli"), [(4, 250), (8, 125), (3, 333)])
def test_one_shard_is_one_replica_of_the_replica_nodes(n: int, milli: int) -> None:
    spec = script("--gres=shard:1", replicas=(n,)).spec
    assert (spec["gpus_per_worker"], spec["gpu_milli"]) == (1, milli)
    job = JobSpec.from_dict({**spec, "user": "ann"})
    assert (job.gpus_per_worker, job.gpu_milli) == (1, milli)


def test_shard_alone_is_one_and_each_node_of_several_gets_one() -> None:
    assert script("--gres=shard").spec["gpu_milli"] == 250  # count 1 when left out
    spec = script("--nodes=2", "--gres=shard:1").spec
    assert (spec["workers"], spec["gpus_per_worker"], spec["gpu_milli"]) == (2, 1, 250)


@pytest.mark.parametrize("gres", ["shard:2", "shard:16", "shard:1,shard:1"])
def test_more_than_one_shard_is_refused_as_more_than_one_replica(gres: str) -> None:
    why = refused(f"--gres={gres}")
    assert "failRequestsGreaterThanOne" in why and "--gres=shard:1" in why
    assert "never more" in why


@pytest.mark.parametrize(
    "directives",
    [("--gres=gpu:1,shard:1",), ("--gres=shard:1", "--gpus=1"), ("--gres=nvenc:1,shard:1",)],
)
def test_gpus_and_shards_together_are_refused(directives: tuple[str, ...]) -> None:
    assert "GPUs and shards at once" in refused(*directives)


def test_no_replica_node_or_several_counts_is_said() -> None:
    assert "no node here offers its GPUs as shards" in refused("--gres=shard:1", replicas=())
    assert "known to the controller" in refused("--gres=shard:1", replicas=None)
    why = refused("--gres=shard:1", replicas=(8, 4))
    assert "4 or 8 shards each" in why and "--gpu-share 0.25 (one of 4) or 0.125 (one of 8)" in why


def test_the_flags_reader_reads_shards_as_the_script_reader_does() -> None:
    assert "gpu_milli" not in read_flags(["--gres=gpu:1"]).spec
    with pytest.raises(SpecError, match="known to the controller; submit with sbatch"):
        read_flags(["--gres=shard:1"])
