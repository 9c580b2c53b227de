"""``gpufleet history export`` against a fake API: pages followed, what is written and what is
left out, a retried job's first start, --since/--until, and the file read back as a trace."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import httpx
from test_cli_support import NOW, FakeApi, api, cli, job

from gpufleet.sim.traces import load_trace

__all__ = ["api"]

SPEC = {
    "name": "x",
    "user": "ana",
    "queue": "vision",
    "workers": 2,
    "gpus_per_worker": 4,
    "gpu_milli": 1000,
    "cpu_milli": 8000,
    "memory_mib": 65536,
    "gpu_models": ["H100-SXM"],
    "time_limit_s": 3600.0,
    "priority": 5,
    "preemptible": False,
    "topology": {"level": "leaf", "required": True},
    "dataset": "",
    "max_retries": 2,
    "command": ["python", "train.py"],
    "env": [["WANDB_API_KEY", "secret"]],
}


def ended(jid: str, submit: float, start: float, end: float, **kw: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "state": "SUCCEEDED",
        "attempt": 1,
        "submit_time": submit,
        "start_time": start,
        "end_time": end,
        "workers": 2,
        "spec": {**SPEC, "name": f"job{jid}"},
    }
    return job(jid, **{**fields, **kw})


def paged(pages: list[list[dict[str, Any]]]) -> Any:
    """GET /jobs in pages, the next one named by a Link header as the server does."""

    def answer(req: httpx.Request) -> httpx.Response:
        assert req.url.params.get("all") == "true"
        i = int(req.url.params.get("cursor", "0"))
        headers = {}
        if i + 1 < len(pages):
            headers["Link"] = (
                f'<http://fleet.test:8080/api/v1/jobs?all=true&cursor={i + 1}>; rel="next"'
            )
        return httpx.Response(200, json=pages[i], headers=headers)

    return answer


def test_export_follows_the_pages_and_writes_what_ran(api: FakeApi, tmp_path: Path) -> None:
    t = NOW - 1000
    retried = ended("4", t + 30, t + 200, t + 260, attempt=2, retries_used=1)
    api.on(
        "GET",
        "/jobs",
        paged(
            [
                [
                    retried,
                    job("5", state="RUNNING", attempt=1, start_time=t + 40),
                    job("6", state="CANCELLED", attempt=0, submit_time=t + 50, end_time=t + 60),
                ],
                [
                    # failed, no retry allowed (job()'s spec: max_retries 0): it has ended
                    job(
                        "3",
                        state="FAILED",
                        attempt=1,
                        submit_time=t + 20,
                        start_time=t + 20,
                        end_time=t + 25,
                    ),
                    ended("2", t + 10, t + 10, t + 100, state="TIMED_OUT"),
                    ended("1", t, t + 5, t + 50),
                ],
            ]
        ),
    )
    events = [
        {"time": t + 30, "attempt": 0, "state": "PENDING", "why": ""},
        {"time": t + 40, "attempt": 1, "state": "STARTING", "why": ""},
        {"time": t + 41, "attempt": 1, "state": "RUNNING", "why": ""},
        {"time": t + 90, "attempt": 1, "state": "FAILED", "why": "exit 1"},
        {"time": t + 200, "attempt": 2, "state": "STARTING", "why": ""},
    ]
    api.on("GET", "/jobs/4", {**retried, "events": events})
    path = tmp_path / "h.jsonl"
    r = cli("history", "export", str(path))
    assert r.code == 0, r.stderr
    assert "wrote 4 job(s)" in r.stderr
    assert "left out 1 that never started and 1 not ended yet" in r.stderr
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    assert [x["id"] for x in recs] == ["1", "2", "3", "4"]  # oldest first
    one = recs[0]
    assert one == {
        "id": "1",
        "name": "job1",
        "user": "ana",
        "queue": "vision",
        "workers": 2,
        "gpus_per_worker": 4,
        "gpu_milli": 1000,
        "cpus": 8.0,
        "memory_mib": 65536,
        "gpu_models": ["H100-SXM"],
        "time_limit_s": 3600.0,
        "priority": 5,
        "preemptible": False,
        "topology": {"level": "leaf", "required": True},
        "max_retries": 2,
        "submit_time": t,
        "start_time": t + 5,
        "end_time": t + 50,
        "duration_s": 45.0,
        "state": "SUCCEEDED",
        "attempts": 1,
    }
    # the retried job: its first attempt's start, from its events; duration covers both tries
    four = recs[3]
    assert (four["start_time"], four["duration_s"], four["attempts"]) == (t + 40, 220.0, 2)
    # only the retried job cost a GET of its own
    assert [r.url.path for r in api.requests].count("/api/v1/jobs/4") == 1
    assert not any(p.startswith("/api/v1/jobs/") and p != "/api/v1/jobs/4" for p in _paths(api))
    assert "secret" not in path.read_text() and "train.py" not in path.read_text()

    jobs = load_trace(path, "jobs")
    assert [(j.id, j.submit_time, j.duration_s) for j in jobs] == [
        ("1", 0.0, 45.0),
        ("2", 10.0, 90.0),
        ("3", 20.0, 5.0),
        ("4", 30.0, 220.0),
    ]
    j1 = jobs[0]
    assert (j1.spec.workers, j1.spec.gpus_per_worker, j1.spec.cpu_milli) == (2, 4, 8000)
    assert (j1.spec.time_limit_s, j1.spec.priority, j1.spec.preemptible) == (3600.0, 5, False)
    assert j1.spec.topology.required and j1.spec.gpu_models == ("H100-SXM",)
    assert j1.recorded is not None
    assert (j1.recorded.start_time, j1.recorded.end_time, j1.recorded.state) == (
        5.0,
        50.0,
        "SUCCEEDED",
    )
    assert jobs[1].recorded is not None and jobs[1].recorded.state == "TIMED_OUT"


def _paths(api: FakeApi) -> list[str]:
    return [r.url.path for r in api.requests]


def test_a_failed_job_with_a_retry_to_come_is_not_ended(api: FakeApi, tmp_path: Path) -> None:
    t = NOW - 100
    waiting = ended("1", t, t + 1, t + 2, state="FAILED", retries_used=1)  # max_retries 2
    api.on("GET", "/jobs", [waiting])
    r = cli("history", "export", str(tmp_path / "h.jsonl"))
    assert r.code == 0, r.stderr
    assert "wrote 0 job(s)" in r.stderr and "1 not ended yet" in r.stderr


def test_since_and_until_select_by_submit_time(api: FakeApi, tmp_path: Path) -> None:
    api.on("GET", "/jobs", [ended(str(i), NOW - 100 * i, NOW - 100 * i, NOW) for i in (1, 2, 3)])
    path = tmp_path / "h.jsonl"
    r = cli("history", "export", str(path), "--since", str(NOW - 250), "--until", str(NOW - 100))
    assert r.code == 0, r.stderr
    assert [json.loads(x)["id"] for x in path.read_text().splitlines()] == ["2"]
    bad = cli("history", "export", str(path), "--since", "1h", "--until", "2h")
    assert bad.code == 2 and "--until must be after --since" in bad.stderr


def test_a_csv_export_reads_back_as_the_same_jobs(api: FakeApi, tmp_path: Path) -> None:
    t = NOW - 500
    api.on("GET", "/jobs", [ended("2", t + 7, t + 9, t + 20), ended("1", t, t + 1, t + 30)])
    as_csv, as_jsonl = tmp_path / "h.csv", tmp_path / "h.jsonl"
    assert cli("history", "export", str(as_csv)).code == 0
    assert cli("history", "export", str(as_jsonl)).code == 0
    with as_csv.open() as fh:
        rows = list(csv.DictReader(fh))
    assert rows[0]["topology"] == "leaf:required" and rows[0]["gpu_models"] == "H100-SXM"
    assert load_trace(as_csv, "jobs") == load_trace(as_jsonl, "jobs")
