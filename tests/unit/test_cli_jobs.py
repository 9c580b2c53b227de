"""``submit``, ``jobs``, ``show``, ``cancel``, ``logs``, ``accounting`` against a fake API."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
from test_cli_support import NOW, FakeApi, api, cli, job

from gpufleet.cli import jobs as jobs_cli

__all__ = ["api"]  # the fixture, imported for pytest

SCRIPT = """#!/bin/bash
#SBATCH --job-name=pretrain
#SBATCH --nodes=2 --ntasks-per-node=4
#SBATCH --gres=gpu:8
#SBATCH --time=2:00:00
#SBATCH --partition=vision
#SBATCH --array=0-3
#SBATCH --dependency=afterok:12

python train.py
"""


def submitted(*ids: str) -> Any:
    return lambda req: {"ids": list(ids)}


# ----- submit -------------------------------------------------------------------------------


def test_submit_from_flags_sends_the_spec(api: FakeApi) -> None:
    api.on("POST", "/jobs", submitted("17"))
    r = cli(
        *("submit", "--gpus", "16", "--workers", "2", "--queue", "vision", "--time", "2:00:00"),
        *(
            "--name",
            "pretrain",
            "--mem",
            "64G",
            "--env",
            "A=1",
            "--",
            "python",
            "t.py",
            "--lr",
            "3",
        ),
    )
    assert r.code == 0, r.stderr
    assert r.stdout == "Submitted job 17\n"
    (req,) = api.requests
    assert req.headers["authorization"] == "Bearer tok-ana"
    assert str(req.url) == "http://fleet.test:8080/api/v1/jobs"
    body = api.body()
    assert body["spec"] == {
        "name": "pretrain",
        "command": ["python", "t.py", "--lr", "3"],
        "queue": "vision",
        "workers": 2,
        "gpus_per_worker": 8,
        "memory_mib": 65536,
        "time_limit_s": 7200.0,
        "env": {"A": "1"},
    }  # no user: the server takes the token's
    assert body["array"] is None and body["depends_on"] == []


def test_submit_a_script_as_it_is_with_array_and_dependency(api: FakeApi, tmp_path: Path) -> None:
    f = tmp_path / "train.sbatch"
    f.write_text(SCRIPT)
    api.on("POST", "/jobs", submitted("20", "21", "22", "23"))
    r = cli("submit", "--json", str(f), "--epochs", "3")
    assert r.code == 0, r.stderr
    assert r.json() == {"ids": ["20", "21", "22", "23"]}
    body = api.body()
    assert body["array"] == "0-3"
    assert body["depends_on"] == [{"type": "afterok", "job": "12"}]
    spec = body["spec"]
    # 2 nodes, one worker each on its own, their 4 tasks sharing the node's 8 GPUs
    assert (spec["workers"], spec["gpus_per_worker"], spec["queue"]) == (2, 8, "vision")
    assert spec["distinct_nodes"] is True and spec["tasks_per_worker"] == 4
    assert spec["command"] == ["/bin/bash", "-c", SCRIPT, "train.sbatch", "--epochs", "3"]


def test_a_partition_list_is_sent_as_the_jobs_queues(api: FakeApi, tmp_path: Path) -> None:
    f = tmp_path / "p.sbatch"
    f.write_text("#!/bin/bash\n#SBATCH -p big,gpu-preempt,gpu\ntrue\n")
    api.on("POST", "/jobs", submitted("30"))
    r = cli("submit", str(f))
    assert r.code == 0, r.stderr
    spec = api.body()["spec"]
    assert spec["queues"] == ["big", "gpu-preempt", "gpu"] and "queue" not in spec
    assert "partition" not in r.stderr  # no warning: the controller chooses, as Slurm does
    r = cli("submit", "-p", "big", str(f))  # the flag wins over the script
    assert r.code == 0, r.stderr
    spec = api.body()["spec"]
    assert spec["queue"] == "big" and "queues" not in spec
    r = cli("submit", "--dry-run", "--json", "-p", "a,b", "--", "true")  # the flag's own list
    assert r.code == 0, r.stderr
    assert r.json()["spec"]["queues"] == "a,b" and "queue" not in r.json()["spec"]
    r = cli("submit", "--dry-run", "-p", "a,a", "--", "true")
    assert r.code == 2 and "'a' is named twice" in r.stderr


def test_flags_override_the_script_as_sbatch_options_do(api: FakeApi, tmp_path: Path) -> None:
    f = tmp_path / "train.sbatch"
    f.write_text(SCRIPT)
    r = cli("submit", "--dry-run", "--json", "-p", "nlp", "--array", "0-1", str(f))
    assert r.code == 0, r.stderr
    assert r.json()["spec"]["queue"] == "nlp" and r.json()["array"] == "0-1"


def test_min_runtime_takes_sbatchs_time_format_and_refuses_what_it_cannot_read(
    api: FakeApi, tmp_path: Path
) -> None:
    r = cli("submit", "--dry-run", "--json", "--min-runtime", "1:30:00", "--", "x")
    assert r.code == 0, r.stderr
    assert r.json()["spec"]["min_runtime_s"] == 5400
    f = tmp_path / "train.sbatch"
    f.write_text(SCRIPT)  # over a script's lines, as the other flags
    spec = cli("submit", "--dry-run", "--json", "--min-runtime", "10", str(f)).json()["spec"]
    assert spec["min_runtime_s"] == 600  # minutes, as sbatch's --time
    r = cli("submit", "--dry-run", "--min-runtime", "soon", "--", "x")
    assert r.code == 2 and "--min-runtime soon" in r.stderr


def test_signal_and_no_requeue_flags_set_the_spec_and_override_the_script(
    api: FakeApi, tmp_path: Path
) -> None:
    r = cli("submit", "--dry-run", "--json", "--signal", "B:USR1@90", "--no-requeue", "--", "x")
    assert r.code == 0, r.stderr
    spec = r.json()["spec"]
    assert (spec["signal"], spec["requeue"]) == ("B:USR1@90", False)
    f = tmp_path / "train.sbatch"
    f.write_text(
        SCRIPT.replace("#SBATCH --time", "#SBATCH --signal=USR2 --requeue\n#SBATCH --time")
    )
    spec = cli("submit", "--dry-run", "--json", str(f)).json()["spec"]
    assert spec["signal"] == {"signal": 12, "before_s": 60, "batch_only": False}
    assert spec["requeue"] is True
    spec = cli("submit", "--dry-run", "--json", "--signal", "10@30", "--no-requeue", str(f)).json()
    assert (spec["spec"]["signal"], spec["spec"]["requeue"]) == ("10@30", False)


def test_dry_run_json_on_a_script_prints_the_spec_and_sends_nothing(
    api: FakeApi, tmp_path: Path
) -> None:
    f = tmp_path / "train.sbatch"
    f.write_text(SCRIPT + "")
    # no server configured at all: a dry run must not need one
    r = cli("submit", "--dry-run", "--json", str(f), env={"GPUFLEET_SERVER": None})
    assert r.code == 0, r.stderr
    doc = r.json()
    assert doc["spec"]["name"] == "pretrain" and "user" not in doc["spec"]
    assert doc["spec"]["time_limit_s"] == 7200
    assert doc["array"] == "0-3"
    assert api.requests == []


def test_an_admin_submits_for_a_user(api: FakeApi) -> None:
    api.on("POST", "/jobs", submitted("3"))
    assert cli("submit", "--user", "bo", "--", "true").code == 0
    assert api.body()["spec"]["user"] == "bo"


def test_options_after_the_command_belong_to_it_as_with_sbatch(api: FakeApi) -> None:
    r = cli("submit", "--dry-run", "--json", "python", "t.py", "--gpus", "4")
    assert r.json()["spec"]["command"] == ["python", "t.py", "--gpus", "4"]
    assert "gpus_per_worker" not in r.json()["spec"]


def test_dry_run_for_people_prints_yaml(api: FakeApi) -> None:
    r = cli("submit", "--dry-run", "--gpus", "1", "--", "echo", "hi")
    assert r.code == 0
    assert "gpus_per_worker: 1" in r.stdout and "nothing was sent" in r.stderr
    assert api.requests == []


def test_submit_a_job_yaml_with_many_jobs(api: FakeApi, tmp_path: Path) -> None:
    f = tmp_path / "jobs.yaml"
    f.write_text(
        "jobs:\n"
        "  - {name: a, user: ana, gpus_per_worker: 2, command: 'echo a'}\n"
        "  - {name: b, user: ana, memory_gib: 8, command: [echo, b]}\n"
    )
    ids = iter(["1", "2"])
    api.on("POST", "/jobs", lambda req: {"ids": [next(ids)]})
    r = cli("submit", "-f", str(f), "--queue", "nlp", "--mem", "1G")
    assert r.code == 0, r.stderr
    assert r.stdout == "Submitted 2 jobs: 1 2\n"
    a, b = api.body(0)["spec"], api.body(1)["spec"]
    assert a["queue"] == b["queue"] == "nlp"
    assert "memory_gib" not in b and b["memory_mib"] == 1024


def test_a_refusal_midway_through_a_file_says_what_was_submitted(
    api: FakeApi, tmp_path: Path
) -> None:
    f = tmp_path / "jobs.yaml"
    f.write_text("- {name: a, command: x}\n- {name: b, command: y}\n")
    answers = iter([{"ids": ["1"]}, httpx.Response(429, json={"detail": "slow down"})])
    api.on("POST", "/jobs", lambda req: next(answers))
    r = cli("submit", "-f", str(f), "--idempotency-key", "k")
    assert r.code == 1
    assert "submitted before the error: 1" in r.stderr
    assert "error: slow down (429)" in r.stderr
    assert [api.body(i)["idempotency_key"] for i in (0, 1)] == ["k#0", "k#1"]


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["submit"], "nothing to run"),
        (["submit", "missing.sbatch"], "missing.sbatch: no such file"),
        (["submit", "-f", "missing.yaml"], "missing.yaml: no such file"),
        (["submit", "-f", "x.yaml", "--", "true"], "not both"),
        (["submit", "--gpus", "1", "--gpu-model", "K9000", "--", "x"], "unknown GPU model"),
        (["submit", "--time", "1h", "--", "x"], "--time"),
        (["submit", "--mem", "lots", "--", "x"], "--mem"),
        (["submit", "--env", "NOEQUALS", "--", "x"], "KEY=VALUE"),
        (["submit", "--array", "9-0", "--", "x"], "--array"),
        # sized from its text before anything is expanded or sent (issue 10)
        (["submit", "--array", "0-1000000000", "--", "x"], "--array: more than 1001 tasks"),
        (["submit", "--cpus", "nan", "--", "x"], "cpus: must be a finite number"),
        (["submit", "--cpus", "1e308", "--", "x"], "cpus: must be at most"),
        (["submit", "--dependency", "afternotok:1", "--", "x"], "not supported"),
        (["submit", "--strict-topology", "--", "x"], "--topology"),
        (["submit", "--topology", "rack", "--", "x"], "topology.level"),
        (["submit", "--signal", "USR3@10", "--", "x"], "signal: expected [B:]SIG[@SECONDS]"),
    ],
)
def test_bad_submissions_exit_2_and_send_nothing(api: FakeApi, args: list[str], why: str) -> None:
    r = cli(*args)
    assert r.code == 2
    assert why in r.stderr and r.stderr.startswith("error: ")
    assert "Traceback" not in r.stderr + r.stdout
    assert api.requests == []


def test_a_bad_script_names_its_line_and_sends_nothing(api: FakeApi, tmp_path: Path) -> None:
    f = tmp_path / "bad.sh"
    f.write_text("#!/bin/bash\n#SBATCH -N 2\n#SBATCH --gpus=3\n#SBATCH --ntasks-per-node=2\n")
    r = cli("submit", "--dry-run", "--json", str(f))
    assert r.code == 2 and r.stdout == ""
    assert f"{f}: line 2, line 3, line 4: gpufleet cannot" in r.stderr
    assert "--gpus=3 does not divide among 2 nodes" in r.stderr
    assert "gpufleet cannot run this yet" in r.stderr
    assert api.requests == []


def test_a_job_yaml_with_a_nul_is_refused_before_sending(api: FakeApi, tmp_path: Path) -> None:
    f = tmp_path / "j.yaml"
    f.write_text('name: a\ncommand: ["echo", "a\\0b"]\nenv: {K: "\\0"}\n')
    r = cli("submit", "-f", str(f))
    assert r.code == 2 and f"{f}:2:19: command[1]: must not contain a NUL byte" in r.stderr
    assert f"{f}:3:7: env.K: must not contain a NUL byte" in r.stderr  # both at once
    assert api.requests == []


def test_a_job_yaml_error_names_the_field(api: FakeApi, tmp_path: Path) -> None:
    f = tmp_path / "j.yaml"
    f.write_text("name: a\nworkers: 0\ncommand: x\n")
    r = cli("submit", "-f", str(f))
    assert r.code == 2 and f"{f}:2:1: workers: must be at least 1" in r.stderr  # line:column


# ----- errors any command can meet -------------------------------------------------------------


def test_401_says_to_check_the_token(api: FakeApi) -> None:
    api.on("GET", "/jobs", httpx.Response(401, json={"detail": "invalid token"}))
    r = cli("jobs")
    assert r.code == 1
    assert r.stderr.splitlines() == [
        "error: invalid token (401)",
        "hint: check your token (GPUFLEET_TOKEN): it may be mistyped or revoked",
    ]


def test_401_without_a_token_says_how_to_set_one(api: FakeApi) -> None:
    api.on("GET", "/jobs", httpx.Response(401, json={"detail": "missing bearer token"}))
    r = cli("jobs", env={"GPUFLEET_TOKEN": None})
    assert r.code == 1 and "no token is set: pass --token-file FILE, set GPUFLEET_TOKEN" in r.stderr
    assert "authorization" not in api.requests[0].headers


def test_validation_errors_name_the_field(api: FakeApi) -> None:
    detail = [{"loc": ["body", "spec", "workers"], "msg": "must be at least 1"}]
    api.on("POST", "/jobs", httpx.Response(422, json={"detail": detail}))
    r = cli("submit", "--", "true")
    assert r.code == 1 and r.stderr.startswith("error: spec.workers: must be at least 1 (422)")


def test_an_unreachable_server_says_to_start_the_controller(monkeypatch: Any) -> None:
    from gpufleet.cli import config
    from gpufleet.client.http import Client

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    monkeypatch.setattr(
        config,
        "client_factory",
        lambda s: Client(s.server, s.token, transport=httpx.MockTransport(refuse)),
    )
    r = cli("jobs")
    assert r.code == 1 and r.stdout == ""
    assert r.stderr.strip() == (
        "error: cannot reach the gpufleet server at http://fleet.test:8080: is it running? "
        "(gpufleet controller)"
    )


def test_no_server_configured_says_where_to_configure_it(api: FakeApi) -> None:
    r = cli("jobs", env={"GPUFLEET_SERVER": None})
    assert r.code == 2
    assert "no gpufleet server is configured" in r.stderr and "GPUFLEET_SERVER" in r.stderr
    assert api.requests == []


def test_server_and_token_file_flags_beat_the_environment(api: FakeApi, tmp_path: Path) -> None:
    api.on("GET", "/jobs", [])
    tok = tmp_path / "tok"
    tok.write_text("t2\n")
    tok.chmod(0o600)
    r = cli("jobs", "--server", "other:9", "--token-file", str(tok))
    assert r.code == 0
    assert str(api.requests[0].url).startswith("http://other:9/api/v1/jobs")
    assert api.requests[0].headers["authorization"] == "Bearer t2"


def test_the_config_file_is_read_last(api: FakeApi, tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("server: http://from-file:1\ntoken: file-tok\n")
    cfg.chmod(0o600)  # it holds a token
    api.on("GET", "/jobs", [])
    env = {"GPUFLEET_SERVER": None, "GPUFLEET_TOKEN": None}
    r = cli("jobs", env={**env, "GPUFLEET_CONFIG": str(cfg)})
    assert r.code == 0, r.stderr
    assert api.requests[0].url.host == "from-file"
    assert api.requests[0].headers["authorization"] == "Bearer file-tok"


def test_a_bad_config_file_is_named(api: FakeApi, tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("server: x\ntokn: y\n")
    r = cli("jobs", env={"GPUFLEET_CONFIG": str(cfg)})
    assert r.code == 2 and f"{cfg}: unknown key 'tokn'" in r.stderr


# ----- jobs, show, cancel ----------------------------------------------------------------------


def test_jobs_lists_like_squeue(api: FakeApi, monkeypatch: Any) -> None:
    monkeypatch.setattr(jobs_cli.time, "time", lambda: NOW)
    placement = [
        {"node": "n01", "gpus": [0, 1], "gpu_milli": 1000, "cpu_milli": 4000, "memory_mib": 8192}
    ] * 2
    api.on(
        "GET",
        "/jobs",
        [
            job("1", state="RUNNING", start_time=NOW - 3725, workers=2, placement=placement),
            job(
                "2",
                name="[red]big",
                reason={"code": "Quota", "message": "queue vision uses 64 of 64 GPUs"},
            ),
        ],
    )
    r = cli("jobs", "--user", "ana", "--all")
    assert r.code == 0, r.stderr
    q = api.requests[0].url.params
    assert (q["user"], q["all"], q["limit"]) == ("ana", "true", "200") and "state" not in q
    lines = r.stdout.splitlines()
    assert lines[0].split() == [
        "JOBID",
        "NAME",
        "USER",
        "QUEUE",
        "STATE",
        "GPUS",
        "TIME",
        "NODES(REASON)",
    ]
    row1 = next(x for x in lines if x.strip().startswith("1 "))
    assert "RUNNING" in row1 and "8 (2×4)" in row1 and "1h 02m" in row1 and "n01" in row1
    row2 = next(x for x in lines if x.strip().startswith("2 "))
    assert "[red]big" in row2  # printed as written, not as markup
    assert "(Quota) queue vision uses 64 of 64 GPUs" in row2


def test_jobs_json_is_one_document(api: FakeApi) -> None:
    api.on("GET", "/jobs", [job("1"), job("2")])
    r = cli("jobs", "--json")
    assert r.code == 0 and [j["id"] for j in r.json()] == ["1", "2"]


def test_jobs_refuses_an_unknown_state(api: FakeApi) -> None:
    r = cli("jobs", "--state", "WAITING")
    assert r.code == 2 and "PD/PENDING" in r.stderr and "WAITING" in r.stderr
    assert api.requests == []


def test_jobs_takes_squeues_state_codes_one_for_the_server_many_filtered(api: FakeApi) -> None:
    api.on("GET", "/jobs", [job("1", state="RUNNING")])
    assert cli("jobs", "-t", "R").code == 0
    assert api.requests[-1].url.params["state"] == "RUNNING"
    rows = [
        job("1", state="RUNNING"),
        job("2"),
        job("3", state="FAILED"),
        job("4", state="CANCELLED"),
    ]
    api.on("GET", "/jobs", rows)
    r = cli("jobs", "-t", "pd,F,timeout", "--json")
    q = api.requests[-1].url.params
    assert "state" not in q and q["all"] == "true"  # a finished state: finished jobs listed
    assert [j["id"] for j in r.json()] == ["2", "3"]


def test_jobs_in_squeues_format_without_header(api: FakeApi, monkeypatch: Any) -> None:
    monkeypatch.setattr("gpufleet.io.slurm_style.time.time", lambda: NOW)
    placement = [
        {"node": "n01", "gpus": [0], "gpu_milli": 1000, "cpu_milli": 1000, "memory_mib": 1024}
    ]
    api.on(
        "GET",
        "/jobs",
        [
            job("12", name="a-very-long-name", state="RUNNING", start_time=NOW - 3725,
                placement=placement),
            job("13", reason={"code": "Priority", "message": "behind 2 jobs"}),
        ],
    )  # fmt: skip
    r = cli("jobs", "-o", "%.5i|%6j|%t|%.10M|%R", "-h")
    assert r.code == 0, r.stderr
    assert r.stdout.splitlines() == [
        "   12|a-very|R|   1:02:05|n01",
        "   13|job13 |PD|      0:00|(Priority)",
    ]
    r = cli("jobs", "-o", "%i %Z")
    assert r.code == 2 and "unknown field %Z" in r.stderr


def test_jobs_of_given_ids_and_names_and_mine(api: FakeApi, monkeypatch: Any) -> None:
    api.on("GET", "/jobs/5", job("5", name="train"))
    api.on("GET", "/jobs/6", httpx.Response(404, json={"detail": "no job 6"}))
    r = cli("jobs", "-j", "5,6", "--json")
    assert r.code == 1 and [j["id"] for j in r.json()] == ["5"]
    assert "job 6: Invalid job id specified (404)" in r.stderr
    api.on("GET", "/jobs", [job("7", name="train"), job("8", name="eval")])
    monkeypatch.setattr("getpass.getuser", lambda: "ana")
    r = cli("jobs", "-n", "eval", "--me", "--json")
    assert [j["id"] for j in r.json()] == ["8"]
    assert api.requests[-1].url.params["user"] == "ana"


def test_show_gives_state_placement_reason_start_and_events(api: FakeApi, monkeypatch: Any) -> None:
    monkeypatch.setattr(jobs_cli.time, "time", lambda: NOW)
    detail = job(
        "7",
        reason={
            "code": "Resources",
            "message": "needs 2 × 8 GPUs under one leaf",
            "estimated_start": NOW + 7500,
        },
        events=[{"time": NOW - 600, "attempt": 0, "state": "PENDING", "why": "submitted"}],
        spec={"name": "job7", "user": "ana", "command": ["python", "t.py"], "time_limit_s": 3600},
    )
    api.on("GET", "/jobs/7", detail)
    r = cli("show", "7")
    assert r.code == 0, r.stderr
    assert "State:" in r.stdout and "PENDING" in r.stdout
    assert "Resources: needs 2 × 8 GPUs under one leaf" in r.stdout
    assert "(in 2h 05m)" in r.stdout  # estimated start, humanised
    assert "Time limit: 1h 00m" in " ".join(r.stdout.split())
    assert "Events" in r.stdout and "submitted" in r.stdout
    assert "python t.py" in r.stdout
    assert cli("show", "7", "--json").json()["reason"]["code"] == "Resources"
    assert "Queues:" not in r.stdout  # one queue: no partition list
    spec = {"name": "job7", "user": "ana", "queues": ["a", "b"]}
    api.on("GET", "/jobs/7", job("7", queue="b", state="RUNNING", spec=spec))
    r = cli("show", "7")
    assert "Queues: b,a" in " ".join(r.stdout.split()), r.stdout  # the one it runs in first


def test_show_says_how_sure_the_estimated_start_is(api: FakeApi, monkeypatch: Any) -> None:
    monkeypatch.setattr(jobs_cli.time, "time", lambda: NOW)
    reason = {
        "code": "Resources",
        "message": "needs 8 GPUs (8 GPUs); 2 free now; reserved to start in 2h 05m",
        "estimated_start": NOW + 7500,
        "estimated_start_at": "2026-12-03T14:05:00Z",
        "start_bound": "reserved",
    }
    api.on("GET", "/jobs/7", job("7", reason=reason))
    r = cli("show", "7")
    assert r.code == 0, r.stderr
    text = " ".join(r.stdout.split())
    assert "(in 2h 05m), at the latest: reserved" in text
    assert "e+09" not in text
    shown = cli("show", "7", "--json").json()["reason"]
    assert shown["estimated_start_at"] == "2026-12-03T14:05:00Z"
    assert shown["start_bound"] == "reserved"


def test_show_an_unknown_job_says_how_to_find_ids(api: FakeApi) -> None:
    api.on("GET", "/jobs/99", httpx.Response(404, json={"detail": "no job 99"}))
    r = cli("show", "99")
    assert r.code == 1
    assert r.stderr.splitlines() == [
        "error: no job 99 (404)",
        "hint: check the job id (gpufleet jobs --all)",
    ]


def test_cancel_many_reports_each_and_fails_if_one_failed(api: FakeApi) -> None:
    api.on("POST", "/jobs/1/cancel", job("1", state="CANCELLED"))
    api.on("POST", "/jobs/2/cancel", httpx.Response(403, json={"detail": "not your job"}))
    api.on("POST", "/jobs/3/cancel", job("3", state="CANCELLED"))
    r = cli("cancel", "1", "2", "3")
    assert r.code == 1
    assert r.stdout == "job 1: CANCELLED\njob 3: CANCELLED\n"
    assert "error: job 2: not your job (403)" in r.stderr
    assert [q.url.path for q in api.requests] == [f"/api/v1/jobs/{i}/cancel" for i in "123"]


def test_cancel_of_a_running_job_says_it_is_being_stopped_not_its_old_state(
    api: FakeApi,
) -> None:
    """The answer comes before the tasks have exited: RUNNING read as if the cancel failed."""
    api.on("POST", "/jobs/4/cancel", job("4", state="RUNNING"))
    r = cli("cancel", "4")
    assert r.code == 0
    assert r.stdout == "job 4: cancelling (its tasks are being stopped)\n"


def test_cancel_json(api: FakeApi) -> None:
    api.on("POST", "/jobs/1/cancel", job("1", state="CANCELLED"))
    r = cli("cancel", "--json", "1")
    assert r.code == 0 and r.json()[0]["state"] == "CANCELLED"


# ----- logs ------------------------------------------------------------------------------------


def chunk(data: str, offset: int, complete: bool = False, stream: str = "stdout") -> Any:
    return {
        "job": "5",
        "rank": 1,
        "stream": stream,
        "offset": offset,
        "next_offset": offset + len(data),
        "data": data,
        "complete": complete,
    }


def test_logs_prints_one_read(api: FakeApi) -> None:
    api.on("GET", "/jobs/5/logs", chunk("hello\n", 0))
    r = cli("logs", "5", "--rank", "1", "--stderr")
    assert r.code == 0 and r.stdout == "hello\n"
    q = api.requests[0].url.params
    assert (q["rank"], q["stream"], q["offset"]) == ("1", "stderr", "0")


def test_logs_follow_polls_with_offsets_until_the_rank_is_complete(
    api: FakeApi, monkeypatch: Any
) -> None:
    sleeps: list[float] = []
    monkeypatch.setattr("gpufleet.cli.jobs.job_logs.sleep", sleeps.append)
    answers = {0: chunk("a\n", 0), 2: chunk("", 2), 2.1: chunk("b\n", 2, complete=True)}
    seen: list[int] = []

    def logs(req: httpx.Request) -> Any:
        off = int(req.url.params["offset"])
        seen.append(off)
        return answers[2.1 if off == 2 and seen.count(2) > 1 else off]

    api.on("GET", "/jobs/5/logs", logs)
    api.on("GET", "/jobs/5", job("5", state="RUNNING"))
    r = cli("logs", "5", "-f")
    assert r.code == 0, r.stderr
    assert r.stdout == "a\nb\n"
    assert seen == [0, 2, 2] and len(sleeps) == 2


def test_logs_follow_stops_when_the_job_ended(api: FakeApi, monkeypatch: Any) -> None:
    monkeypatch.setattr("gpufleet.cli.jobs.job_logs.sleep", lambda s: None)
    api.on("GET", "/jobs/5/logs", chunk("", 0))
    api.on("GET", "/jobs/5", job("5", state="CANCELLED"))
    r = cli("logs", "5", "-f")
    assert r.code == 0
    # read, see no data, ask for the job, read the tail once more, stop
    assert [q.url.path.rsplit("/", 1)[1] for q in api.requests] == ["logs", "5", "logs"]


def test_logs_follow_is_bounded_by_timeout(api: FakeApi, monkeypatch: Any) -> None:
    clock = iter(range(0, 1000, 10))
    monkeypatch.setattr(jobs_cli.time, "monotonic", lambda: float(next(clock)))
    monkeypatch.setattr("gpufleet.cli.jobs.job_logs.sleep", lambda s: None)
    api.on("GET", "/jobs/5/logs", lambda req: chunk("", int(req.url.params["offset"])))
    api.on("GET", "/jobs/5", job("5", state="RUNNING"))
    r = cli("logs", "5", "-f", "--timeout", "25")
    assert r.code == 0 and "stopped following after 25s" in r.stderr
    assert len(api.requests) < 10


# ----- accounting ------------------------------------------------------------------------------


def test_accounting_by_queue_over_a_period(api: FakeApi, monkeypatch: Any) -> None:
    monkeypatch.setattr(jobs_cli.time, "time", lambda: NOW)
    api.on(
        "GET",
        "/accounting",
        [
            {"key": "vision", "jobs": 3, "gpu_hours": 12.5, "used_gpu_hours": 10.0},
            {"key": "nlp", "jobs": 10, "gpu_hours": 1234.25},
        ],
    )
    fair = {"jain": 0.91, "windows": 140, "window_s": 3600.0, "queues": {"nlp": 1.2, "vision": 0.8}}
    api.on("GET", "/accounting/fairness", fair)
    r = cli("accounting", "--since", "7d", "--until", "1d", "--by", "queue")
    assert r.code == 0, r.stderr
    said = " ".join(r.stderr.split())
    assert "fairness against entitlement: 0.910 (Jain, over 140 hours" in said, said
    assert "of entitlement: nlp 120 %, vision 80 %" in said
    q = api.requests[0].url.params
    assert float(q["since"]) == NOW - 7 * 86400 and float(q["until"]) == NOW - 86400
    assert q["by"] == "queue"
    lines = [x.split() for x in r.stdout.splitlines() if x.strip()]
    assert ["QUEUE", "JOBS", "GPU-HOURS", "USED", "USED%"] in lines
    assert ["nlp", "10", "1,234.2", "0.0", "0%"] in lines or [
        "nlp",
        "10",
        "1,234.3",
        "0.0",
        "0%",
    ] in lines  # a server without "used" (older) answers none: 0
    assert lines.index(["vision", "3", "12.5", "10.0", "80%"]) > 1  # most GPU-hours first
    assert lines[-1][0] == "TOTAL" and lines[-1][1] == "13"


def test_accounting_json_and_input_checks(api: FakeApi) -> None:
    api.on("GET", "/accounting", [{"key": "ana", "jobs": 1, "gpu_hours": 2.0}])
    r = cli("accounting", "--json", "--since", "2024-01-01")
    assert r.json() == [{"key": "ana", "jobs": 1, "gpu_hours": 2.0, "used_gpu_hours": 0.0}]
    assert "since" in api.requests[0].url.params
    assert cli("accounting", "--by", "team").code == 2
    assert cli("accounting", "--since", "last tuesday").code == 2
    assert cli("accounting", "--since", "1d", "--until", "7d").code == 2
    assert len(api.requests) == 1


def test_parse_only_prints_what_sbatch_makes_of_a_script(api: FakeApi, tmp_path: Path) -> None:
    f = tmp_path / "train.sbatch"
    f.write_text(SCRIPT.replace("--partition=vision", "--partition=vision,nlp --mem=0"))
    r = cli("submit", "--parse-only", "--json", "-J", "cli", str(f), env={"GPUFLEET_SERVER": None})
    assert r.code == 0, r.stderr
    doc = r.json()
    assert doc["accepted"] is True and doc["job_name"] == "cli"  # the flag wins, as in sbatch
    assert (doc["nodes"], doc["ntasks"], doc["ntasks_per_node"]) == ([2, 2], 8, 4)
    assert doc["gpus_per_node"] == [{"type": None, "count": 8}]
    assert doc["partitions"] == ["vision", "nlp"] and doc["mem_per_node_mb"] == 0
    assert (doc["time_limit"], doc["array"], doc["output"]) == (120, "0-3", "slurm-%A_%a.out")
    assert api.requests == []


def test_parse_only_lists_every_problem_and_exits_2(api: FakeApi, tmp_path: Path) -> None:
    f = tmp_path / "bad.sh"
    f.write_text("#!/bin/bash\n#SBATCH --frob=1\n#SBATCH --time=1h extra\n")
    r = cli("submit", "--parse-only", "--json", str(f))
    assert r.code == 2
    assert r.json() == {
        "accepted": False,
        "errors": [
            f"{f}:2: unrecognized option '--frob=1'",
            f"{f}:3: Invalid directive found in batch script: extra",
            f"{f}:3: --time=1h: Invalid --time specification: expected minutes, MM:SS, "
            "HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS",
        ],
    }


def test_parse_only_refuses_dos_line_breaks_as_sbatch_does(api: FakeApi, tmp_path: Path) -> None:
    f = tmp_path / "win.sh"
    f.write_bytes(b"#!/bin/bash\r\n#SBATCH --time=10\r\ntrue\r\n")
    r = cli("submit", "--parse-only", "--json", str(f))
    assert r.code == 2
    assert r.json() == {
        "accepted": False,
        "errors": [f"{f}:1: Batch script contains DOS line breaks (\\r\\n)"],
    }


def test_times_as_sacct_takes_them() -> None:
    """Slurm's parse_time forms for -S/-E, beside gpufleet's own."""
    from datetime import datetime

    now = datetime(2026, 3, 10, 14, 30, 0).timestamp()
    day = datetime(2026, 3, 10).timestamp()
    when = jobs_cli.parse_when
    assert when("now", now) == now
    assert when("now-1hour", now) == now - 3600
    assert when("now-3days", now) == when("now-3d", now) == now - 3 * 86400
    assert when("now+30min", now) == now + 1800 and when("now-90", now) == now - 90
    assert when("now-2weeks", now) == now - 14 * 86400
    assert when("today", now) == day and when("tomorrow", now) == day + 86400
    assert when("midnight", now) == day + 86400  # the next one, as Slurm
    assert when("teatime", now) == day + 16 * 3600
    assert when("noon", now) == day + 86400 + 12 * 3600  # today's has passed
    assert when("16:45", now) == day + 16 * 3600 + 45 * 60
    assert when("03/01", now) == datetime(2026, 3, 1).timestamp()
    assert when("03/01/25", now) == when("030125", now) == datetime(2025, 3, 1).timestamp()
    assert when("2025-03-01T12:00", now) == datetime(2025, 3, 1, 12).timestamp()
    assert when("7d", now) == now - 7 * 86400  # gpufleet's: 7 days ago
    for bad in ("now-1fortnight", "13/45", "last tuesday"):
        with pytest.raises(typer.BadParameter):
            when(bad, now)


def test_cancel_selects_as_scancel_does(api: FakeApi) -> None:
    api.on(
        "GET",
        "/jobs",
        [
            job("1", name="train", state="RUNNING"),
            job("2", name="eval"),
            job("3", name="train"),
        ],
    )
    for i in "13":
        api.on("POST", f"/jobs/{i}/cancel", job(i, state="CANCELLED"))
    r = cli("cancel", "-u", "ana", "-n", "train", "--json")
    assert r.code == 0 and [j["id"] for j in r.json()] == ["1", "3"]
    assert api.requests[0].url.params["user"] == "ana"
    r = cli("cancel", "-n", "train", "-t", "PD", "3", "2", "1", "--json")  # only ids matching
    assert r.code == 0 and [j["id"] for j in r.json()] == ["3"]
    r = cli("cancel")
    assert r.code == 2 and "job ids, or -u/-n/-t/--me" in r.stderr


def test_show_gives_the_estimated_starts_80_percent_band(api: FakeApi, monkeypatch: Any) -> None:
    monkeypatch.setattr(jobs_cli.time, "time", lambda: NOW)
    reason = {
        "code": "Priority",
        "message": "jobs ahead in order wait for the same GPUs",
        "estimated_start": NOW + 7800,
        "estimated_start_at": "2026-12-03T14:10:00Z",
        "start_bound": "planned",
        "start_low": NOW + 6000,
        "start_high": NOW + 10800,
    }
    api.on("GET", "/jobs/7", job("7", reason=reason))
    r = cli("show", "7")
    assert r.code == 0, r.stderr
    text = " ".join(r.stdout.split())
    assert "(in 2h 10m), 80 % between 1h 40m and 3h 00m from now" in text, text
    shown = cli("show", "7", "--json").json()["reason"]
    assert (shown["start_low"], shown["start_high"]) == (NOW + 6000, NOW + 10800)
