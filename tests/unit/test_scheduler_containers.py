"""A job with a container image is placed only on nodes whose agent has a container runtime
(their label, set from the registration), and waits saying so when no node has one."""

from __future__ import annotations

from dataclasses import replace

from builders import cluster, cycle, job, nodes_of

from gpufleet.model.container import ContainerSpec
from gpufleet.model.reason import ReasonCode
from gpufleet.scheduler.containers import LABEL, NO_RUNTIME


def image_job(id: str, **kw: object):  # type: ignore[no-untyped-def]
    p = job(id, **kw)  # type: ignore[arg-type]
    return replace(p, spec=replace(p.spec, container=ContainerSpec("localhost/app:1")))


def test_an_image_job_goes_only_to_a_node_with_a_runtime() -> None:
    bare, with_rt = cluster(2, 8)[:2]
    with_rt = replace(with_rt, labels=((LABEL, "podman"),))
    # best fit would take the first node; only the second has a runtime
    res = cycle([bare, with_rt], [image_job("img", gpus=2), job("plain", gpus=2, seq=1)])
    assert nodes_of(res, "img") == [with_rt.name]
    assert nodes_of(res, "plain")  # a bare job goes anywhere (best fit: the fuller node)
    # a gang of two: one node with a runtime has room for both workers, the bare one for none
    res = cycle([bare, with_rt], [image_job("gang", gpus=4, workers=2)])
    assert nodes_of(res, "gang") == [with_rt.name, with_rt.name]


def test_an_image_job_waits_with_a_reason_when_no_node_has_a_runtime() -> None:
    nodes = cluster(2, 8)
    res = cycle(nodes, [image_job("img", gpus=1), job("plain", gpus=1, seq=1)])
    assert nodes_of(res, "plain")
    reason = res.reasons["img"]
    assert reason.code is ReasonCode.NEVER
    assert reason.message == NO_RUNTIME
    assert NO_RUNTIME == "no node has a container runtime (apptainer, enroot, podman, docker)"
    # the node's runtime arrives (it registers again): the job starts there
    up = [nodes[0], replace(nodes[1], labels=((LABEL, "apptainer,podman"),))]
    assert nodes_of(cycle(up, [image_job("img", gpus=1)]), "img") == [nodes[1].name]
