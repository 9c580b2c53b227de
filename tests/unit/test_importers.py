"""Importers (issue 14): Slurm's ``sacct --parsable2``, Alibaba PAI 2020 and SenseTime Helios,
each on a small sample written here (made up for these tests, in the formats' documented
columns); what they keep, what they leave out, and errors that name the file, line and column.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.cli.simulate import app
from gpufleet.model.errors import SpecError
from gpufleet.model.resources import MILLI
from gpufleet.sim.engine import TraceJob
from gpufleet.sim.traces import load_trace


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def loaded(path: Path, fmt: str) -> tuple[dict[str, TraceJob], list[str]]:
    notes: list[str] = []
    jobs = load_trace(path, fmt, notes=notes)
    return {j.id: j for j in jobs}, notes


def refused(path: Path, fmt: str) -> SpecError:
    with pytest.raises(SpecError) as info:
        load_trace(path, fmt)
    return info.value


def ts(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


# ----- sacct --parsable2 --------------------------------------------------------------------

SACCT_HEAD = (
    "JobID|JobName|User|Partition|State|Submit|Start|End|Elapsed|Timelimit|NNodes|AllocTRES|"
    "ReqTRES\n"
)
SACCT = SACCT_HEAD + "\n".join(
    [
        # a two-node gang of 16 GPUs, with its steps
        "100|pretrain|ana|gpu|COMPLETED|2025-03-01T10:00:00|2025-03-01T10:00:30|"
        "2025-03-01T12:00:30|02:00:00|1-00:00:00|2|billing=64,cpu=64,gres/gpu=16,mem=512G,node=2|"
        "billing=64,cpu=64,gres/gpu=16,mem=512G,node=2",
        "100.batch|batch||||2025-03-01T10:00:30|2025-03-01T10:00:30|2025-03-01T12:00:30|"
        "02:00:00||1|cpu=32,gres/gpu=8,mem=256G,node=1|",
        "100.extern|extern||||2025-03-01T10:00:30|2025-03-01T10:00:30|2025-03-01T12:00:30|"
        "02:00:00||2|billing=64,cpu=64,gres/gpu=16,mem=512G,node=2|",
        "100.0|python||||2025-03-01T10:00:31|2025-03-01T10:00:31|2025-03-01T12:00:29|"
        "01:59:58||2|cpu=64,gres/gpu=16,mem=512G,node=2|",
        # array tasks, a typed GRES, cancelled by a user, no limit
        "101_3|sweep|bo|gpu|CANCELLED by 1234|2025-03-01T10:05:00|2025-03-01T10:06:00|"
        "2025-03-01T10:16:00|00:10:00|UNLIMITED|1|cpu=8,gres/gpu:a100=2,mem=64000M,node=1|",
        "101_4|sweep|bo|gpu|TIMEOUT|2025-03-01T10:05:00|2025-03-01T10:07:00|"
        "2025-03-01T10:37:05|00:30:05|30:00|1|cpu=8,gres/gpu:a100=2,mem=64000M,node=1|",
        # a pending array's remaining tasks, a running job, a CPU-only job, never started
        "101_[5-9%2]|sweep|bo|gpu|PENDING|2025-03-01T10:05:00|Unknown|Unknown|00:00:00|"
        "30:00|1||gres/gpu=2,node=1",
        "102|eval|ana|gpu,debug|RUNNING|2025-03-01T11:00:00|2025-03-01T11:00:10|Unknown|"
        "01:00:00|Partition_Limit|1|gres/gpu=1,node=1|",
        "103|prep|ana|cpu|COMPLETED|2025-03-01T09:00:00|2025-03-01T09:00:00|"
        "2025-03-01T09:30:00|00:30:00|01:00:00|1|cpu=4,mem=8G,node=1|",
        "104|x|ana|gpu|CANCELLED by 0|2025-03-01T09:59:00|None|2025-03-01T10:01:00|00:00:00|"
        "01:00:00|1||gres/gpu=4,node=1",
        # ReqTRES only, failed
        "105|y|cy|gpu|FAILED|2025-03-01T10:10:00|2025-03-01T10:10:00|2025-03-01T10:10:45|"
        "00:00:45|2-12|1||cpu=2,gres/gpu=1,mem=1T,node=1",
    ]
)


def test_sacct_keeps_allocations_and_leaves_out_steps_and_what_never_ran(tmp_path: Path) -> None:
    jobs, notes = loaded(write(tmp_path, "sacct.txt", SACCT + "\n"), "sacct")
    assert sorted(jobs) == ["100", "101_3", "101_4", "105"]
    t0 = ts("2025-03-01T10:00:00")  # the first submission kept
    g = jobs["100"]
    assert (g.spec.name, g.spec.user, g.spec.queue) == ("pretrain", "ana", "gpu")
    assert (g.spec.workers, g.spec.gpus_per_worker) == (2, 8)
    assert (g.spec.cpu_milli, g.spec.memory_mib) == (32 * MILLI, 256 * 1024)
    assert (g.submit_time, g.duration_s, g.spec.time_limit_s) == (0.0, 7200.0, 86400.0)
    assert g.recorded is not None
    assert (g.recorded.start_time, g.recorded.state) == (30.0, "SUCCEEDED")
    a3, a4 = jobs["101_3"], jobs["101_4"]
    assert (a3.spec.gpus_per_worker, a3.spec.memory_mib, a3.spec.time_limit_s) == (2, 64000, None)
    assert a3.recorded is not None and a3.recorded.state == "CANCELLED"
    assert a4.recorded is not None and a4.recorded.state == "TIMED_OUT"
    assert (a4.spec.time_limit_s, a4.duration_s) == (1800.0, 1805.0)
    f = jobs["105"]
    assert f.submit_time == ts("2025-03-01T10:10:00") - t0
    assert (f.spec.time_limit_s, f.spec.memory_mib) == (2.5 * 86400, 1024 * 1024)
    assert f.recorded is not None and f.recorded.state == "FAILED"
    assert any("2 job(s): never started" in n for n in notes), notes
    assert any("1 job(s): not ended" in n for n in notes), notes
    assert any("1 job(s): no GPUs" in n for n in notes), notes


def test_sacct_parsable_with_its_trailing_bar_reads_the_same(tmp_path: Path) -> None:
    bars = "\n".join(line + "|" for line in SACCT.splitlines()) + "\n"
    a, _ = loaded(write(tmp_path, "a.txt", SACCT), "sacct")
    b, _ = loaded(write(tmp_path, "b.txt", bars), "sacct")
    assert a == b


@pytest.mark.parametrize(
    ("row", "column", "words"),
    [
        (
            "9|n|u|p|COMPLETED|yesterday|2025-03-01T10:00:00|2025-03-01T10:01:00|00:01:00|"
            "10|1|gres/gpu=1|",
            "Submit",
            "date-time",
        ),
        (
            "9|n|u|p|COMPLETED|2025-03-01T10:00:00|2025-03-01T10:00:00|2025-03-01T10:01:00|"
            "00:01:00|ten|1|gres/gpu=1|",
            "Timelimit",
            "UNLIMITED",
        ),
        (
            "9|n|u|p|COMPLETED|2025-03-01T10:00:00|2025-03-01T10:00:00|2025-03-01T10:01:00|"
            "00:01:00|10|1|gres/gpu=two|",
            "AllocTRES",
            "whole number",
        ),
        (
            "9|n|u|p|COMPLETED|2025-03-01T10:00:00|2025-03-01T10:00:00|2025-03-01T10:01:00|"
            "00:01:00|10|1|gres/gpu=1,mem=lots|",
            "AllocTRES",
            "size",
        ),
        (
            "9|n|u|p|DONE|2025-03-01T10:00:00|2025-03-01T10:00:00|2025-03-01T10:01:00|"
            "00:01:00|10|1|gres/gpu=1|",
            "State",
            "not a Slurm job state",
        ),
        (
            "9|n|u|p|COMPLETED|2025-03-01T10:00:00|2025-03-01T09:00:00|2025-03-01T10:01:00|"
            "00:01:00|10|1|gres/gpu=1|",
            "Start",
            "before",
        ),
        (
            "9x|n|u|p|COMPLETED|2025-03-01T10:00:00|2025-03-01T10:00:00|2025-03-01T10:01:00|"
            "00:01:00|10|1|gres/gpu=1|",
            "JobID",
            "Slurm job id",
        ),
        (
            "9|n|u|p|COMPLETED|2025-03-01T10:00:00|2025-03-01T10:00:00|2025-03-01T10:01:00|"
            "00:01:00|10|0|gres/gpu=1|",
            "NNodes",
            "at least 1",
        ),
    ],
)
def test_sacct_errors_name_file_line_and_column(
    tmp_path: Path, row: str, column: str, words: str
) -> None:
    good = SACCT.splitlines()[1]
    p = write(tmp_path, "sacct.txt", SACCT_HEAD + good + "\n" + row + "\n")
    e = refused(p, "sacct")
    assert (e.source, e.field) == (str(p), f"line 3: {column}")
    assert words in e.reason


def test_sacct_without_its_header_or_tres_is_refused(tmp_path: Path) -> None:
    p = write(tmp_path, "s.txt", "\n".join(SACCT.splitlines()[1:]) + "\n")
    e = refused(p, "sacct")
    assert e.field == "line 1" and "missing column(s) jobid, submit, start, end" in e.reason
    p = write(tmp_path, "t.txt", "JobID|Submit|Start|End\n1|2025-03-01T10:00:00|None|None\n")
    assert "AllocTRES or ReqTRES" in refused(p, "sacct").reason


# ----- Alibaba PAI 2020 ---------------------------------------------------------------------

# pai_job_table: job_name, inst_id, user, status, start_time (submission), end_time
PAI_JOBS = """j1,i1,u1,Terminated,1000.0,1400.0
j2,i2,u2,Failed,1010.0,1100.0
j3,i3,u1,Running,1020.0,
j4,i4,u3,Terminated,1030.0,1200.0
j5,i5,u3,Terminated,1040.0,1300.0
j6,i6,u2,Failed,1050.0,1051.0
"""
# pai_task_table: job_name, task_name, inst_num, status, start_time, end_time, plan_cpu,
# plan_mem, plan_gpu, gpu_type
PAI_TASKS = """j1,ps,1.0,Terminated,1005.0,1400.0,600.0,29.3,,
j1,worker,4.0,Terminated,1005.0,1399.0,800.0,58.6,100.0,V100
j2,tensorflow,1.0,Failed,1020.0,1100.0,400.0,10.0,50.0,T4
j3,worker,1.0,Running,1030.0,,400.0,10.0,100.0,P100
j4,tensorflow,1.0,Terminated,1035.0,1200.0,1200.0,100.0,800.0,V100M32
j5,cpu,2.0,Terminated,1045.0,1300.0,400.0,10.0,0.0,
"""


def test_pai_joins_jobs_and_tasks(tmp_path: Path) -> None:
    jobs_file = write(tmp_path, "pai_job_table.csv", PAI_JOBS)
    write(tmp_path, "pai_task_table.csv", PAI_TASKS)
    jobs, notes = loaded(jobs_file, "pai")
    assert sorted(jobs) == ["j1", "j2", "j4"]
    j1 = jobs["j1"]  # 4 workers of 1 GPU; the ps task asks for no GPU
    assert (j1.spec.workers, j1.spec.gpus_per_worker, j1.spec.gpu_milli) == (4, 1, MILLI)
    assert (j1.spec.cpu_milli, j1.spec.memory_mib, j1.spec.user) == (8000, 60007, "u1")
    assert (j1.submit_time, j1.duration_s) == (0.0, 395.0)
    assert j1.recorded is not None
    assert (j1.recorded.start_time, j1.recorded.end_time, j1.recorded.state) == (
        5.0,
        400.0,
        "SUCCEEDED",
    )
    j2 = jobs["j2"]  # half a GPU: a share
    assert (j2.spec.gpus_per_worker, j2.spec.gpu_milli) == (1, 500)
    assert j2.recorded is not None and j2.recorded.state == "FAILED"
    assert jobs["j4"].spec.gpus_per_worker == 8
    assert any("1 job(s): not ended" in n for n in notes), notes
    assert any("1 job(s): no GPUs" in n for n in notes), notes
    assert any("1 job(s): never started" in n for n in notes), notes
    # the folder works too, and a header row (as the .header files give it) is skipped
    header = "job_name,inst_id,user,status,start_time,end_time\n"
    write(tmp_path, "pai_job_table.csv", header + PAI_JOBS)
    assert loaded(tmp_path, "pai")[0] == jobs


@pytest.mark.parametrize(
    ("table", "line", "column", "words"),
    [
        ("job", "j9,i9,u1,Done,1.0,2.0", "status", "Terminated"),
        ("job", "j9,i9,u1,Terminated,soon,2.0", "start_time", "number"),
        ("job", "j1,i9,u1,Terminated,1.0,2.0", "job_name", "already on line 1"),
        ("task", "j9,w,1.5,Terminated,1.0,2.0,100,1,100,V100", "inst_num", "whole number"),
        ("task", "j9,w,1,Terminated,1.0,2.0,100,1,lots,V100", "plan_gpu", "number"),
    ],
)
def test_pai_errors_name_file_line_and_column(
    tmp_path: Path, table: str, line: str, column: str, words: str
) -> None:
    jobs = write(tmp_path, "pai_job_table.csv", PAI_JOBS + (line + "\n" if table == "job" else ""))
    tasks = write(
        tmp_path, "pai_task_table.csv", PAI_TASKS + (line + "\n" if table == "task" else "")
    )
    e = refused(jobs, "pai")
    n = (PAI_JOBS if table == "job" else PAI_TASKS).count("\n") + 1
    if "already" in words:
        n = 7
    assert (e.source, e.field) == (str(jobs if table == "job" else tasks), f"line {n}: {column}")
    assert words in e.reason


def test_pai_needs_its_task_table(tmp_path: Path) -> None:
    e = refused(write(tmp_path, "pai_job_table.csv", PAI_JOBS), "pai")
    assert "pai_task_table.csv not found" in e.reason


# ----- SenseTime Helios ---------------------------------------------------------------------

HELIOS_HEAD = (
    "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue\n"
)
HELIOS = (
    HELIOS_HEAD
    + """\
7001,uA,vcX,16,64,2,COMPLETED,2020-06-01 08:00:00,2020-06-01 08:00:05,2020-06-01 09:00:05,3600,5
7002,uB,vcY,1,4,1,FAILED,2020-06-01 08:00:10,2020-06-01 08:01:10,2020-06-01 08:02:10,60,60
7003,uB,vcY,0,8,1,COMPLETED,2020-06-01 08:00:20,2020-06-01 08:00:20,2020-06-01 08:10:20,600,0
7004,uC,vcX,2,8,1,CANCELLED,2020-06-01 08:00:30,,2020-06-01 08:05:00,0,0
7005,uC,vcX,3,8,2,TIMEOUT,2020-06-01 08:00:40,2020-06-01 08:00:40,2020-06-01 10:00:40,7200,0
7006,uA,vcY,4,16,1,NODE_FAIL,2020-06-01 08:00:50,2020-06-01 08:10:50,2020-06-01 08:20:50,600,600
"""
)


def test_helios_reads_its_cluster_log(tmp_path: Path) -> None:
    jobs, notes = loaded(write(tmp_path, "cluster_log.csv", HELIOS), "helios")
    assert sorted(jobs) == ["7001", "7002", "7005", "7006"]
    a = jobs["7001"]
    assert (a.spec.user, a.spec.queue, a.spec.workers, a.spec.gpus_per_worker) == (
        "uA",
        "vcX",
        2,
        8,
    )
    assert (a.spec.cpu_milli, a.spec.memory_mib, a.duration_s) == (32 * MILLI, 0, 3600.0)
    assert a.recorded is not None and (a.recorded.start_time, a.recorded.state) == (
        5.0,
        "SUCCEEDED",
    )
    assert (jobs["7005"].spec.workers, jobs["7005"].spec.gpus_per_worker) == (2, 2)
    states = {k: j.recorded.state for k, j in jobs.items() if j.recorded}
    assert states == {
        "7001": "SUCCEEDED",
        "7002": "FAILED",
        "7005": "TIMED_OUT",
        "7006": "FAILED",
    }
    assert any("1 job(s): never started" in n for n in notes), notes
    assert any("1 job(s): no GPUs" in n for n in notes), notes


@pytest.mark.parametrize(
    ("row", "column", "words"),
    [
        (
            "7100,u,vc,x,1,1,COMPLETED,2020-06-01 08:00:00,2020-06-01 08:00:00,2020-06-01 08:01:00,"
            "60,0",
            "gpu_num",
            "integer",
        ),
        (
            "7100,u,vc,1,1,1,LOST,2020-06-01 08:00:00,2020-06-01 08:00:00,2020-06-01 08:01:00,60,0",
            "state",
            "COMPLETED",
        ),
        (
            "7100,u,vc,1,1,1,COMPLETED,June 1st,2020-06-01 08:00:00,2020-06-01 08:01:00,60,0",
            "submit_time",
            "date-time",
        ),
        (
            "7100,u,vc,1,1,1,COMPLETED,2020-06-01 08:00:00,2020-06-01 08:00:00,2020-06-01 07:01:00,"
            "60,0",
            "end_time",
            "before",
        ),
        (
            "7001,u,vc,1,1,1,COMPLETED,2020-06-01 08:00:00,2020-06-01 08:00:00,2020-06-01 08:01:00,"
            "60,0",
            "job_id",
            "already on line 2",
        ),
    ],
)
def test_helios_errors_name_file_line_and_column(
    tmp_path: Path, row: str, column: str, words: str
) -> None:
    p = write(tmp_path, "cluster_log.csv", HELIOS + row + "\n")
    e = refused(p, "helios")
    assert (e.source, e.field) == (str(p), f"line 8: {column}")
    assert words in e.reason


# ----- through the CLI ----------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["sacct", "pai", "helios"])
def test_simulate_replay_reads_each_format(tmp_path: Path, fmt: str) -> None:
    if fmt == "sacct":
        trace = write(tmp_path, "sacct.txt", SACCT)
    elif fmt == "pai":
        trace = write(tmp_path, "pai_job_table.csv", PAI_JOBS)
        write(tmp_path, "pai_task_table.csv", PAI_TASKS)
    else:
        trace = write(tmp_path, "cluster_log.csv", HELIOS)
    r = CliRunner().invoke(
        app, ["replay", "--trace", str(trace), "--format", fmt, "--nodes", "4", "--json"]
    )
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["jobs"] == (3 if fmt == "pai" else 4)
    assert "left out" in r.stderr


def test_the_jobs_format_names_the_format_a_mistaken_file_is_in(tmp_path: Path) -> None:
    e = refused(write(tmp_path, "sacct.txt", SACCT), "jobs")
    assert "--format sacct" in e.reason and e.field == "line 1"
    listing = json.dumps([{"id": "1", "state": "SUCCEEDED"}], indent=1)
    e = refused(write(tmp_path, "jobs.json", listing), "jobs")
    assert "gpufleet history export" in e.reason
