"""pyxis's #SBATCH --container-image, --container-mounts and --container-workdir become the
job spec's ``container``; a bad one is refused naming its line."""

from __future__ import annotations

import pytest

from gpufleet.io.sbatch import parse_sbatch_text
from gpufleet.model.container import Mount
from gpufleet.model.errors import SpecError
from gpufleet.model.job import JobSpec


def script(*directives: str):  # type: ignore[no-untyped-def]
    text = "\n".join(["#!/bin/bash", *(f"#SBATCH {d}" for d in directives), "", "python t.py"])
    return parse_sbatch_text(text, source="job.sh")


def test_pyxis_options_become_the_container() -> None:
    job = script(
        # quoted: a "#" outside quotes starts a comment in an #SBATCH line, as in Slurm
        '--container-image="nvcr.io#nvidia/pytorch:24.05-py3"',
        "--container-mounts=/data:/data:ro,/scratch",
        "--container-workdir /data",
    )
    assert job.spec["container"] == {
        "image": "nvcr.io#nvidia/pytorch:24.05-py3",
        "mounts": "/data:/data:ro,/scratch",
        "workdir": "/data",
    }
    assert not job.warnings  # honoured, not "has no effect"
    c = JobSpec.from_dict({"user": "u", **job.spec}).container
    assert c is not None and c.image == "nvcr.io#nvidia/pytorch:24.05-py3"
    assert c.mounts == (Mount("/data", "/data", True), Mount("/scratch", "/scratch"))
    assert c.workdir == "/data"
    assert "container" not in script("--time=5").spec
    # a prefix sbatch's getopt takes (pyxis's options are long ones only)
    assert script("--container-im=img:1").spec["container"]["image"] == "img:1"


@pytest.mark.parametrize(
    ("directives", "says"),
    [
        (("--container-mounts=/a:/b",), "--container-mounts=/a:/b needs --container-image"),
        (("--container-image=i", "--container-mounts=rel:/b"), "container.mounts[0].source"),
        (("--container-image=i", "--container-mounts=/a:/b:rx"), "unknown mount flag 'rx'"),
        (("--container-image=i", "--container-workdir=w"), "must be an absolute path"),
    ],
)
def test_a_bad_container_option_is_refused_on_its_line(
    directives: tuple[str, ...], says: str
) -> None:
    with pytest.raises(SpecError) as e:
        script(*directives)
    assert says in str(e.value)
    assert e.value.source == "job.sh" and e.value.field.startswith("line ")


def test_pyxis_options_gpufleet_does_not_act_on_are_read_with_a_warning() -> None:
    job = script("--container-image=i", "--container-name=x", "--no-container-mount-home")
    assert job.spec["container"]["image"] == "i"
    assert len(job.warnings) == 2
    assert all("has no effect here" in w for w in job.warnings)
