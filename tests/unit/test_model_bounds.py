"""Every string and number a JobSpec, a cluster or a queue is read from is bounded: no NUL, no
lone surrogate, finite numbers of a sane size; each refusal names its field. The YAML loaders,
#SBATCH scripts and the CLI read through the same ``Fields``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpufleet.io.sbatch import parse_sbatch_text
from gpufleet.io.specs import load_jobs
from gpufleet.model.errors import SpecError
from gpufleet.model.job import JobSpec
from gpufleet.model.queue import QueueSpec

BASE: dict[str, Any] = {"name": "j", "user": "u", "command": ["echo", "hi"]}

BAD = [
    ({"command": ["echo", "a\x00b"]}, "command[1]"),
    ({"command": "echo \x00"}, "command"),
    ({"env": {"FOO": "a\x00b"}}, "env.FOO"),
    ({"env": {"FOO": "\ud800"}}, "env.FOO"),
    ({"env": {"A=B": "1"}}, "env.A=B"),
    ({"env": {"F": float("nan")}}, "env.F"),
    ({"name": "a\x00"}, "name"),
    ({"name": "\udc80x"}, "name"),
    ({"name": "n" * 300}, "name"),
    ({"queue": "q\x00"}, "queue"),
    ({"gpu_models": ["H100\x00"]}, "gpu_models[0]"),
    ({"cpus": float("nan")}, "cpus"),
    ({"cpus": float("inf")}, "cpus"),
    ({"cpus": 1e308}, "cpus"),
    ({"cpus": 10**400}, "cpus"),
    ({"memory_gib": float("inf")}, "memory_gib"),
    ({"memory_gib": 1e306}, "memory_gib"),
    ({"memory_mib": 2**70}, "memory_mib"),
    ({"time_limit_s": 1e300}, "time_limit_s"),
    ({"dataset": "d\x00"}, "dataset"),
    ({"command": ["x" * (300 * 1024)]}, "command[0]"),
]


@pytest.mark.parametrize(("extra", "field"), BAD, ids=[f for _, f in BAD])
def test_a_bad_value_is_refused_naming_its_field(extra: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as e:
        JobSpec.from_dict({**BASE, **extra}, source="request", path="spec")
    assert e.value.field == f"spec.{field}", e.value


def test_a_queue_refuses_nan_and_huge_quotas() -> None:
    for raw, field in [
        ({"name": "q", "weight": float("nan")}, "queues[0].weight"),
        ({"name": "q", "quota": {"gpus": float("inf")}}, "queues[0].quota.gpus"),
        ({"name": "q", "quota": {"gpus": 1e306}}, "queues[0].quota.gpus"),
        ({"name": "q\x00"}, "queues[0].name"),
    ]:
        with pytest.raises(SpecError) as e:
            QueueSpec.from_dict(raw, source="q.yaml", path="queues[0]")
        assert e.value.field == field


def test_a_yaml_job_with_a_nul_escape_is_refused_naming_file_and_field(tmp_path: Path) -> None:
    p = tmp_path / "job.yaml"
    p.write_text('name: j\nuser: u\ncommand: ["echo", "a\\0b"]\n')  # YAML's \0 is a NUL
    with pytest.raises(SpecError) as e:
        load_jobs(p)
    assert e.value.source == f"{p}:3:19" and e.value.field == "command[1]"  # line:column
    # large but sane values still pass: a probe program, a fat node's memory
    p.write_text(
        f"name: j\nuser: u\nmemory_gib: 2048\ncpus: 96\ncommand: [python3, -c, {'x' * 60_000}]\n"
    )
    (spec,) = load_jobs(p)
    assert spec.memory_mib == 2048 * 1024 and spec.cpu_milli == 96_000


def test_an_sbatch_script_with_a_nul_is_refused_at_its_line() -> None:
    with pytest.raises(SpecError) as e:
        parse_sbatch_text("#!/bin/sh\n#SBATCH -N 1\necho a\x00b\n", source="job.sh")
    assert e.value.field == "line 3" and "NUL" in str(e.value)


def test_an_sbatch_array_is_sized_from_its_text() -> None:
    with pytest.raises(SpecError) as e:
        parse_sbatch_text("#!/bin/sh\n#SBATCH --array=0-1000000000\necho\n", source="job.sh")
    assert e.value.field == "line 2" and "more than 1001 tasks" in str(e.value)
    script = "#!/bin/sh\n#SBATCH --array=0-20\necho\n"
    with pytest.raises(SpecError):
        parse_sbatch_text(script, source="job.sh", max_array_size=10)
    assert parse_sbatch_text(script, source="job.sh").array == "0-20"


def test_a_queues_priority_max_is_read_kept_and_bounded() -> None:
    from gpufleet.model.errors import SpecError
    from gpufleet.model.queue import QueueSpec
    from gpufleet.server.store.codec import queue_from_dict, queue_to_dict

    q = QueueSpec.from_dict({"name": "gpu", "priority_max": 100}, source="q.yaml", path="")
    assert q.priority_max == 100 and queue_from_dict(queue_to_dict(q)) == q
    assert QueueSpec.from_dict({"name": "gpu"}, source="q.yaml", path="").priority_max is None
    with pytest.raises(SpecError, match="priority_max"):
        QueueSpec.from_dict({"name": "gpu", "priority_max": -1}, source="q.yaml", path="")
