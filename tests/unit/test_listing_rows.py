"""The listing's cache of each job's row as JSON (server/listing.py's ``Rows``): a row is
used again while nothing it shows has changed, and made again as soon as something has."""

from __future__ import annotations

from pydantic import TypeAdapter

from gpufleet.api import schemas as s
from gpufleet.core.state import JobRecord
from gpufleet.model.allocation import Placement
from gpufleet.model.job import Job, JobSpec, JobState
from gpufleet.model.reason import Reason, ReasonCode
from gpufleet.server.listing import BRIEF_SPEC, Rows, _serialize
from gpufleet.server.views import job_out


def _record(i: int) -> JobRecord:
    return JobRecord(Job(f"j{i}", JobSpec("train", "ada", gpus_per_worker=1), 1.0), i)


def _fresh(rec: JobRecord, reason: Reason | None, brief: bool) -> bytes:
    out = job_out(rec, reason)
    if brief:
        out.spec = {k: v for k, v in out.spec.items() if k in BRIEF_SPEC}
    return TypeAdapter(s.JobOut).dump_json(out)


def test_an_unchanged_job_gives_the_same_bytes_and_a_changed_one_its_new_row() -> None:
    rows, rec = Rows(), _record(1)
    waits = Reason(ReasonCode.RESOURCES, "no room", {"gpus": 1})
    first = rows.row(rec, waits, True)
    assert first == _fresh(rec, waits, True)
    assert rows.row(rec, Reason(ReasonCode.RESOURCES, "no room", {"gpus": 1}), True) is first
    # the reason's data (left out of Reason's ==) is shown: a change of it is a new row
    other = Reason(ReasonCode.RESOURCES, "no room", {"gpus": 2})
    assert rows.row(rec, other, True) == _fresh(rec, other, True) != first
    rec.job.to(JobState.STARTING, 5.0)
    rec.job.start_time = 5.0
    rec.allocation = (Placement("node-1", (0,), 1000, 1000, 1024),)
    started = rows.row(rec, other, True)  # the same reason: only the job has changed
    assert started == _fresh(rec, other, True)
    assert b'"state":"STARTING"' in started and b'"node-1"' in started
    assert rows.row(rec, other, False) == _fresh(rec, other, False) != started  # brief or not


def test_a_page_is_the_json_array_of_its_rows() -> None:
    recs = [_record(i) for i in range(3)]
    reasons: dict[str, Reason | None] = {r.job.id: None for r in recs}
    body = _serialize(recs, reasons, False, Rows())
    jobs = [job_out(r, None) for r in recs]
    assert body == TypeAdapter(list[s.JobOut]).dump_json(jobs)
