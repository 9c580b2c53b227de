"""The #SBATCH reader against a corpus of scripts in the styles sites and projects publish:
each script's fields as sbatch makes them (tests/unit/sbatch_corpus/expected.yaml, worked out
from Slurm's documentation and source) against what ``read_request`` makes of it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from bench.sbatch_corpus import FIELDS, check, fields, run, score, table
from gpufleet.io.sbatch import SbatchError, parse_sbatch, read_request, read_script
from gpufleet.io.sbatch.script import parse_sbatch_text
from gpufleet.model.errors import SpecError
from gpufleet.model.job import JobSpec

CORPUS = Path(__file__).parent / "sbatch_corpus"
EXPECTED: dict[str, dict[str, Any]] = yaml.safe_load((CORPUS / "expected.yaml").read_text())


def test_every_script_has_an_expectation_and_the_corpus_is_big_enough() -> None:
    scripts = {p.name for p in CORPUS.iterdir() if p.name[0] != "." and p.suffix != ".yaml"}
    assert scripts == set(EXPECTED)
    assert len(scripts) >= 50
    refused = [k for k, e in EXPECTED.items() if e.get("accepted") is False]
    assert 5 <= len(refused) < len(scripts) / 3


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_reader_makes_of_each_script_what_sbatch_makes_of_it(name: str) -> None:
    r = check(CORPUS / name, EXPECTED[name] or {})
    assert r.wrong == {}, f"{name}: (got, sbatch) per field: {r.wrong}; errors: {r.errors}"


def test_the_corpus_score(capsys: pytest.CaptureFixture[str]) -> None:
    results = run(CORPUS)
    with capsys.disabled():
        print(f"\nsbatch corpus ({len(results)} scripts):\n{table(results)}")
    assert score(results) >= 0.95
    assert not [r.script for r in results if r.expected_accepted and not r.accepted]


def test_a_wrong_field_is_seen_so_the_score_can_fail(tmp_path: Path) -> None:
    (tmp_path / "a.sh").write_text("#!/bin/bash\n#SBATCH --time=10\n#SBATCH -N 2\ntrue\n")
    (tmp_path / "expected.yaml").write_text("a.sh:\n  time: 11\n  nodes: '2'\n  ntasks: 2\n")
    [r] = run(tmp_path)
    assert set(r.wrong) == {"time"} and r.wrong["time"] == (10, 11)
    assert score([r]) == pytest.approx((len(FIELDS) + 1 - 1) / (len(FIELDS) + 1))


@pytest.mark.parametrize(
    "name", sorted(k for k, e in EXPECTED.items() if e.get("accepted") is False)
)
def test_refusals_are_short_and_name_the_file_and_line(name: str) -> None:
    path = CORPUS / name
    with pytest.raises(SbatchError) as e:
        read_request(read_script(path), source=str(path))
    for line in str(e.value).splitlines():
        assert line.startswith(f"{path}:"), line
        assert len(line) - len(str(path)) < 180, line  # no list of every option
        assert line.count("'--") < 12, line  # glibc's possibilities, not the table


def test_a_dos_script_is_refused_from_its_file_too(tmp_path: Path) -> None:
    """Reading the file must not turn \\r\\n into \\n before sbatch's check sees it."""
    f = tmp_path / "win.sh"
    f.write_bytes(b"#!/bin/bash\r\n#SBATCH --time=10\r\ntrue\r\n")
    with pytest.raises(SbatchError, match="DOS line breaks"):
        parse_sbatch(f)
    assert "\r\n" in read_script(f)


def test_options_after_a_stray_word_are_named_once_not_each() -> None:
    text = "#!/bin/bash\n#SBATCH --nice 5\n#SBATCH --time=10\n#SBATCH -N 2\ntrue\n"
    with pytest.raises(SbatchError) as e:
        read_request(text, source="j.sh")
    assert str(e.value).splitlines() == [
        "j.sh:2: Invalid directive found in batch script: 5 (the options after it, from "
        "line 3, are not read)"
    ]


def test_fields_of_a_request() -> None:
    text = "#!/bin/bash\n#SBATCH -N 2-4 --gpus-per-node=a100:2 --mem-per-gpu=10G -t 1-0\ntrue\n"
    got = fields(read_request(text, source="dir/x.sh"))
    assert got["nodes"] == "2-4" and got["gpus"] == "node:a100:2"
    assert (got["mem"], got["time"], got["name"]) == ("gpu:10240", 1440, "x.sh")


@pytest.mark.parametrize(
    ("directive", "nodes", "gpus"),
    [
        ("-N 2-", (2, 2), ()),  # _str_to_nodes: no digits after '-' is no maximum
        ("--gpus-per-node=a100", (1, 1), ("a100", 1)),  # a type alone is one GPU
        ("--oom-kill-step", (1, 1), ()),  # Slurm 24.11, optional value
        ("--oom-kill-step=0", (1, 1), ()),
        ("--gres-flags=allow-task-sharing", (1, 1), ()),  # Slurm 23.11
    ],
)
def test_what_newer_or_looser_sbatch_accepts(
    directive: str, nodes: tuple[int, int], gpus: tuple[str, int]
) -> None:
    req = read_request(f"#!/bin/bash\n#SBATCH {directive}\ntrue\n", source="x.sh")
    assert req.nodes == nodes
    assert [(g.type, g.count) for g in req.gpus_per_node] == ([gpus] if gpus else [])


def test_a_bad_oom_kill_step_is_refused() -> None:
    with pytest.raises(SbatchError, match="Invalid --oom-kill-step specification"):
        read_request("#!/bin/bash\n#SBATCH --oom-kill-step=2\ntrue\n", source="x.sh")


@pytest.mark.parametrize(
    ("text", "why"),
    [("", "Batch script is empty!"), (" \n\t\n", "Batch script contains only whitespace!")],
)
def test_an_empty_script_is_refused_with_sbatchs_words(text: str, why: str) -> None:
    with pytest.raises(SbatchError) as e:
        read_request(text, source="e.sh")
    assert str(e.value) == f"e.sh:1: {why}"


def _warnings(*directives: str) -> tuple[str, ...]:
    text = "#!/bin/bash\n" + "".join(f"#SBATCH {d}\n" for d in directives) + "true\n"
    return read_request(text, source="w.sh").warnings


def test_what_newer_sbatch_refuses_in_its_gres_check_is_said_not_refused() -> None:
    """Scripts written for an older Slurm still read; the warning names the line."""
    [w] = _warnings("--gpus-per-task=1", "--cpus-per-task=8")
    assert w.startswith("w.sh:2: --gpus-per-task=1 without -n/--ntasks or --gpus")
    assert _warnings("-n 2", "--gpus-per-task=1") == ()
    assert _warnings("-N 2", "--ntasks-per-node=4", "--gpus-per-task=1") == ()  # tasks set
    [w] = _warnings("-n 4", "--gres=gpu:a100:4", "--gpus-per-task=1")
    assert w.startswith("w.sh:4: GPUs asked for with and without a type")
    assert _warnings("-n 4", "--gres=gpu:a100:4", "--gpus-per-task=a100:1") == ()


def test_sbatchs_own_warning_about_the_node_count_is_kept() -> None:
    [w] = _warnings("-N 4", "-n 2")
    assert "can't run 2 processes on 4 nodes, setting nnodes to 2" in w


@pytest.mark.parametrize(
    ("directive", "message"),
    [
        (
            "--workdir=/scratch",
            "unrecognized option '--workdir=/scratch' (removed in Slurm 17.11: use --chdir)",
        ),
        (
            "--gpus-per-nodes=2",
            "unrecognized option '--gpus-per-nodes=2' (did you mean --gpus-per-node?)",
        ),
        ("--memory=4G", "unrecognized option '--memory=4G'"),
    ],
)
def test_an_unknown_option_says_what_to_write_when_it_can(directive: str, message: str) -> None:
    with pytest.raises(SbatchError) as e:
        read_request(f"#!/bin/bash\n#SBATCH {directive}\ntrue\n", source="u.sh")
    assert str(e.value) == f"u.sh:2: {message}"


def test_a_latin1_script_reads_as_sbatch_reads_it(tmp_path: Path) -> None:
    """sbatch takes any bytes; gpufleet reads the directives, and says at submit time, with the
    line, that it cannot run text that is not Unicode."""
    f = tmp_path / "latin1.sh"
    f.write_bytes(b"#!/bin/bash\n# r\xe9sum\xe9 du calcul\n#SBATCH --time=10\ntrue\n")
    assert read_request(read_script(f), source=str(f)).time_limit == 10
    with pytest.raises(SpecError) as e:
        parse_sbatch(f)
    assert e.value.field == "line 2" and "valid Unicode" in str(e.value)


# What gpufleet still cannot run of the scripts sbatch accepts, each refused naming what
CANNOT_RUN = {
    "08-megatron-gpt.sh": "singleton is not supported",
    "12-dependency-after-delay.sh": "after is not supported",
    "39-node-range.sh": "2 to 4 nodes",
    "58-slurm-array-dependency-corr.sh": "aftercorr is not supported",
    "71-nodes-tasks-per-node-range.sh": "2 to 4 nodes",
    "73-mixed-gpu-ways.sh": "more than one way",
}


@pytest.mark.parametrize("name", sorted(k for k, e in EXPECTED.items() if e.get("accepted", True)))
def test_gpufleet_runs_what_sbatch_accepts_but_the_few_it_names(name: str) -> None:
    if name not in CANNOT_RUN:
        parse_sbatch(CORPUS / name)
        return
    with pytest.raises(SpecError, match="gpufleet cannot run this yet") as e:
        parse_sbatch(CORPUS / name)
    assert CANNOT_RUN[name] in str(e.value)


@pytest.mark.parametrize(("value", "kill"), [("yes", True), ("NO", False), (None, None)])
def test_kill_on_invalid_dep_is_the_jobs_own_choice(value: str | None, kill: bool | None) -> None:
    """sbatch's ``--kill-on-invalid-dep=yes|no`` (ADR 0072): the spec's ``kill_invalid_dep``,
    no warning; absent, the controller's ``--kill-invalid-depend`` decides."""
    opt = f"#SBATCH --kill-on-invalid-dep={value}\n" if value else ""
    job = parse_sbatch_text(f"#!/bin/bash\n{opt}#SBATCH -d afterok:7\ntrue\n", source="k.sh")
    assert job.spec.get("kill_invalid_dep") == kill and not job.warnings
    assert JobSpec.from_dict({**job.spec, "user": "u"}).kill_invalid_dep is kill
    with pytest.raises(SbatchError, match="Invalid --kill-on-invalid-dep specification"):
        read_request("#!/bin/bash\n#SBATCH --kill-on-invalid-dep=maybe\ntrue\n", source="k.sh")


def test_tasks_with_gpus_per_node_and_no_nodes_run_packed_on_one_node() -> None:
    """``-n 4 --gres gpu:1 --mem 16G``: Slurm 22.05 (shared/tools/slurm_local.sh) chooses the
    node count, one node (cpu=4, mem=16G, one GPU) when one has room, two when none has, each
    with gpu:1 and the memory; gpufleet runs the tasks on one node and says so."""
    job = parse_sbatch(CORPUS / "91-ntasks-gres-mem-no-nodes.sh")
    s = job.spec
    assert (s["workers"], s["tasks_per_worker"], s["gpus_per_worker"]) == (1, 4, 1)
    assert (s["cpus"], s["memory_mib"]) == (4, 16384)
    assert "distinct_nodes" not in s
    [note] = [w for w in job.warnings if "no --nodes" in w]
    assert (
        note.endswith("give --nodes to spread them") and ":3: --ntasks 4 with --gres gpu:1" in note
    )
