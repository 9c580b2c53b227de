"""Every problem of a job spec at once (issue 23): a YAML with four mistakes gets four errors in
one answer, each with its line and column and, for an unknown key or value, the known one it is
closest to; ``gpufleet spec check`` runs the checks of ``submit -f`` (no ``user:`` needed);
nothing is sent. (The API's answer: tests/integration/test_api_refusals.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_cli_support import FakeApi, api, cli

from gpufleet.model.errors import SpecError, SpecErrors, each
from gpufleet.model.job import JobSpec

__all__ = ["api"]  # the fixture, imported for pytest

FOUR = """\
name: train
gpus_per_workr: 2
topology:
  level: nodd
max_retries: three
open_mode: apend
command: [python, train.py]
"""


def four_errors(f: Path) -> list[str]:
    return [
        f"{f}:2:1: gpus_per_workr: unknown key (did you mean 'gpus_per_worker'?)",
        f"{f}:4:3: topology.level: must be one of node, leaf, pod, any; got 'nodd' "
        "(did you mean 'node'?)",
        f"{f}:5:1: max_retries: must be an integer, got 'three'",
        f"{f}:6:1: open_mode: must be one of truncate, append; got 'apend' "
        "(did you mean 'append'?)",
    ]


def test_four_mistakes_four_errors_in_one_answer_and_nothing_sent(
    api: FakeApi, tmp_path: Path
) -> None:
    f = tmp_path / "four.yaml"
    f.write_text(FOUR)
    r = cli("submit", "-f", str(f))
    assert r.code == 2
    lines = r.stderr.removeprefix("error: ").splitlines()
    assert lines[:4] == four_errors(f), r.stderr
    assert api.requests == []


def test_spec_check_runs_the_checks_of_submit(tmp_path: Path) -> None:
    f = tmp_path / "four.yaml"
    f.write_text(FOUR)
    r = cli("spec", "check", str(f))
    assert r.code == 1
    assert [x.removeprefix("error: ") for x in r.stderr.splitlines()] == four_errors(f)
    ok = tmp_path / "ok.yaml"  # no user: as submit, the submitter's
    ok.write_text("name: a\ncommand: [x]\n")
    r = cli("spec", "check", str(ok))
    assert r.code == 0, r.stderr
    assert r.stdout == f"{ok}: 1 job spec\n"


def test_every_job_of_a_file_at_once_in_the_files_order(api: FakeApi, tmp_path: Path) -> None:
    f = tmp_path / "jobs.yaml"
    f.write_text(
        "jobs:\n  - {name: a, workers: 0, command: x}\n  - {name: b, cpu: 2, command: y}\n"
    )
    r = cli("submit", "-f", str(f))
    assert r.code == 2
    assert f"{f}:2:15: jobs[0].workers: must be at least 1, got 0" in r.stderr
    assert f"{f}:3:15: jobs[1].cpu: unknown key (did you mean 'cpus'?)" in r.stderr
    assert api.requests == []


def test_a_spec_reads_on_past_each_problem() -> None:
    bad = {"user": "u", "gpus_per_workr": 2, "topology": "nodd", "max_retries": "x",
           "time_limit_s": -1, "command": ["x"]}  # fmt: skip
    with pytest.raises(SpecErrors) as e:
        JobSpec.from_dict(bad, source="r")
    fields = sorted(x.field for x in e.value.errors)
    # the name is required: told, and a placeholder lets the rest be read
    assert fields == ["gpus_per_workr", "max_retries", "name", "time_limit_s", "topology.level"]
    assert bad["topology"] == "nodd"  # the input is not changed
    spec, problems = JobSpec.read_all({"name": "a", "user": "u", "workers": 0}, source="r")
    assert spec is not None and spec.workers == 1  # the rest, read with defaults
    assert [p.field for p in problems] == ["workers"]
    one: SpecError = SpecError("x", field="f")
    assert each(one) == (one,)


def test_a_cluster_spec_at_once_with_lines(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(
        "name: lab\npools:\n  - {name: a, count: 1, gpu_model: H100-SXM, gpus: eight,"
        " cpu_cores: 8, memory_gib: 64}\n  - {name: b, count: 1, gpu_model: H10, gpus: 8,"
        " cpu_cores: 8, memory_gib: 64}\n"
    )
    r = cli("spec", "check", str(f))
    assert r.code == 1
    lines = [x.removeprefix("error: ") for x in r.stderr.splitlines()]
    assert lines[0] == f"{f}:3:46: pools[0].gpus: must be an integer, got 'eight'", lines
    assert lines[1].startswith(f"{f}:4:25: pools[1].gpu_model: unknown GPU model 'H10'"), lines
    assert len(lines) == 2  # not "the cluster has no nodes": that is theirs
