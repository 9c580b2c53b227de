"""Trace loaders: refused rows name the file, line and column; unsorted traces are accepted;
time limits; jobs larger than the cluster are reported, not dropped."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from gpufleet.io.specs import example, load_queues
from gpufleet.model.errors import SpecError
from gpufleet.model.job import JobSpec
from gpufleet.sim.metrics import jain_index
from gpufleet.sim.replay import (
    ProfileChoice,
    load_failures,
    parse_profile,
    run_replay,
    uniform_cluster,
)
from gpufleet.sim.traces import TimeLimit, apply_time_limits, load_trace

PHILLY_HEAD = "timestamp,duration,num_gpus,gpu_time,cluster\n"
TIRESIAS_HEAD = "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n"


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def refused(path: Path, fmt: str) -> SpecError:
    with pytest.raises(SpecError) as info:
        load_trace(path, fmt)
    return info.value


# ----- malformed rows ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("row", "column", "words"),
    [
        ("2017-10-01 00:00:00,100,abc,100,vc1", "num_gpus", "integer"),
        ("2017-10-01 00:00:00,100,0,0,vc1", "num_gpus", "at least 1"),
        ("2017-10-01 00:00:00,-5,1,5,vc1", "duration", "at least 0"),
        ("yesterday,100,1,100,vc1", "timestamp", "date-time"),
        ("2017-10-01 00:00:00,100,1,100,", "cluster", "empty"),
        ("2017-10-01 00:00:00,nan,1,100,vc1", "duration", "finite"),
    ],
)
def test_philly_bad_row_names_file_line_and_column(
    tmp_path: Path, row: str, column: str, words: str
) -> None:
    good = "2017-10-01 00:00:00,100,1,100,vc1\n"
    p = write(tmp_path, "philly.csv", PHILLY_HEAD + good + row + "\n")
    e = refused(p, "philly")
    assert e.source == str(p)
    assert e.field == f"line 3: {column}"
    assert words in e.reason
    assert str(p) in str(e) and "line 3" in str(e)


def test_wrong_field_count_and_missing_column(tmp_path: Path) -> None:
    p = write(tmp_path, "t.csv", TIRESIAS_HEAD + "0,1,0,10,vgg,100,5\n1,2,3\n")
    e = refused(p, "tiresias")
    assert e.field == "line 3" and "expected 7 fields" in e.reason
    q = write(tmp_path, "t2.csv", "job_id,num_gpu,submit_time\n0,1,0\n")
    e = refused(q, "tiresias")
    assert e.field == "line 1" and "duration" in e.reason


def test_tiresias_duplicate_id(tmp_path: Path) -> None:
    p = write(tmp_path, "t.csv", TIRESIAS_HEAD + "7,1,0,1,a,10,1\n7,1,5,1,a,10,1\n")
    e = refused(p, "tiresias")
    assert e.field == "line 3: job_id" and "line 2" in e.reason


def test_jobs_jsonl_errors_name_the_line_and_field(tmp_path: Path) -> None:
    ok = {"id": "a", "submit_time": 0, "duration_s": 10, "gpus_per_worker": 2}
    cases = [
        ("{not json", "line 2", "not valid JSON"),
        (json.dumps({**ok, "id": "b", "gpus_per_worker": "two"}), "line 2: gpus_per_worker", ""),
        (json.dumps({**ok, "id": "b", "gpuz": 1}), "line 2: gpuz", "unknown key"),
        (json.dumps({**ok, "id": "b", "duration_s": -1}), "line 2: duration_s", "at least 0"),
        (json.dumps({"id": "b", "submit_time": 1}), "line 2: duration_s", "required"),
        (json.dumps({**ok}), "line 2: id", "already on line 1"),
        (json.dumps({**ok, "id": "b", "depends_on": ["afterok:zz"]}), "line 2: depends_on", ""),
    ]
    for i, (line, field, words) in enumerate(cases):
        p = write(tmp_path, f"jobs{i}.jsonl", json.dumps(ok) + "\n" + line + "\n")
        e = refused(p, "jobs")
        assert (e.source, e.field) == (str(p), field), line
        assert words in e.reason


def test_jobs_csv_reads_typed_cells(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        "jobs.csv",
        "id,submit_time,duration_s,queue,workers,gpus_per_worker,preemptible,topology,gpu_models\n"
        "b,20,30,vision,2,8,false,leaf:required,H100-SXM|A100-80GB\n"
        "a,10,5,nlp,,1,,,\n",
    )
    jobs = load_trace(p, "jobs")
    assert [j.id for j in jobs] == ["a", "b"]
    b = jobs[1].spec
    assert (b.queue, b.workers, b.gpus_per_worker, b.preemptible) == ("vision", 2, 8, False)
    assert b.topology.level.value == "leaf" and b.topology.required
    assert b.gpu_models == ("H100-SXM", "A100-80GB")
    assert jobs[1].submit_time == 10.0  # shifted: the first submission is t = 0
    bad = write(tmp_path, "bad.csv", "id,submit_time,duration_s,workers\nx,0,1,many\n")
    assert refused(bad, "jobs").field == "line 2: workers"


def test_openb_without_timing_columns_is_refused(tmp_path: Path) -> None:
    p = write(
        tmp_path, "pods.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1000,1024,1,500\n"
    )
    e = refused(p, "openb")
    assert e.field == "line 1" and "creation_time" in e.reason


def test_openb_pods_become_jobs(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        "pods.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
        "deletion_time,scheduled_time\n"
        "p1,4000,1024,1,300,,LS,Running,100,700,200\n"
        "p0,4000,1024,2,1000,V100M16|G2,BE,Pending,50,80,\n",
    )
    j0, j1 = load_trace(p, "openb")
    assert (j0.id, j0.submit_time, j0.duration_s) == ("p0", 0.0, 30.0)
    assert j0.spec.gpu_models == ("V100M16", "G2") and j0.spec.queue == "BE"
    assert (j1.submit_time, j1.duration_s, j1.spec.gpu_milli) == (50.0, 500.0, 300)


def test_unreadable_file_is_one_error(tmp_path: Path) -> None:
    e = refused(tmp_path / "missing.csv", "philly")
    assert "cannot read" in e.reason and e.source.endswith("missing.csv")
    with pytest.raises(SpecError, match="unknown trace format"):
        load_trace(tmp_path / "x.csv", "slurm")


# ----- order, gangs, limits -----------------------------------------------------------------


def test_unsorted_trace_is_sorted_stably_and_starts_at_zero(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        "philly.csv",
        PHILLY_HEAD
        + "2017-10-01 00:10:00,60,1,60,b\n"
        + "2017-10-01 00:00:00,60,1,60,a\n"
        + "2017-10-01 00:10:00,60,1,60,c\n"
        + "2017-10-01 00:05:00,60,1,60,d\n",
    )
    jobs = load_trace(p, "philly")
    assert [(j.spec.queue, j.submit_time) for j in jobs] == [
        ("a", 0.0),
        ("d", 300.0),
        ("b", 600.0),  # equal times keep file order
        ("c", 600.0),
    ]
    assert [j.id for j in jobs] == ["1", "3", "0", "2"]  # ids are file rows


@pytest.mark.parametrize(
    ("gpus", "workers", "per_worker"), [(1, 1, 1), (8, 1, 8), (12, 2, 6), (16, 2, 8), (24, 3, 8)]
)
def test_philly_large_jobs_become_gangs(
    tmp_path: Path, gpus: int, workers: int, per_worker: int
) -> None:
    p = write(tmp_path, "p.csv", PHILLY_HEAD + f"2017-10-01 00:00:00,60,{gpus},0,a\n")
    (job,) = load_trace(p, "philly")
    assert (job.spec.workers, job.spec.gpus_per_worker) == (workers, per_worker)
    assert (job.spec.cpu_milli, job.spec.memory_mib) == (0, 0)


def test_time_limit_policies(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        "j.jsonl",
        '{"id": "own", "submit_time": 0, "duration_s": 100, "time_limit_s": 500}\n'
        '{"id": "bare", "submit_time": 0, "duration_s": 100}\n',
    )
    jobs = load_trace(p, "jobs")

    def limits(text: str, slack: float = 0.0) -> list[float | None]:
        return [j.spec.time_limit_s for j in apply_time_limits(jobs, TimeLimit.parse(text), slack)]

    assert limits("auto") == [500.0, 100.0]
    assert limits("exact") == [100.0, 100.0]
    assert limits("none") == [None, None]
    assert limits("1.5") == [150.0, 150.0]
    assert limits("exact", slack=30) == [130.0, 130.0]
    for bad in ("0", "-2", "soon"):
        with pytest.raises(SpecError, match="--time-limit"):
            TimeLimit.parse(bad)


# ----- never schedulable ------------------------------------------------------------------------


def test_job_larger_than_the_cluster_is_reported_never_schedulable(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        "t.csv",
        TIRESIAS_HEAD + "small1,1,5,1,a,10,1\nhuge,16,0,1,a,10,1\nsmall2,2,6,1,a,10,1\n",
    )
    jobs = apply_time_limits(load_trace(p, "tiresias"), TimeLimit("exact"))
    cluster = uniform_cluster(1, 8, 1)
    for backfill in ("none", "easy"):
        run = run_replay(cluster, jobs, ProfileChoice("fifo", "bestfit", backfill))
        m = run.metrics
        assert (m.jobs, m.never_schedulable, m.never_ids, m.unfinished) == (3, 1, ("huge",), 0)
        huge = next(r for r in run.rows if r.id == "huge")
        assert huge.state == "PENDING" and huge.end_time is None
        assert huge.reason.startswith("NeverSchedulable") and "16 GPUs" in huge.reason
        # it holds nobody up, even under a strict order
        ends = {r.id: r.end_time for r in run.rows if r.id != "huge"}
        assert ends == {"small1": 15.0, "small2": 16.0}  # submitted at 5 and 6, 10 s each


# ----- set-up helpers ----------------------------------------------------------------------


def test_a_queues_file_with_duplicates_is_refused_naming_every_problem(tmp_path: Path) -> None:
    q = write(
        tmp_path,
        "q.yaml",
        "queues:\n"
        "  - {name: a}\n"
        "  - {name: b, weight: -1}\n"
        "  - {name: a, weight: 2}\n"
        "  - {name: c}\n"
        "  - {name: c}\n",
    )
    with pytest.raises(SpecError) as info:
        load_queues(q)
    e = info.value
    assert e.source == str(q) and e.reason.startswith("3 problems")
    assert "queues[1].weight" in e.reason
    assert "queues[2]: duplicate queue name 'a' (first at queues[0])" in e.reason
    assert "queues[4]: duplicate queue name 'c' (first at queues[3])" in e.reason
    one = write(tmp_path, "one.yaml", "- {name: a}\n- {name: a}\n")
    with pytest.raises(SpecError, match="duplicate queue name 'a'") as only:
        load_queues(one)
    assert (only.value.source, only.value.field) == (str(one), "[1]")
    empty = write(tmp_path, "empty.yaml", "queues: []\n")
    with pytest.raises(SpecError, match="non-empty list of queues"):
        load_queues(empty)


def test_queues_file_and_failures_file(tmp_path: Path) -> None:
    q = write(tmp_path, "q.yaml", "- {name: a, weight: 2}\n- {name: b, weight: 0}\n")
    with pytest.raises(SpecError) as info:
        load_queues(q)
    assert info.value.field == "[1].weight"
    ok = write(tmp_path, "q2.yaml", "queues:\n  - {name: a, weight: 2, cohort: x}\n")
    assert [(s.name, s.weight, s.cohort) for s in load_queues(ok)] == [("a", 2.0, "x")]

    cluster = uniform_cluster(2, 8, 1)
    f = write(tmp_path, "f.csv", "time,node,repair_s\n50,node-001,10\n5,node-000,\n")
    fails = load_failures(f, cluster, default_repair_s=99)
    assert [(x.time, x.node, x.repair_s) for x in fails] == [
        (5.0, "node-000", 99.0),
        (50.0, "node-001", 10.0),
    ]
    bad = write(tmp_path, "g.csv", "time,node\n5,node-7\n")
    with pytest.raises(SpecError) as info:
        load_failures(bad, cluster, 1)
    assert info.value.field == "line 2: node"


def test_profile_labels() -> None:
    base = ProfileChoice(placement="topology")
    c = parse_profile("las+none+order", base)
    assert (c.order, c.placement, c.backfill, c.preempt) == ("las", "topology", "none", ("order",))
    assert c.label == "las+topology+none+order"
    for bad in ("easy+fifo", "fifo+fast", ""):
        with pytest.raises(SpecError):
            parse_profile(bad, base)


def test_jain_index() -> None:
    assert jain_index([2.0, 2.0, 2.0]) == pytest.approx(1.0)
    assert jain_index([1.0, 0.0]) == pytest.approx(0.5)
    assert jain_index([]) is None


def test_the_demo_cluster_has_the_queue_a_job_names_by_default() -> None:
    """The README's submit lines name no queue: on the demo cluster they must not fail with
    "unknown queue 'default'"."""
    names = [q.name for q in load_queues(example("demo-queues.yaml"))]
    assert JobSpec("x", "ana").queue in names and {"vision", "nlp"} <= set(names)


# ----- a history's own columns (gpufleet history export) ------------------------------------


HISTORY_LINE = {"id": "1", "submit_time": 100.0, "duration_s": 5.0, "gpus_per_worker": 2}


@pytest.mark.parametrize(
    ("extra", "column", "words"),
    [
        ({"start_time": 99.0}, "start_time", "before the job's submit_time"),
        ({"start_time": 101.0, "end_time": 100.5}, "end_time", "before the job's start_time"),
        ({"start_time": "soon"}, "start_time", "must be a number"),
        ({"state": "RUNNING"}, "state", "must be one of SUCCEEDED"),
        ({"attempts": -1}, "attempts", "whole number"),
        ({"attempts": 1.5}, "attempts", "whole number"),
    ],
)
def test_history_columns_are_checked_with_file_line_and_column(
    tmp_path: Path, extra: dict[str, object], column: str, words: str
) -> None:
    good = json.dumps(HISTORY_LINE)
    p = write(tmp_path, "h.jsonl", good + "\n" + json.dumps({**HISTORY_LINE, "id": "2", **extra}))
    e = refused(p, "jobs")
    assert (e.source, e.field) == (str(p), f"line 2: {column}")
    assert words in e.reason


def test_history_columns_are_kept_and_shifted_with_the_submit_times(tmp_path: Path) -> None:
    lines = [
        {**HISTORY_LINE, "start_time": 102.0, "end_time": 107.0, "state": "SUCCEEDED"},
        {**HISTORY_LINE, "id": "2", "submit_time": 90.0, "attempts": 3},
        {**HISTORY_LINE, "id": "3", "submit_time": 95.0},
    ]
    p = write(tmp_path, "h.jsonl", "\n".join(json.dumps(x) for x in lines))
    jobs = {j.id: j for j in load_trace(p, "jobs")}
    assert jobs["1"].recorded is not None
    assert (jobs["1"].submit_time, jobs["1"].recorded.start_time) == (10.0, 12.0)
    assert (jobs["1"].recorded.end_time, jobs["1"].recorded.state) == (17.0, "SUCCEEDED")
    assert jobs["2"].recorded is not None and jobs["2"].recorded.attempts == 3
    assert jobs["2"].recorded.start_time is None
    assert jobs["3"].recorded is None  # a plain jobs file, as before
    # the spec never sees them
    assert jobs["1"].spec == replace(jobs["3"].spec, name="1")


def test_a_partition_list_round_trips_through_a_history(tmp_path: Path) -> None:
    # gpufleet history export writes queue (the one the job ran in) and queues (its list)
    from gpufleet.cli.history import COLUMNS, _cell

    assert COLUMNS.index("queues") == COLUMNS.index("queue") + 1
    assert _cell("queues", ["a", "b"]) == "a|b"
    line = {**HISTORY_LINE, "queue": "b", "queues": ["a", "b"]}
    p = write(tmp_path, "h.jsonl", json.dumps(line))
    (j,) = load_trace(p, "jobs")
    assert (j.spec.queue, j.spec.queues, j.spec.partitions) == ("b", ("a", "b"), ("b", "a"))
    c = write(tmp_path, "h.csv", "id,submit_time,duration_s,queue,queues\nx,0,1,b,a|b\n")
    (j,) = load_trace(c, "jobs")
    assert (j.spec.queue, j.spec.queues) == ("b", ("a", "b"))
