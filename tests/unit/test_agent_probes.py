"""Readiness and liveness probes: the pure state machine on numbers, then the real executor
against real parts (an HTTP server in a subprocess that answers 200, then 503, then hangs under
SIGSTOP; a closed port; a TCP listener; commands that exit 0, 2 or outlive their timeout).
Thresholds and delays run on a ManualClock; nothing waits on real time beyond a probe's own
(short) timeout."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from gpufleet.agent import sandbox
from gpufleet.agent.accounts import Account
from gpufleet.agent.probes import (
    Due,
    ProbeExecutor,
    ProbeKind,
    ProbeResult,
    Probes,
    ProbeState,
    ProbeTarget,
    ReplicaProbe,
    command_probe,
    free_port,
    http_probe,
    probes_of,
    run_probe,
    tcp_probe,
    tick,
)
from gpufleet.agent.runner import TaskRunner
from gpufleet.agent.tasks import Key
from gpufleet.api.schemas import AgentCommand
from gpufleet.base.clock import ManualClock
from gpufleet.model.errors import SpecError
from gpufleet.model.service import Probe

SHORT = 0.2  # every real probe's timeout here
KEY = ("svc1", 1, 0)


def mk(kind: str, **kw: object) -> Probe:
    """The model's probe, from the flat fields these tests name (``type`` defaults as: a
    ``command`` makes a command probe, a ``path`` an HTTP one, else TCP)."""
    how = kw.pop("type", "command" if "command" in kw else "http" if "path" in kw else "tcp")
    path, port, command = kw.pop("path", "/"), kw.pop("port", None), kw.pop("command", None)
    where: object = {"path": path} if how == "http" else {}
    if how == "command":
        where = command
    elif port is not None:
        where = {**where, "port": port}  # type: ignore[dict-item]
    return Probe.from_dict({str(how): where, **kw}, kind=kind)


def spec(kind: ProbeKind = "readiness", **kw: object) -> tuple[ProbeKind, Probe]:
    return kind, mk(kind, **{"type": "tcp", "period_s": 1.0, **kw})


# ----- the state machine ------------------------------------------------------------------------


def test_first_probe_waits_for_the_initial_delay_then_runs_every_period() -> None:
    st = ProbeState(*spec(initial_delay_s=5, period_s=2), started_at=100.0)
    assert st.next_due(100.0) == 105.0
    assert not st.is_due(104.9)
    assert st.is_due(105.0)
    st.on_sent(105.5)
    assert st.next_due(106.0) is None  # in flight: never two at once
    assert st.on_result(True, 105.6, "connected") is not None
    assert st.next_due(106.0) == 107.5  # a period after the previous probe started
    st.on_sent(107.5)
    st.on_result(False, 110.0, "timed out after 3 s")  # came back after its period
    assert st.next_due(110.0) == 110.0  # due at once


def test_readiness_needs_success_threshold_in_a_row_and_failure_threshold_to_lose_it() -> None:
    st = ProbeState(*spec(success_threshold=2, failure_threshold=3), 0.0)
    assert st.ready is None
    assert st.on_result(True, 1, "HTTP 200") is None
    assert st.on_result(False, 2, "HTTP 503") is None  # breaks the run of successes
    assert st.on_result(True, 3, "HTTP 200") is None
    t = st.on_result(True, 4, "HTTP 200")
    assert t is not None and (t.kind, t.ok, t.at) == ("readiness", True, 4)
    assert "HTTP 200" in t.why and st.ready is True
    assert st.on_result(True, 5, "HTTP 200") is None  # no news
    assert st.on_result(False, 6, "HTTP 503") is None
    assert st.on_result(False, 7, "HTTP 503") is None
    t = st.on_result(False, 8, "connect refused")
    assert t is not None and not t.ok and "connect refused" in t.why and "3" in t.why
    assert st.on_result(False, 9, "connect refused") is None  # said once
    assert st.on_result(True, 10, "HTTP 200") is None  # one success of two
    assert st.on_result(True, 11, "HTTP 200") is not None


def test_a_replica_never_ready_is_reported_unready_once_with_its_reason() -> None:
    st = ProbeState(*spec(failure_threshold=2), 0.0)
    assert st.on_result(False, 1, "connect refused") is None
    t = st.on_result(False, 2, "connect refused")
    assert t is not None and not t.ok and t.why.endswith("connect refused")
    assert st.on_result(False, 3, "connect refused") is None


def test_liveness_declares_dead_after_failure_threshold_in_a_row_and_stops() -> None:
    st = ProbeState(*spec("liveness", failure_threshold=3), 0.0)
    assert st.on_result(False, 1, "HTTP 500") is None
    assert st.on_result(False, 2, "HTTP 500") is None
    assert st.on_result(True, 3, "HTTP 200") is None  # alive: no news, the count starts again
    assert st.on_result(False, 4, "HTTP 500") is None
    assert st.on_result(False, 5, "HTTP 500") is None
    t = st.on_result(False, 6, "timed out after 1 s")
    assert t is not None and (t.kind, t.ok) == ("liveness", False)
    assert "3 times" in t.why and "timed out after 1 s" in t.why
    assert st.dead and st.next_due(7) is None and not st.is_due(100)
    assert st.on_result(False, 7, "x") is None


def test_a_launch_carries_the_model_probe_and_every_problem_is_named() -> None:
    """One probe type: the agent reads a launch's probes with the model's own reader."""
    s = mk("readiness", path="/healthz")
    assert (s.kind, s.port, s.period_s, s.timeout_s) == ("http", None, 10.0, 1.0)
    assert (s.failure_threshold, s.success_threshold, s.initial_delay_s) == (3, 1, 0.0)
    live = mk("liveness", command=["true"])
    assert probes_of({"readiness": s.to_dict(), "liveness": live.to_dict()}) == [
        ("readiness", s),
        ("liveness", live),
    ]
    with pytest.raises(SpecError) as e:
        probes_of(
            {
                "readiness": {
                    "http": {"path": "x", "port": 70000},
                    "timeout_s": 0,
                    "failure_threshold": 0,
                }
            }
        )
    for field in ("http.path", "http.port", "timeout_s", "failure_threshold"):
        assert f"probes.readiness.{field}" in str(e.value)  # every problem at once
    with pytest.raises(SpecError, match="must be 1 for a liveness"):
        mk("liveness", type="tcp", success_threshold=2)
    with pytest.raises(SpecError, match="unknown key"):
        mk("readiness", type="tcp", perod_s=2)
    with pytest.raises(SpecError, match="argv"):
        mk("readiness", command="true")
    with pytest.raises(SpecError, match="startup"):
        probes_of({"startup": {"tcp": {}}})


def test_the_book_marks_in_flight_drops_stale_results_and_reports_records() -> None:
    book = Probes()
    target = ProbeTarget(env={"PORT": "8080"})
    book.add(KEY, [spec(initial_delay_s=1), spec("liveness", failure_threshold=1)], target, 0.0)
    assert book.next_due(0.0) == 0.0  # liveness has no delay
    (live,) = book.due(0.0)
    assert live.kind == "liveness" and live.target.port_for(live.probe) == 8080
    assert book.due(0.5) == []  # liveness in flight, readiness not due yet
    (ready,) = book.due(1.0)
    out = book.results(
        [
            ProbeResult(KEY, "readiness", ready.token, True, "HTTP 200", 1.1),
            ProbeResult(KEY, "readiness", ready.token, True, "HTTP 200", 1.1),  # again: dropped
            ProbeResult(KEY, "liveness", live.token + 99, False, "HTTP 500", 1.2),  # not its run
        ]
    )
    assert out == [ReplicaProbe("svc1", 1, "readiness", True, "ready: HTTP 200", 0)]
    assert out[0].to_json() == {
        "job_id": "svc1",
        "attempt": 1,
        "rank": 0,
        "kind": "readiness",
        "ok": True,
        "why": "ready: HTTP 200",
    }
    assert book.state(KEY, "liveness").in_flight  # type: ignore[union-attr]
    book.remove(KEY)  # the replica exited: its probe in flight comes back to nobody
    assert book.results([ProbeResult(KEY, "liveness", live.token, False, "x", 2.0)]) == []
    assert book.due(100.0) == [] and book.next_due(100.0) is None


# ----- real parts ------------------------------------------------------------------------------

SERVER = r"""
import http.server, sys
codes = [int(c) for c in sys.argv[1].split(",")]
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        code = codes.pop(0) if len(codes) > 1 else codes[0]
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"""


@pytest.fixture
def server() -> Iterator[tuple[subprocess.Popen[str], int]]:
    """A real HTTP server: 200 for the first request, 503 after."""
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER, "200,503"], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    port = int(proc.stdout.readline())
    yield proc, port
    proc.send_signal(signal.SIGCONT)
    proc.kill()
    proc.wait(5)


@pytest.fixture
def executor() -> Iterator[ProbeExecutor]:
    ex = ProbeExecutor(ManualClock(0.0), max_workers=8)
    yield ex
    ex.shutdown()


def wait_results(ex: ProbeExecutor, n: int, timeout_s: float = 10.0) -> list[ProbeResult]:
    out: list[ProbeResult] = []
    while len(out) < n:
        got = ex.completed(wait_s=timeout_s)
        assert got, f"only {len(out)} of {n} probes came back"
        out += got
    return out


def closed_port() -> int:
    return free_port("127.0.0.1")  # released: nothing listens there


def test_http_probe_reads_the_status_and_a_stopped_server_times_out(
    server: tuple[subprocess.Popen[str], int],
) -> None:
    proc, port = server
    # a server that answers is given time to (a loaded machine is slow); only the stopped
    # one is held to the short timeout, which it can only run out
    assert http_probe("127.0.0.1", port, "/healthz", 30.0) == (True, "HTTP 200")
    assert http_probe("127.0.0.1", port, "/healthz", 30.0) == (False, "HTTP 503")
    proc.send_signal(signal.SIGSTOP)  # the kernel still accepts; nobody answers
    assert http_probe("127.0.0.1", port, "/healthz", SHORT) == (False, "timed out after 0.2 s")
    assert http_probe("127.0.0.1", closed_port(), "/", SHORT) == (False, "connect refused")


def test_tcp_probe_against_a_listener_and_a_closed_port() -> None:
    with socket.create_server(("127.0.0.1", 0)) as lsn:
        port = lsn.getsockname()[1]
        assert tcp_probe("127.0.0.1", port, SHORT) == (True, "connected")
    assert tcp_probe("127.0.0.1", port, SHORT) == (False, "connect refused")


def test_readiness_and_liveness_through_the_executor_on_the_injected_clock(
    server: tuple[subprocess.Popen[str], int], executor: ProbeExecutor
) -> None:
    """The agent's tick against a real server: ready on 200, unready after two 503s, then
    the stopped server fails liveness by timeout. The clock moves only when the test says."""
    proc, port = server
    clock = executor.clock
    assert isinstance(clock, ManualClock)
    book = Probes()
    readiness = mk(
        "readiness", **{"path": "/ready", "period_s": 1, "timeout_s": SHORT, "failure_threshold": 2}
    )
    target = ProbeTarget(host="127.0.0.1", env={"PORT": str(port)})  # the default port: $PORT
    book.add(KEY, [("readiness", readiness)], target, started_at=0.0)

    def turn(expect: int) -> list[ReplicaProbe]:
        sent = book.due(clock.now())
        assert len(sent) == expect
        for d in sent:
            executor.submit(d)
        return book.results(wait_results(executor, expect))

    assert turn(1) == [ReplicaProbe("svc1", 1, "readiness", True, "ready: HTTP 200")]
    assert book.due(clock.now()) == []  # not before its period
    clock.advance(1.0)
    assert turn(1) == []  # one 503 of two
    clock.advance(1.0)
    (t,) = turn(1)
    assert (t.kind, t.ok) == ("readiness", False) and t.why.endswith("HTTP 503")

    proc.send_signal(signal.SIGSTOP)
    http_live = mk("liveness", **{"path": "/", "timeout_s": SHORT, "period_s": 1})
    key2 = ("svc1", 1, 1)
    book.add(key2, [("liveness", http_live)], target, 2.0)
    for _ in range(2):
        clock.advance(1.0)
        assert turn(2) == []  # readiness is unready already; liveness counts
    clock.advance(1.0)
    out = turn(2)
    dead = [r for r in out if r.kind == "liveness"]
    assert dead == [
        ReplicaProbe(
            "svc1", 1, "liveness", False, "liveness probe failed 3 times in a row: "
            "timed out after 0.2 s", 1
        )
    ]  # fmt: skip
    assert book.state(key2, "liveness").dead  # type: ignore[union-attr]
    clock.advance(1.0)
    assert [d.key for d in book.due(clock.now())] == [KEY]  # the dead one is probed no more


def test_tick_starts_what_is_due_and_reports_what_came_back(executor: ProbeExecutor) -> None:
    book = Probes()
    with socket.create_server(("127.0.0.1", 0)) as lsn:
        target = ProbeTarget(env={"PORT": str(lsn.getsockname()[1])})
        book.add(KEY, [spec(timeout_s=SHORT)], target, 0.0)
        results = tick(book, executor, 0.0)  # sent; back already, or not yet
        assert book.due(0.0) == []  # in flight, or done and due a period later
        while not results:
            results = book.results(executor.completed(wait_s=5.0))
    assert results == [ReplicaProbe("svc1", 1, "readiness", True, "ready: connected")]


def test_command_probe_exit_codes_environment_and_reason() -> None:
    target = ProbeTarget(env={"PATH": "/usr/bin:/bin", "FOO": "bar"})
    assert command_probe(["sh", "-c", 'test "$FOO" = bar'], target, 5) == (True, "exit 0")
    assert command_probe(
        ["sh", "-c", "echo out; echo first >&2; echo 'model not loaded' >&2; exit 2"], target, 5
    ) == (False, "exit 2: model not loaded")
    assert command_probe(["sh", "-c", "echo only-stdout; exit 1"], target, 5) == (
        False,
        "exit 1: only-stdout",
    )
    ok, why = command_probe(["/nonexistent/probe"], target, 5)
    assert not ok and ("No such file" in why or "failed to execute" in why), why
    spec_ = mk("readiness", **{"command": ["true"]})
    assert run_probe(spec_, target) == (True, "exit 0")
    assert run_probe(mk("readiness", **{"type": "tcp"}), ProbeTarget()) == (
        False,
        "no port: the probe names none and the task has no $PORT",
    )


def test_a_command_probe_past_its_timeout_is_killed_with_its_whole_group(
    tmp_path: Path,
) -> None:
    pids = tmp_path / "pids"
    script = f"sleep 30 & echo $! > {pids}; echo $$ >> {pids}; sleep 30"
    assert command_probe(["sh", "-c", script], ProbeTarget(), SHORT) == (
        False,
        "timed out after 0.2 s",
    )
    left = [int(p) for p in pids.read_text().split()]
    assert len(left) == 2

    def gone(pid: int) -> bool:  # a SIGKILL lands when the process is next scheduled
        try:
            return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE  # dead, not reaped
        except psutil.NoSuchProcess:
            return True

    for pid in left:  # the child it started in the background too
        deadline = time.monotonic() + 5.0
        while not gone(pid):
            assert time.monotonic() < deadline, f"{pid} still runs"
            time.sleep(0.01)


def test_one_hanging_probe_does_not_hold_up_the_others(
    server: tuple[subprocess.Popen[str], int], executor: ProbeExecutor
) -> None:
    """A stopped server's probe waits out its timeout in its own worker; the fast probes
    submitted after it all come back while it is still pending."""
    proc, port = server
    proc.send_signal(signal.SIGSTOP)
    hang = mk("readiness", **{"path": "/", "port": port, "timeout_s": 1.0})
    executor.submit(Due(("hang", 1, 0), "readiness", hang, ProbeTarget(), 1))
    with socket.create_server(("127.0.0.1", 0)) as lsn:
        fast_port = lsn.getsockname()[1]
        keys = [(f"fast{i}", 1, 0) for i in range(6)]
        for i, key in enumerate(keys):
            s = (
                mk("readiness", **{"command": ["true"], "timeout_s": 1.0})
                if i % 2
                else mk("readiness", **{"type": "tcp", "port": fast_port})
            )
            executor.submit(Due(key, "readiness", s, ProbeTarget(), 1))
        first = wait_results(executor, len(keys))
    assert sorted(r.key for r in first[: len(keys)]) == sorted(keys)
    assert all(r.ok for r in first[: len(keys)])
    if len(first) == len(keys):  # the hanging one is still out
        assert executor.pending == 1
        (last,) = wait_results(executor, 1)
    else:
        last = first[-1]
    assert (last.key, last.ok, last.why) == (("hang", 1, 0), False, "timed out after 1 s")


# ----- as the task's own account -----------------------------------------------------------------

_NEEDS_ROOT = pytest.mark.skipif(
    os.geteuid() != 0
    or not all(shutil.which(t) for t in ("useradd", "userdel", "setpriv", "unshare", "mount")),
    reason="needs root, useradd/userdel and setpriv/unshare/mount (util-linux)",
)


@pytest.fixture
def account() -> Iterator[Account]:
    name = f"gfp{uuid.uuid4().hex[:6]}"
    subprocess.run(
        ["useradd", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/bin/sh", name],
        check=True,
    )
    try:
        yield Account.of(pwd.getpwnam(name))
    finally:
        subprocess.run(["userdel", name], check=False)


@_NEEDS_ROOT
def test_a_command_probe_runs_as_the_task_owner_with_its_private_tmp(
    tmp_path: Path, account: Account
) -> None:
    """As the runner starts the task: its uid, its environment, its /tmp (the task's private
    directory bind-mounted there), in a mount namespace of its own."""
    tmp = tmp_path / "rank0.tmpdir"
    os.chmod(tmp_path, 0o711)
    sandbox.fresh_tmp(tmp, account)
    (tmp / "marker").write_text("task's")
    target = ProbeTarget(
        env={"PATH": "/usr/bin:/bin", "FOO": "bar"}, account=account, tmp=tmp, cwd="/"
    )
    check = (
        f'test "$(id -u)" = {account.uid} && test "$FOO" = bar && test -f /tmp/marker '
        "&& touch /tmp/written-by-probe"
    )
    ok, why = command_probe(["sh", "-c", check], target, 5)
    assert (ok, why) == (True, "exit 0")
    assert (tmp / "written-by-probe").stat().st_uid == account.uid
    ok, why = command_probe(["sh", "-c", "id -u >&2; exit 3"], target, 5)
    assert (ok, why) == (False, f"exit 3: {account.uid}")


# ----- the replica's port -----------------------------------------------------------------------


def test_free_port_is_bindable() -> None:
    port = free_port()
    with socket.create_server(("0.0.0.0", port)):  # free on every address
        pass
    assert free_port("127.0.0.1") > 0


# ----- against a task the runner started ---------------------------------------------------------

HTTP_TASK = r"""
import http.server, os
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/ready" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", int(os.environ["PORT"])), H).serve_forever()
"""


@pytest.fixture
def runner(tmp_path: Path) -> Iterator[TaskRunner]:
    r = TaskRunner(tmp_path / "data", lambda gpus: "", ManualClock(0.0))
    yield r
    for k in r.live():  # never leave a process behind
        r.kill(k, 0, "test over")
    r.wait(5.0)


def launch(runner: TaskRunner, command: list[str], port: int, **kw: object) -> Key:
    cmd = AgentCommand.model_validate(
        {
            "kind": "launch",
            "job": "svc9",
            "attempt": 1,
            "rank": 0,
            "command": command,
            "env": {"PORT": str(port)},
            **kw,
        }
    )
    (ev,) = runner.launch(cmd)
    assert ev.kind == "started", ev.why
    return ev.key


def test_probes_of_a_task_the_runner_started_use_its_port_and_environment(
    runner: TaskRunner,
) -> None:
    port = free_port("127.0.0.1")
    key = launch(runner, [sys.executable, "-c", HTTP_TASK], port)
    target = runner.probe_target(key, "127.0.0.1")
    assert target is not None and target.port_for(spec()[1]) == port
    ready = mk("readiness", **{"path": "/ready", "timeout_s": 1.0})
    deadline = time.monotonic() + 10.0
    while (got := run_probe(ready, target)) != (True, "HTTP 200"):  # until it listens
        assert got[1] == "connect refused", got
        assert time.monotonic() < deadline, "the task never listened on its $PORT"
        time.sleep(0.05)
    assert run_probe(mk("readiness", **{"path": "/x"}), target) == (
        False,
        "HTTP 404",
    )
    check = mk(
        "liveness",
        **{
            "command": [
                "sh",
                "-c",
                f'test "$PORT" = {port} && test -d "$TMPDIR"',
            ]
        },
    )
    assert run_probe(check, target) == (True, "exit 0")
    assert runner.probe_target(("nope", 1, 0), "127.0.0.1") is None


@_NEEDS_ROOT
def test_a_command_probe_of_a_task_run_as_its_owner_runs_as_that_owner(
    runner: TaskRunner, account: Account
) -> None:
    if not runner.as_root:
        pytest.skip("the runner is not root")
    key = launch(runner, ["sleep", "30"], 4321, run_as=account.name)
    target = runner.probe_target(key, "127.0.0.1")
    assert target is not None and target.account == account
    probe = mk(
        "liveness",
        **{"command": ["sh", "-c", f'test "$(id -u)" = {account.uid} && test "$PORT" = 4321']},
    )
    assert run_probe(probe, target) == (True, "exit 0")


def test_a_command_probe_ends_with_its_command_even_if_a_child_holds_its_output(
    tmp_path: Path,
) -> None:
    """The exit decides; what it left running in its group is killed."""
    pid_file = tmp_path / "pid"
    script = f"sleep 30 & echo $! > {pid_file}; echo 'bye' >&2; exit 4"
    assert command_probe(["sh", "-c", script], ProbeTarget(), 5.0) == (False, "exit 4: bye")
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 5.0
    while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the probe's child still runs"
        time.sleep(0.01)


def test_a_spec_cannot_aim_the_agent_elsewhere_or_smuggle_bytes() -> None:
    with pytest.raises(SpecError, match="unknown key"):
        mk("readiness", path="/", host="169.254.169.254")
    with pytest.raises(SpecError, match="path: must have no spaces"):
        mk("readiness", path="/x HTTP/1.1\r\nHost: evil")
    with pytest.raises(SpecError, match="NUL"):
        mk("readiness", command=["sh", "-c", "true\0"])
