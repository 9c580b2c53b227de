"""A real agent process (``python -m gpufleet.agent --simulate``) against a small fake
controller on 127.0.0.1: it registers, takes a launch from the long-poll, and reports the
task's start, exit and logs; cut off past its lease, it fences the task and says so later."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

LEASE_S = 2.0


class Controller:
    """Just the agent endpoints; ``partitioned`` answers 503 to everything."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.partitioned = False
        self.registrations: list[dict[str, Any]] = []
        self.heartbeats: list[dict[str, Any]] = []
        self.commands: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.logs: dict[tuple[str, int, int, str], str] = {}
        self.final: set[tuple[str, int, int, str]] = set()

    def handle(self, path: str, query: dict[str, list[str]], body: Any) -> Any:
        with self.cond:
            try:
                return self._handle(path, query, body)
            finally:
                self.cond.notify_all()  # whoever waits on what this request changed

    def _handle(self, path: str, query: dict[str, list[str]], body: Any) -> Any:
        if self.partitioned:
            return 503, {"detail": "partitioned"}
        if path == "/api/v1/agent/register":
            self.registrations.append(body)
            return 200, {"lease_s": LEASE_S, "heartbeat_s": 0.3}
        what = path.rsplit("/", 1)[-1]
        if what == "heartbeat":
            self.heartbeats.append(body)
            return 200, {"lease_s": LEASE_S, "stale": []}
        if what == "commands":
            wait = min(float(query.get("wait", ["1"])[0]), 1.0)
            self.cond.wait_for(lambda: bool(self.commands), timeout=wait)
            out, self.commands = self.commands, []
            return 200, {"commands": out}
        if what == "events":
            self.events += body["events"]
        elif what == "logs":
            key = (body["job"], body["attempt"], body["rank"], body["stream"])
            self.logs[key] = self.logs.get(key, "") + body["data"]
            if body["final"]:
                self.final.add(key)
        else:
            return 404, {"detail": path}
        return 200, None

    def wait(self, pred: Callable[[], bool], timeout: float = 15.0) -> None:
        with self.cond:
            if not self.cond.wait_for(pred, timeout=timeout):
                raise AssertionError(f"timed out; events so far: {self.events}")

    def send(self, cmd: dict[str, Any]) -> None:
        with self.cond:
            self.commands.append(cmd)
            self.cond.notify_all()


def serve(ctl: Controller) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def _reply(self) -> None:
            url = urlsplit(self.path)
            n = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(n)) if n else None
            status, out = ctl.handle(url.path, parse_qs(url.query), body)
            data = json.dumps(out).encode() if out is not None else b""
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _reply

        def log_message(self, *args: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


@pytest.fixture
def controller() -> Iterator[tuple[Controller, str]]:
    ctl = Controller()
    srv = serve(ctl)
    yield ctl, f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def start_agent(tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(url: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        argv = [
            sys.executable,
            "-m",
            "gpufleet.agent",
            "--controller",
            url,
            "--name",
            "node-1",
            "--simulate",
            "2xH100",
            "--data-dir",
            str(tmp_path / "agent"),
            "--heartbeat-s",
            "0.3",
            "--poll-wait-s",
            "1",
            "--fence-grace-s",
            "0.5",
            "--label",
            "zone=a",
            "--no-access-check",  # its tasks run as the test's own account
        ]
        log = (tmp_path / "agent.log").open("wb")
        # the token never on the command line
        full_env = {**os.environ, "GPUFLEET_TOKEN": "agent-token", **(env or {})}
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=full_env)
        procs.append(p)
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=10)


def launch(job: str, code: str, **kw: Any) -> dict[str, Any]:
    return {
        "kind": "launch",
        "job": job,
        "attempt": 0,
        "rank": 1,
        "command": [sys.executable, "-c", code],
        **kw,
    }


def test_agent_runs_a_launch_and_reports_events_and_logs(
    controller: tuple[Controller, str], start_agent: Callable[[str], subprocess.Popen[bytes]]
) -> None:
    ctl, url = controller
    agent = start_agent(url)
    ctl.wait(lambda: bool(ctl.registrations))
    reg = ctl.registrations[0]
    assert (reg["node"], reg["gpu_model"], len(reg["gpus"])) == ("node-1", "H100-SXM", 2)
    # the site's labels, and how the node shares a GPU held in fractions (agent/sharing.py)
    labels = {"zone": "a", "gpufleet.io/gpu-sharing": "timeslice"}
    assert reg["address"] == "127.0.0.1" and reg["labels"] == labels

    code = "import os; print(os.environ['CUDA_VISIBLE_DEVICES'], os.environ['RANK'])"
    ctl.send(launch("job-7", code, gpus=[1], env={"RANK": "1", "WORLD_SIZE": "2"}))
    key = ("job-7", 0, 1, "stdout")
    ctl.wait(lambda: len(ctl.events) >= 2 and key in ctl.final)
    assert [(e["kind"], e["job"], e["rank"]) for e in ctl.events] == [
        ("started", "job-7", 1),
        ("exited", "job-7", 1),
    ]
    assert ctl.events[1]["exit_code"] == 0
    assert ctl.logs[key] == "1 1\n"
    ctl.wait(lambda: any(h["metrics"].get("gpus") for h in ctl.heartbeats))
    assert ctl.heartbeats[-1]["health"]["healthy"] is True

    agent.send_signal(signal.SIGTERM)
    assert agent.wait(timeout=15) == 0


def test_a_partitioned_agent_fences_its_task_and_reports_it_on_reconnect(
    controller: tuple[Controller, str],
    start_agent: Callable[[str], subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    ctl, url = controller
    agent = start_agent(url)
    ctl.wait(lambda: bool(ctl.registrations))
    ctl.send(launch("job-8", "import time; time.sleep(60)"))
    ctl.wait(lambda: any(e["kind"] == "started" for e in ctl.events))
    ctl.wait(lambda: any(h["running"] for h in ctl.heartbeats))
    with ctl.cond:
        ctl.partitioned = True
    # the agent reaps the fenced task (and removes its pid file) once its own lease runs out
    pidfile = tmp_path / "agent" / "job-8" / "0" / "rank1.pid"
    assert pidfile.exists()
    end = time.monotonic() + LEASE_S + 10
    while pidfile.exists() and time.monotonic() < end:
        time.sleep(0.05)
    assert not pidfile.exists()
    assert ctl.events[-1]["kind"] == "started"  # the exit could not be reported yet
    with ctl.cond:
        ctl.partitioned = False
    ctl.wait(lambda: any(e["kind"] == "exited" for e in ctl.events))
    exited = next(e for e in ctl.events if e["kind"] == "exited")
    assert "fenced" in exited["why"] and exited["exit_code"] == 143
    ctl.wait(lambda: not ctl.heartbeats[-1]["running"])  # and it heartbeats again

    agent.send_signal(signal.SIGTERM)
    assert agent.wait(timeout=15) == 0


def test_a_job_inherits_nothing_of_its_agents_environment(
    controller: tuple[Controller, str], start_agent: Callable[..., subprocess.Popen[bytes]]
) -> None:
    """An agent started from a shell with GPUFLEET_TOKEN exported (and any other secret)
    hands none of it to its jobs: a job's environment is its own."""
    ctl, url = controller
    agent = start_agent(url, {"GPUFLEET_TOKEN": "agent-token", "S3_SECRET_KEY": "agent-s3"})
    ctl.wait(lambda: bool(ctl.registrations))
    code = "import json, os; print(json.dumps(dict(os.environ)))"
    ctl.send(launch("job-env", code, gpus=[0], env={"RANK": "1", "WANDB_API_KEY": "jobs-own"}))
    key = ("job-env", 0, 1, "stdout")
    ctl.wait(lambda: key in ctl.final)
    seen = json.loads(ctl.logs[key])
    assert "GPUFLEET_TOKEN" not in seen and "S3_SECRET_KEY" not in seen
    assert "agent-token" not in ctl.logs[key] and "agent-s3" not in ctl.logs[key]
    assert (seen["RANK"], seen["WANDB_API_KEY"], seen["CUDA_VISIBLE_DEVICES"]) == (
        "1",
        "jobs-own",
        "0",
    )
    seen.pop("LC_CTYPE", None)  # Python's own C-locale coercion (PEP 538)
    assert set(seen) == {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "TMPDIR",
        "RANK",
        "WANDB_API_KEY",
        "CUDA_VISIBLE_DEVICES",
    }
    agent.send_signal(signal.SIGTERM)
    assert agent.wait(timeout=15) == 0


def test_a_launch_with_a_nul_byte_fails_alone_and_the_next_launch_still_starts(
    controller: tuple[Controller, str], start_agent: Callable[..., subprocess.Popen[bytes]]
) -> None:
    """Straight to the agent, past any check at the API: the task fails (exit 125, the reason
    in its events and its stderr log) and the agent goes on launching."""
    ctl, url = controller
    agent = start_agent(url)
    ctl.wait(lambda: bool(ctl.registrations))
    ctl.send(launch("job-nul", "print('never')", env={"TOKEN": "a\0b"}))
    ctl.send(launch("job-nul2", "print('nul\0here')"))
    ctl.wait(lambda: len([e for e in ctl.events if e["kind"] == "exited"]) >= 2)
    ctl.send(launch("job-next", "print('next one')"))
    ctl.wait(lambda: ("job-next", 0, 1, "stdout") in ctl.final)
    by_job = {e["job"]: e for e in ctl.events if e["kind"] == "exited"}
    assert by_job["job-nul"]["exit_code"] == by_job["job-nul2"]["exit_code"] == 125
    assert "env['TOKEN'] contains a NUL byte" in by_job["job-nul"]["why"]
    assert "command[2] contains a NUL byte" in by_job["job-nul2"]["why"]
    ctl.wait(lambda: ("job-nul", 0, 1, "stderr") in ctl.final)
    assert "NUL byte" in ctl.logs[("job-nul", 0, 1, "stderr")]  # the user reads it there
    assert by_job["job-next"]["exit_code"] == 0
    assert ctl.logs[("job-next", 0, 1, "stdout")] == "next one\n"
    assert agent.poll() is None
    agent.send_signal(signal.SIGTERM)
    assert agent.wait(timeout=15) == 0
