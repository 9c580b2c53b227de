"""A node with MIG devices from discovery to placement: the agent's registration, the
controller's node spec (the catalog knows a MIG profile as a model) and the scheduler, which
gives a job asking for a whole GPU model no slice and one asking for the slice its slices."""

from __future__ import annotations

from builders import cycle, job, node, nodes_of, start_of
from test_agent_nvml import FakeNvml, h200, mig

from gpufleet.agent.gpu import node_gpu_model
from gpufleet.agent.nvml import NvmlBackend
from gpufleet.api.schemas import AgentRegister
from gpufleet.model import JobSpec
from gpufleet.server.routers.agent import node_spec


def register(nv: FakeNvml) -> AgentRegister:
    gpus = NvmlBackend(nv, profiling=None).discover()
    return AgentRegister(
        node="n1", address="10.0.0.1", gpu_model=node_gpu_model(gpus), gpus=gpus,
        cpu_cores=64, memory_gib=512,
    )  # fmt: skip


def test_a_mig_node_registers_its_slices_and_gets_jobs_that_ask_for_them() -> None:
    req = register(FakeNvml([h200(0, mig=[mig(1, 16.5), mig(1, 16.5), mig(1, 16.5)])]))
    ns = node_spec(req)  # what the controller makes of it (422 for a model it does not know)
    assert (ns.gpu_model, ns.gpus) == ("H200-1g.18gb", 3)
    assert ns.gpu_type == "h200_1g.18gb"  # what sbatch's --gres=gpu:TYPE matches, as Slurm's
    asked = JobSpec.from_dict({"name": "t", "user": "u", "gpu_models": ["h200-1g.18gb"]})
    assert asked.gpu_models == ("H200-1g.18gb",)
    n = node("n1", 3, model=ns.gpu_model)
    res = cycle([n], [job("whole", models=["H200"]), job("slice", models=asked.gpu_models)])
    assert start_of(res, "whole") is None  # a whole H200 asked for: no slice of one
    assert nodes_of(res, "slice") == ["n1"]


def test_a_node_mixing_whole_gpus_and_slices_registers_as_its_smallest() -> None:
    req = register(FakeNvml([h200(0, mig=[mig(3, 66.5), mig(1, 16.5)]), h200(1, mig=None)]))
    assert [g.model for g in req.gpus] == ["H200-3g.71gb", "H200-1g.18gb", "H200"]
    ns = node_spec(req)
    assert (ns.gpu_model, ns.gpus) == ("H200-1g.18gb", 3)  # each device gives at least that
