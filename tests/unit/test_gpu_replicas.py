"""Time-slicing with N replicas per GPU (model/replicas.py, ADR 0052): the spec's pool field,
the agent's flag, placement that gives one replica per worker and never mixes it with whole
GPUs or other shares on one node, and the Reasons (failRequestsGreaterThanOne at submit)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from builders import cluster, cycle, nodes_of, profile, running
from test_scheduler_alloc import pjob

from gpufleet.agent.main import _sharing_labels
from gpufleet.agent.sharing import Sharing
from gpufleet.model import replicas
from gpufleet.model.cluster import ClusterSpec
from gpufleet.model.errors import SpecError
from gpufleet.model.reason import ReasonCode
from gpufleet.scheduler.snapshot import NodeView
from gpufleet.server.admission import fit_problems

QUARTER = 250


def sliced(nodes: list[NodeView], n: int = 4) -> list[NodeView]:
    return [replace(v, labels=tuple(sorted(replicas.labels(n).items()))) for v in nodes]


def spec_with(pool: dict[str, object]) -> ClusterSpec:
    base = {"name": "ts", "count": 1, "gpu_model": "L40S", "gpus": 2, "cpu_cores": 32}
    return ClusterSpec.from_dict({"pools": [{**base, "memory_gib": 256, **pool}]})


def test_a_pool_says_its_gpus_are_time_sliced_with_n_replicas() -> None:
    node = spec_with({"gpu_replicas": 4}).nodes[0]
    assert node.label_map == {"gpufleet.io/gpu-sharing": "timeslice", replicas.LABEL: "4"}
    assert replicas.of(node.labels) == 4 and replicas.milli(4) == QUARTER
    assert replicas.of(spec_with({}).nodes[0].labels) == 0
    with pytest.raises(SpecError, match="gpu_replicas"):
        spec_with({"gpu_replicas": 1})
    with pytest.raises(SpecError, match="needs GPUs"):
        spec_with({"gpu_replicas": 4, "gpus": 0})


def test_the_agent_says_replicas_as_labels_and_only_for_time_slicing() -> None:
    assert _sharing_labels("timeslice", 0) == {"gpufleet.io/gpu-sharing": "timeslice"}
    assert _sharing_labels("timeslice", 3)[replicas.LABEL] == "3"
    with pytest.raises(ValueError, match="--gpu-replicas needs --gpu-sharing timeslice"):
        _sharing_labels("mps", 3)
    with pytest.raises(ValueError, match="from 2 to 64"):
        _sharing_labels("timeslice", 1)


def test_a_replica_tasks_log_says_its_memory_is_not_bounded() -> None:
    note = Sharing("timeslice", 48 * 1024, replicas=4).note(1, QUARTER)
    assert "4 replicas per GPU" in note and "no memory or fault isolation" in note
    assert Sharing("timeslice", 48 * 1024, replicas=4).task_env(1, QUARTER) == {}


def test_four_replicas_of_one_gpu_run_at_once_and_a_fifth_waits() -> None:
    nodes = sliced(cluster(1, 1, model="L40S"))
    jobs = [pjob(f"r{i}", gpus=1, milli=QUARTER) for i in range(5)]
    res = cycle(nodes, jobs)
    started = [j.id for j in jobs if j.id not in res.reasons]
    assert started == ["r0", "r1", "r2", "r3"]
    assert all(nodes_of(res, j) == ["n00"] for j in started)
    r = res.reasons["r4"]
    assert r.code is ReasonCode.RESOURCES and r.data["gpu_replicas"] == 4
    assert r.message == (
        "needs one replica (0.25 of a GPU); all 4 replicas of the 1 GPU time-sliced as 4 each "
        "are held, and no other node has that share free now"
    )
    four = [running(f"r{i}", ("n00", [0]), milli=QUARTER) for i in range(4)]
    assert cycle(nodes, [jobs[4]], four).reasons["r4"].code is ReasonCode.RESOURCES


@pytest.mark.parametrize(("gpus", "milli"), [(1, 1000), (2, 1000), (1, 500), (1, 100)])
def test_other_than_one_replica_is_refused_at_submit_where_only_replicas_are(
    gpus: int, milli: int
) -> None:
    nodes = sliced(cluster(2, 2, model="L40S"))
    j = pjob("big", gpus=gpus, milli=milli)
    r = cycle(nodes, [j]).reasons["big"]
    assert r.code is ReasonCode.NEVER and r.data["gpu_replicas"] == 4
    assert "time-sliced as 4 replicas" in r.message and "failRequestsGreaterThanOne" in r.message
    ((_, refused),) = fit_problems(j.spec, nodes, profile())
    assert refused.startswith("Requested node configuration is not available: asks for")
    assert fit_problems(pjob("one", gpus=1, milli=QUARTER).spec, nodes, profile()) == []


def test_modes_never_mix_whole_gpus_and_shares_go_to_the_other_nodes() -> None:
    nodes = sliced(cluster(1, 2, model="L40S")) + cluster(1, 2, model="L40S", start=1)
    jobs = [
        pjob("whole", gpus=1),
        pjob("half", gpus=1, milli=500),
        pjob("rep", gpus=1, milli=QUARTER),
        pjob("cpu", gpus=0),
    ]
    res = cycle(nodes, jobs)
    assert nodes_of(res, "whole") == ["n01"] and nodes_of(res, "half") == ["n01"]
    assert nodes_of(res, "rep")  # a replica-sized share fits either node
    assert fit_problems(pjob("two", gpus=2).spec, nodes, profile()) == []  # n01 serves it
    # the whole-GPU node full: a whole GPU waits, never on the replicas' node
    full = [running("t", ("n01", [0, 1]))]
    res = cycle(
        nodes,
        [pjob("w2", gpus=1), pjob("h2", gpus=1, milli=500), pjob("r2", gpus=1, milli=QUARTER)],
        full,
    )
    assert res.reasons["w2"].code is ReasonCode.RESOURCES
    assert res.reasons["h2"].code is ReasonCode.RESOURCES
    assert nodes_of(res, "r2") == ["n00"]


def test_sinfo_shows_replicas_as_slurms_shards_and_nodes_says_them() -> None:
    from gpufleet.api.schemas import NodeOut
    from gpufleet.cli.admin import _node_row
    from gpufleet.shims.sinfo import _gres

    row = {"gpus": 2, "gpu_model": "L40S", "gres_type": "l40s", "labels": replicas.labels(4)}
    assert _gres(row) == "gpu:l40s:2,shard:8"  # Slurm: Gres=gpu:2,shard:8
    assert _gres({**row, "labels": {}}) == "gpu:l40s:2"
    assert _gres({**row, "gpus": 0}) == "(null)"
    node = NodeOut(name="ts-000", state="mixed", gpu_model="L40S", gpus=2, gpus_free=1.5,
                   cpu_cores=32, cpu_free=30, memory_gib=256, memory_free_gib=248, leaf="l",
                   pod="p", labels=replicas.labels(4))  # fmt: skip
    assert _node_row(node, 0.0)[2] == "L40S ×4 replicas"
    assert _node_row(node.model_copy(update={"labels": {}}), 0.0)[2] == "L40S"


def test_the_simulator_replays_a_pool_of_replicas_as_the_controller_places_them() -> None:
    from builders import spec

    from gpufleet.sim.engine import Simulation, TraceJob

    cs = spec_with({"gpu_replicas": 4, "gpus": 1})
    jobs = [TraceJob(f"r{i}", spec(f"r{i}", milli=QUARTER), 0.0, 100.0) for i in range(5)]
    jobs.append(TraceJob("whole", spec("whole"), 0.0, 100.0))
    sim = Simulation(cs, profile(backfill="none"), jobs)
    sim.run(until=1000.0)
    starts = {j: o.first_start for j, o in sim.outcomes.items()}
    assert [starts[f"r{i}"] for i in range(5)] == [0.0, 0.0, 0.0, 0.0, 100.0]
    assert starts["whole"] is None  # a whole GPU never on the replicas' GPU
