"""The Slurm shims' pure parts: installing them, sacct's layouts, squeue's -O, the shared
selection's view of ended states (against a live controller: tests/e2e/test_slurm_shims_live.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.cli import selection
from gpufleet.client.lean import Row
from gpufleet.io import squeue_command
from gpufleet.model.job import TERMINAL
from gpufleet.shims import install as shims
from gpufleet.shims import sacct
from gpufleet.shims.common import Usage


def test_ended_states_are_the_models() -> None:
    assert {s.value for s in TERMINAL} == selection.ENDED


def test_install_writes_runnable_shims_and_uninstall_removes_only_them(tmp_path: Path) -> None:
    (tmp_path / "mine").write_text("keep me")
    written = shims.install(tmp_path)
    assert {p.name for p in written} >= {"sbatch", "squeue", "scancel", "sinfo", "sacct"}
    r = subprocess.run([str(tmp_path / "squeue"), "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("usage: squeue"), r.stderr
    assert (tmp_path / "sacct").read_text().startswith(f"#!{sys.executable} -S\n")
    removed = shims.uninstall(tmp_path)
    assert {p.name for p in removed} == {p.name for p in written}
    assert [p.name for p in tmp_path.iterdir()] == ["mine"]


def test_install_keeps_a_real_slurm_command(tmp_path: Path) -> None:
    real = tmp_path / "sbatch"
    real.write_text('#!/bin/sh\nexec /usr/bin/real-sbatch "$@"\n')
    with pytest.raises(ValueError, match="not a gpufleet shim"):
        shims.install(tmp_path)
    assert real.read_text().startswith("#!/bin/sh")
    assert not (tmp_path / "squeue").exists()  # nothing half done
    shims.install(tmp_path, force=True)
    assert shims.ours(real)
    shims.uninstall(tmp_path)
    assert not real.exists()


def _job(**kw: object) -> Row:
    base: dict[str, object] = {
        "id": "12", "name": "train", "user": "ana", "queue": "default", "state": "SUCCEEDED",
        "attempt": 1, "retries_used": 0, "submit_time": 100.0, "start_time": 110.0,
        "end_time": 3710.0, "gpus": 2.0, "workers": 1,
        "spec": Row(cpus=4, memory_mib=1024, time_limit_s=7200.0, max_retries=0),
        "placement": [Row(node="n1")], "reason": None, "array_id": None, "array_index": None,
    }  # fmt: skip
    base.update(kw)
    return Row(base)


def _render(jobs: list[Row], fmt: str, **kw: object) -> str:
    known = sacct.fields(now=5000.0)
    rows = [(j, None) for j in jobs]
    opts: dict[str, object] = {"header": True, "sep": None, "trailing": False}
    opts.update(kw)
    return sacct.render(rows, sacct.parse_format(fmt, known), known, **opts)  # type: ignore[arg-type]


def test_sacct_parsable_fields_and_states() -> None:
    jobs = [
        _job(),
        _job(id="13", state="FAILED", array_id="13", array_index=0, placement=[]),
        _job(id="14", state="FAILED", spec=Row(max_retries=2), start_time=None, end_time=None),
        _job(id="15", state="STARTING", end_time=None),
    ]
    out = _render(jobs, "JobID,State,ExitCode,Elapsed,NodeList,AllocTRES,Timelimit", sep="|")
    assert out.splitlines() == [
        "JobID|State|ExitCode|Elapsed|NodeList|AllocTRES|Timelimit",
        "12|COMPLETED|0:0|01:00:00|n1|cpu=4,mem=1024M,node=1,gres/gpu=2|02:00:00",
        "13_0|FAILED|1:0|01:00:00|None assigned||02:00:00",
        "14|REQUEUED|1:0|00:00:00|n1|cpu=1,node=1,gres/gpu=2|UNLIMITED",
        "15|RUNNING|0:0|01:21:30|n1|cpu=4,mem=1024M,node=1,gres/gpu=2|02:00:00",
    ]
    trailing = _render(jobs[:1], "JobID,State", sep="|", trailing=True, header=False)
    assert trailing == "12|COMPLETED|\n"


def test_sacct_fixed_width_cuts_with_a_plus() -> None:
    out = _render([_job(name="a-very-long-job-name")], "JobID,JobName%8,State")
    lines = out.splitlines()
    assert lines[0] == "JobID         JobName      State "
    assert lines[1] == "------------ -------- ---------- "
    assert lines[2] == "12           a-very-+  COMPLETED "


def test_sacct_exit_code_from_the_events() -> None:
    j = _job(state="FAILED", events=[Row(why="rank 0 exited with code 3")])
    assert _render([j], "ExitCode", sep="|", header=False) == "3:0\n"
    j = _job(state="FAILED", events=[Row(why="rank 0 exited with code -9")])
    assert _render([j], "ExitCode", sep="|", header=False) == "0:9\n"


def test_sacct_refuses_unknown_fields_all_at_once() -> None:
    with pytest.raises(Usage, match="'Bogus', 'Nope'"):
        sacct.parse_format("JobID,Bogus,Nope", sacct.fields(0.0))


def test_squeue_capital_o_is_squeues_fields() -> None:
    # nothing between the fields, and JobID the job's own id (JobArrayID: 6_1), as Slurm 22.05
    assert squeue_command.fields_format("JobID:10,State,Name:.8") == "%10A%20T%.8j"
    assert squeue_command.fields_format("JobArrayID,ArrayJobID") == "%20i%20F"
    with pytest.raises(squeue_command.Usage, match="invalid field Bogus"):
        squeue_command.fields_format("JobID,Bogus")


def test_the_shims_import_neither_typer_nor_httpx_nor_pydantic_nor_rich() -> None:
    code = (
        "import sys\n"
        "import gpufleet.shims.sacct, gpufleet.shims.scancel, gpufleet.shims.sinfo\n"
        "import gpufleet.shims.squeue, gpufleet.shims.sbatch\n"
        "heavy = ('typer', 'httpx', 'pydantic', 'rich', 'yaml')\n"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]"


def test_a_partition_list_shows_as_slurms_partition_string() -> None:
    # sbatch -p a,b: "a,b" while pending, only the partition used once started ("b"), as
    # Slurm 22.05 prints it
    from gpufleet.io import slurm_style

    pending = _job(state="PENDING", queue="a", spec=Row(queues=["a", "b"]), start_time=None)
    ran = _job(queue="b", spec=Row(queues=["a", "b"], cpus=1))
    plain = _job(queue="gpu")
    assert [slurm_style.partitions(j) for j in (pending, ran, plain)] == ["a,b", "b", "gpu"]
    assert _render([ran, plain], "Partition", sep="|", header=False) == "b\ngpu\n"
    out = slurm_style.render("%P", [pending], header=False, now=5000.0)
    assert out == "a,b\n"
    assert slurm_style.in_partitions(pending, {"b"}) and not slurm_style.in_partitions(plain, {"b"})
    # squeue -p a: not the job that runs in b (Slurm 22.05 lists it under b only)
    assert slurm_style.in_partitions(ran, {"b"}) and not slurm_style.in_partitions(ran, {"a"})


def test_sbatch_reads_a_wrap_script_without_the_whole_model_or_http_client() -> None:
    """The #SBATCH reader needs the spec's limits (``model/limits.py``), not the model that
    ``gpufleet.model`` used to import whole; the lean client speaks HTTP itself (issue 12)."""
    code = (
        "import sys\n"
        "import gpufleet.shims.sbatch, gpufleet.shims.common\n"
        "from gpufleet.io import sbatch\n"
        "from gpufleet.io.export import submit_context\n"
        "job = sbatch.parse_sbatch_text('#!/bin/sh\\n#SBATCH -J x --gres=gpu:2 -t 10\\ntrue\\n',"
        " source='--wrap', args=[], options=['--signal=B:USR1@60', '--nodelist=n[1-3]'])\n"
        "assert job.spec['name'] == 'x', job.spec\n"
        "heavy = ('gpufleet.model.job', 'gpufleet.model.catalog', 'gpufleet.model.constraint',\n"
        "         'gpufleet.model.container', 'difflib', 'http.client', 'email', 'ssl')\n"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]"


def test_a_wrap_job_is_named_wrap_as_slurm_names_it() -> None:
    """sbatch --wrap names the job ``wrap`` (Slurm 22.05: ``JobName=wrap``), not ``--wrap``;
    -J still wins."""
    from gpufleet.io import sbatch_command

    def read(argv: list[str]) -> dict[str, object]:
        return sbatch_command.read(argv, script=lambda p: "", environ={}, cwd="/tmp", host="h").spec

    assert read(["--wrap=true"])["name"] == "wrap"
    assert read(["-J", "x", "--wrap=true"])["name"] == "x"


def test_node_lists_are_compressed_as_slurm_prints_them() -> None:
    """sacct's NodeList and squeue's %N/%R: ``gpu-[01-02]`` as Slurm prints a job's nodes (in
    Slurm's order, by number), not ``gpu-02,gpu-01``."""
    from gpufleet.io import slurm_style

    j = _job(placement=[Row(node="gpu-02"), Row(node="gpu-01"), Row(node="gpu-10")])
    assert _render([j], "NodeList", sep="|", header=False) == "gpu-[01-02,10]\n"
    assert _render([j], "NodeList%30", header=False).strip() == "gpu-[01-02,10]"
    out = slurm_style.render("%N|%R", [j], header=False, now=5000.0)
    assert out == "gpu-[01-02,10]|gpu-[01-02,10]\n"


def test_squeue_start_lists_pending_jobs_by_expected_start() -> None:
    # Slurm's squeue --start: pending jobs only, its own format, soonest expected start first
    from gpufleet.io import slurm_style

    q = squeue_command.read(["--start"], "ana")
    assert q.fmt == squeue_command.START_FORMAT and q.wanted == {"PENDING"} and q.by_start
    assert squeue_command.read(["--start", "-t", "all"], "ana").wanted is None
    later = _job(id="21", state="PENDING", start_time=None, placement=[],
                 reason=Row(code="Priority", estimated_start=7200.0))  # fmt: skip
    sooner = _job(id="22", state="PENDING", start_time=None, placement=[],
                  reason=Row(code="Resources", estimated_start=3600.0))  # fmt: skip
    unknown = _job(id="23", state="PENDING", start_time=None, placement=[],
                   reason=Row(code="Dependency", estimated_start=None))  # fmt: skip
    rows = squeue_command.by_start([later, unknown, sooner])
    assert [j.id for j in rows] == ["22", "21", "23"]
    out = slurm_style.render("%.5i %.19S %20Y %R", rows, header=True).splitlines()
    assert out[0].split() == ["JOBID", "START_TIME", "SCHEDNODES", "NODELIST(REASON)"]
    assert out[1].split()[1] == slurm_style.start_iso(3600.0)
    assert out[3].split()[1:] == ["N/A", "(null)", "(Dependency)"]
