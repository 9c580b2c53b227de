"""A task's secrets on its node (agent/secrets.py through the real runner, real subprocesses):
a variable, and a 0400 file of the task's account in a 0700 directory named by
GPUFLEET_SECRETS_DIR; gone when the task is reaped, when its launch fails, and after an agent
restart; never in the agent's log."""

from __future__ import annotations

import json
import logging
import os
import stat
import sys
from pathlib import Path

import pytest

from gpufleet.agent.runner import EXIT_REFUSED, RunnerEvent, TaskRunner
from gpufleet.agent.secrets import SUBDIR
from gpufleet.api.schemas import AgentCommand
from gpufleet.base.clock import ManualClock

PY = sys.executable
VALUE = "v4lue-of-the-secret"
# the task reports what it got: its variable, the file's text, mode, owner and its directory's
REPORT = """
import json, os, stat
d = os.environ["GPUFLEET_SECRETS_DIR"]
p = os.path.join(d, "tls.pem")
st, dst = os.stat(p), os.stat(d)
print(json.dumps({"env": os.environ["API_KEY"], "file": open(p).read(), "dir": d,
    "mode": stat.S_IMODE(st.st_mode), "uid": st.st_uid, "dir_mode": stat.S_IMODE(dst.st_mode),
    "dir_uid": dst.st_uid}), flush=True)
"""


def launch(code: str, job: str = "j1", **kw: object) -> AgentCommand:
    secrets = [
        {"name": "api-key", "scope": "user", "owner": "alice", "env": "API_KEY", "value": VALUE},
        {"name": "cert", "scope": "cluster", "owner": "", "file": "tls.pem", "value": "PEM\n"},
    ]
    return AgentCommand.model_validate(
        {"kind": "launch", "job": job, "attempt": 0, "rank": 0, "command": [PY, "-c", code],
         "secrets": secrets, **kw}
    )  # fmt: skip


@pytest.fixture
def runner(tmp_path: Path) -> TaskRunner:
    r = TaskRunner(tmp_path, str, ManualClock(100.0))
    yield r  # type: ignore[misc]
    for k in r.live():
        r.kill(k, 0, "test over")
    r.wait(5.0)


def exited(events: list[RunnerEvent]) -> RunnerEvent:
    [ev] = [e for e in events if e.kind == "exited"]
    return ev


def test_a_task_gets_its_secrets_as_a_variable_and_a_private_file_gone_after_it(
    runner: TaskRunner, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    assert runner.launch(launch(REPORT)) == [RunnerEvent("started", ("j1", 0, 0))]
    assert exited(runner.wait(10.0)).exit_code == 0
    out, _ = runner.log_paths(("j1", 0, 0))
    got = json.loads(out.read_text())
    assert (got["env"], got["file"]) == (VALUE, "PEM\n")
    assert (got["mode"], got["dir_mode"]) == (0o400, 0o700)
    assert got["uid"] == got["dir_uid"] == os.geteuid()  # the task's account (not root: ours)
    assert got["dir"].endswith(f"/{SUBDIR}") and not Path(got["dir"]).exists()
    assert not runner.tmp_path(("j1", 0, 0)).exists()
    assert VALUE not in caplog.text and "PEM" not in caplog.text


def test_a_launch_that_fails_after_the_delivery_leaves_no_secret(runner: TaskRunner) -> None:
    c = launch("pass").model_copy(update={"command": ["/no/such/program"]})
    assert exited(runner.launch(c)).exit_code != 0
    assert not runner.tmp_path(("j1", 0, 0)).exists()


def test_a_bad_file_or_variable_name_is_refused_before_anything_is_written(
    runner: TaskRunner,
) -> None:
    for field, bad in (("file", "../escape"), ("env", "GPUFLEET_TOKEN")):
        c = launch("pass", job=f"bad-{field}")
        c.secrets[1 if field == "file" else 0] = c.secrets[1 if field == "file" else 0].model_copy(
            update={field: bad}
        )
        ev = exited(runner.launch(c))
        assert ev.exit_code == EXIT_REFUSED and bad in ev.why and VALUE not in ev.why
        assert not runner.tmp_path((f"bad-{field}", 0, 0)).exists()
    assert not (runner.data_dir / "escape").exists()


def test_a_restarted_agent_removes_the_secrets_left_behind(tmp_path: Path) -> None:
    old = TaskRunner(tmp_path, str, ManualClock(100.0))
    old.launch(launch("import time; print('ready', flush=True); time.sleep(60)", job="left"))
    d = old.tmp_path(("left", 0, 0)) / SUBDIR
    assert stat.S_IMODE((d / "tls.pem").stat().st_mode) == 0o400
    # a directory whose pid file was lost (an agent killed between delivery and start)
    stray = tmp_path / "stray" / "0" / "rank0.tmpdir" / SUBDIR
    stray.mkdir(parents=True)
    (stray / "k").write_text(VALUE)
    (stray / "k").chmod(0o400)
    new = TaskRunner(tmp_path, str, ManualClock(100.0))
    assert new.kill_orphans() == [("left", 0, 0)]
    old.wait(10.0)
    assert not d.exists() and not stray.exists()


def test_a_poll_answer_that_does_not_parse_is_reported_without_its_values() -> None:
    """A newer controller's field (here ``rotation`` on a secret) must not put the value in
    the agent's log through pydantic's message, which quotes its input."""
    import httpx

    from gpufleet.client.http import AgentClient, CommandsUnreadable

    secret = {"name": "k", "scope": "user", "owner": "a", "env": "K", "value": VALUE, "rotation": 2}
    launch = {"kind": "launch", "job": "j", "attempt": 1, "rank": 0, "secrets": [secret]}
    answer = httpx.Response(200, json={"commands": [launch]})
    c = AgentClient("http://ctl.test", "tok", transport=httpx.MockTransport(lambda r: answer))
    with pytest.raises(CommandsUnreadable) as e:
        c.commands("n", wait_s=0)
    assert "commands.0.secrets.0.rotation" in str(e.value) and VALUE not in str(e.value)
    assert e.value.__cause__ is None and e.value.__suppress_context__
