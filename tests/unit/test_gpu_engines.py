"""GPU engines and capabilities as resources: the catalog's table, a job's request (spec and
``--gres=nvenc:N``), placement on the GPUs that have them, and the Reason when none has."""

from __future__ import annotations

from dataclasses import replace

import pytest
from builders import cluster, cycle, nodes_of, profile
from test_scheduler_alloc import pjob

from gpufleet.core.state import NodeRuntime
from gpufleet.io.sbatch import parse_sbatch_text
from gpufleet.model.catalog import GPU_MODELS
from gpufleet.model.cluster import NodeSpec
from gpufleet.model.engines import _BY_MODEL, engines_of, gpu_features, lacking
from gpufleet.model.errors import SpecError
from gpufleet.model.jobspec_read import read_spec
from gpufleet.model.reason import ReasonCode
from gpufleet.server.admission import fit_problems
from gpufleet.server.store.codec import spec_from_dict, spec_to_dict


def test_every_catalog_model_has_a_row_with_its_source() -> None:
    assert {m.name for m in GPU_MODELS} == set(_BY_MODEL)
    assert all(e.source for e in _BY_MODEL.values())


def test_training_and_graphics_parts_differ_as_their_datasheets_say() -> None:
    h100, l40s = engines_of("H100-SXM"), engines_of("l40s")
    assert (h100.nvenc, h100.nvdec, h100.rt_cores) == (0, 7, 0)
    assert (l40s.nvenc, l40s.nvdec, l40s.rt_cores) == (3, 3, 142)
    assert gpu_features("H100-SXM") == {"nvdec", "nvjpg", "fp64"}
    assert {"nvenc", "graphics", "display"} <= gpu_features("L40S")
    assert engines_of("RTX-4090").nvenc_sessions == 8  # GeForce: the driver limits sessions
    # a MIG slice, an unknown model and a datasheet without engines: nothing promised
    assert lacking("H100-SXM-1g.10gb", {"nvdec": 1}) == ["nvdec"]
    assert lacking("nonesuch", {"graphics": 1}) == ["graphics"]
    assert lacking("V100-32GB", {"nvenc": 1}) == ["nvenc"]
    assert lacking("L40S", {"nvenc": 3, "graphics": 1}) == []
    assert lacking("L40S", {"nvenc": 4}) == ["nvenc"]


def test_a_spec_asks_for_engines_and_every_mistake_is_said_at_once() -> None:
    s = read_spec({"name": "enc", "user": "u", "gpu_engines": {"NVENC": 1, "graphics": 1}})
    assert s.gpu_engines == (("graphics", 1), ("nvenc", 1))
    assert spec_from_dict(spec_to_dict(s)) == s  # stored and read back
    with pytest.raises(SpecError) as e:
        read_spec(
            {
                "name": "x",
                "user": "u",
                "gpu_engines": {"nvecn": 1, "nvdec": 0, "display": 2},
            }
        )
    msg = str(e.value)
    assert "unknown engine 'nvecn' (did you mean 'nvenc'?)" in msg
    assert "nvdec: a count from 1 to 64, got 0" in msg
    assert "display is a capability, not counted" in msg
    with pytest.raises(SpecError, match="a CPU-only job cannot ask for GPU engines"):
        read_spec({"name": "x", "user": "u", "gpus_per_worker": 0, "gpu_engines": {"nvenc": 1}})


@pytest.mark.parametrize(
    ("gres", "gpus", "engines"),
    [
        ("nvenc:2", 2, {"nvenc": 1}),
        ("gpu:2,nvdec:1", 2, {"nvdec": 1}),
        # a render job's GPUs with the graphics pipeline (its tasks are told graphics,display)
        ("graphics:1", 1, {"graphics": 1}),
        ("gpu:2,graphics:2,nvenc:1", 2, {"graphics": 1, "nvenc": 1}),
    ],
)
def test_sbatch_gres_nvenc_is_gpus_that_have_it(
    gres: str, gpus: int, engines: dict[str, int]
) -> None:
    job = parse_sbatch_text(f"#!/bin/bash\n#SBATCH --gres={gres}\ntrue\n", source="s")
    assert job.spec["gpus_per_worker"] == gpus
    assert job.spec["gpu_engines"] == engines


def test_sbatch_refuses_more_engine_gpus_than_gpus_and_other_gres() -> None:
    with pytest.raises(Exception, match="more GPUs with engines than GPUs"):
        parse_sbatch_text("#!/bin/bash\n#SBATCH --gres=gpu:1,nvenc:2\ntrue\n", source="s")
    with pytest.raises(Exception, match="generic resources other than GPUs"):
        parse_sbatch_text("#!/bin/bash\n#SBATCH --gres=bandwidth:1\ntrue\n", source="s")


def mixed() -> list:
    return cluster(2, 8, model="H100-SXM") + cluster(1, 4, model="L40S", start=2)


def test_an_encoder_job_goes_to_the_gpus_that_have_encoders() -> None:
    res = cycle(mixed(), [pjob("enc", {"gpu_engines": (("nvenc", 1),)}, gpus=2)])
    assert nodes_of(res, "enc") == ["n02"]
    res = cycle(mixed(), [pjob("dec", {"gpu_engines": (("nvdec", 4),)}, gpus=1)])
    assert nodes_of(res, "dec")[0] in ("n00", "n01")  # 7 NVDEC on an H100, 3 on an L40S


def test_no_gpu_with_the_engine_is_a_never_reason_that_names_the_models() -> None:
    nodes = cluster(2, 8, model="H100-SXM")
    j = pjob("enc", {"gpu_engines": (("nvenc", 1),)}, gpus=1)
    r = cycle(nodes, [j]).reasons["enc"]
    assert r.code is ReasonCode.NEVER and r.data["filter"] == "filter/engines"
    assert r.message == "needs GPUs with NVENC; the cluster's GPUs have none (H100-SXM (2 nodes))"
    ((_, refused),) = fit_problems(j.spec, nodes, profile())  # at submit, as sbatch refuses
    assert refused.startswith("Requested node configuration is not available: needs GPUs with")


def test_a_node_offers_its_gpus_capabilities_as_features_for_constraint() -> None:
    l40s = NodeSpec("g0", "L40S", 4, 64_000, 256 * 1024, "leaf-0", "pod-0", features=("ib",))
    view = NodeRuntime(l40s, [1000] * 4, 64_000, 256 * 1024).view()
    assert {"ib", "graphics", "nvenc", "display"} <= view.features
    nodes = [replace(n, features=gpu_features(n.gpu_model)) for n in mixed()]
    res = cycle(nodes, [pjob("render", {"constraint": "graphics"}, gpus=1)])
    assert nodes_of(res, "render") == ["n02"]


def test_an_engine_job_waiting_beside_free_gpus_without_it_is_told_so() -> None:
    """The L40S is busy and three H100s are free: the Reason names the H100s' lack of NVENC
    (before, it blamed CPUs and memory: "3 GPUs are free, but not with 1 CPUs and 4 GiB")."""
    from builders import running

    nodes = cluster(1, 3, model="H100-SXM") + cluster(1, 2, model="L40S", start=1)
    busy = running("train", ("n01", [0]))
    enc = pjob("enc", {"gpu_engines": (("nvenc", 1),)}, gpus=2)
    r = cycle(nodes, [enc], [busy]).reasons["enc"]
    assert r.code is ReasonCode.RESOURCES and r.data["free_without_engines"] == 3
    assert (
        r.message
        == "needs 2 GPUs with NVENC; 1 free with it; the other 3 free (H100-SXM) have none"
    )
    both = running("train", ("n01", [0, 1]))
    r = cycle(nodes, [replace(enc, spec=replace(enc.spec, gpus_per_worker=1))], [both]).reasons[
        "enc"
    ]
    assert r.message == "needs 1 GPU with NVENC; the 3 free GPUs are H100-SXM, which have none"
    # a GPU with the engine free: placed, no Reason
    assert (
        "enc"
        not in cycle(
            nodes, [replace(enc, spec=replace(enc.spec, gpus_per_worker=1))], [busy]
        ).reasons
    )


def test_a_share_with_an_engine_waiting_beside_room_on_gpus_without_it_is_told_so() -> None:
    """A video job (a quarter GPU and NVENC) while the L40S is held whole and H100s have room:
    the Reason names the H100s (before: "no node has that free now")."""
    from builders import running

    nodes = cluster(1, 3, model="H100-SXM") + cluster(1, 1, model="L40S", start=1)
    vid = pjob("vid", {"gpu_engines": (("nvenc", 1),)}, gpus=1, milli=250)
    r = cycle(nodes, [vid], [running("train", ("n01", [0]))]).reasons["vid"]
    assert r.code is ReasonCode.RESOURCES and r.data["nodes_with_room_without_engines"] == 1
    assert r.message.startswith(
        "needs 0.25 GPU with NVENC; no GPU with it has that free now, and the GPUs with room "
        "have none (H100-SXM (1 node))"
    )
