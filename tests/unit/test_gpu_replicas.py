"""Time-slicing with N replicas per GPU (model/replicas.py, ADR 0052 and 0054): the spec's pool
field, the agent's flag, placement that gives one replica per worker or whole GPUs none of whose
replicas is held, never other shares, and the Reasons (failRequestsGreaterThanOne at submit)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from builders import cluster, cycle, nodes_of, profile, running, start_of
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


@pytest.mark.parametrize(("gpus", "milli"), [(1, 500), (1, 100)])
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


@pytest.mark.parametrize("place", ["", "fgd-strand"])
def test_modes_never_mix_other_shares_go_to_the_other_nodes(place: str) -> None:
    """Under every placement plugin: fgd-strand's states say nothing of replicas, and it once
    put a half GPU on a replica GPU (the live controller's default, so submit took it too)."""
    kw = {"place": place} if place else {}
    nodes = sliced(cluster(1, 2, model="L40S")) + cluster(1, 2, model="L40S", start=1)
    jobs = [
        pjob("half", gpus=1, milli=500),
        pjob("rep", gpus=1, milli=QUARTER),
        pjob("cpu", gpus=0),
    ]
    res = cycle(nodes, jobs, **kw)
    only = sliced(cluster(1, 1, model="L40S"))
    assert fit_problems(pjob("h", gpus=1, milli=500).spec, only, profile(**kw))
    assert nodes_of(res, "half") == ["n01"]
    assert nodes_of(res, "rep")  # a replica-sized share fits either node
    assert fit_problems(pjob("two", gpus=2).spec, nodes, profile()) == []
    # the plain node full: a half waits, never on the replicas' node
    full = [running("t", ("n01", [0, 1]))]
    res = cycle(
        nodes, [pjob("h2", gpus=1, milli=500), pjob("r2", gpus=1, milli=QUARTER)], full, **kw
    )
    assert res.reasons["h2"].code is ReasonCode.RESOURCES
    assert nodes_of(res, "r2") == ["n00"]


def test_a_whole_gpu_job_takes_a_replica_nodes_gpu_none_of_whose_replicas_is_held() -> None:
    """Slurm's Gres=gpu:2,shard:8: --gres=gpu:1 is a whole GPU, given as a gpu or as shards,
    never both (ADR 0054); before, a 1-GPU job never fit a node offering replicas."""
    nodes = sliced(cluster(1, 2, model="L40S"))
    assert fit_problems(pjob("one", gpus=1).spec, nodes, profile()) == []
    assert fit_problems(pjob("two", gpus=2).spec, nodes, profile()) == []
    res = cycle(nodes, [pjob("w", gpus=1), pjob("r", gpus=1, milli=QUARTER)])
    assert nodes_of(res, "w") == ["n00"] and nodes_of(res, "r") == ["n00"]
    ((w,),) = [start_of(res, "w")]
    ((r,),) = [start_of(res, "r")]
    assert w.gpus != r.gpus and w.gpu_milli == 1000 and r.gpu_milli == QUARTER
    # one replica held on each GPU: no GPU is free whole, and the Reason says why
    held = [running(f"h{d}", ("n00", [d]), milli=QUARTER) for d in (0, 1)]
    res = cycle(nodes, [pjob("w", gpus=1), pjob("r", gpus=1, milli=QUARTER)], held)
    assert nodes_of(res, "r") == ["n00"]
    r = res.reasons["w"]
    assert r.code is ReasonCode.RESOURCES and r.data["gpu_replicas"] == 4
    assert r.message == (
        "needs 1 GPU, whole; 0 free now: 2 GPUs time-sliced as 4 replicas each are held, by "
        "replicas or whole, and such a GPU is given whole only when none of its replicas is held"
    )
    # a GPU held whole gives no replica
    whole = [running("w0", ("n00", [0, 1]))]
    assert cycle(nodes, [pjob("r", gpus=1, milli=QUARTER)], whole).reasons["r"].code is (
        ReasonCode.RESOURCES
    )


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
    assert starts["whole"] == 200.0  # the GPU whole once none of its replicas is held
