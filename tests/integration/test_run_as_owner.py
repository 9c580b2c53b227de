"""A root agent runs each job as its owner's Unix account, as Slurm does: two real users that
this test creates, their jobs through a real controller and agent. Each job runs with its own
uid, user B can neither read A's environment in /proc nor signal A's task, /tmp is private to
each task, and the logs are 0600 and the owner's. A user with no account on the node is
refused, and the job's events say why and how to fix it."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil  # type: ignore[import-untyped]
import pytest

from gpufleet.agent.slurmbin import unreachable
from gpufleet.client import ApiError, Client
from gpufleet.ops.localcluster import LocalCluster
from support.waiting import wait_for
from userpython import user_python

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        os.geteuid() != 0, reason="needs root: it creates two Unix users and a root agent"
    ),
    pytest.mark.skipif(
        not all(shutil.which(t) for t in ("useradd", "userdel", "setpriv", "unshare", "mount")),
        reason="needs useradd/userdel (passwd) and setpriv/unshare/mount (util-linux)",
    ),
]
FAST = {"heartbeat_s": 0.5, "lease_s": 1.5, "node_grace_s": 4.0, "schedule_interval_s": 0.5}
AGENT_SECRET = "GPUFLEET_TEST_AGENT_SECRET"
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT"}


def log_of(c: Client, job: str, stream: str = "stdout") -> str:
    return c.logs(job, stream=stream).data


@pytest.fixture(scope="module")
def users() -> Iterator[list[str]]:
    tag = uuid.uuid4().hex[:6]
    names = [f"gfa{tag}", f"gfb{tag}"]
    for n in names:
        subprocess.run(
            ["useradd", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/bin/sh", n],
            check=True,
        )
    try:
        yield names
    finally:
        for n in names:
            subprocess.run(["userdel", n], check=False)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, users: list[str]) -> Iterator[LocalCluster]:
    """Stopped before the users are removed (their tasks with it)."""
    c = LocalCluster(
        tmp_path_factory.mktemp("run-as"),
        agents=1,
        gpus="2xH100",
        fallback_account="",  # a user without an account here is refused
        **FAST,  # type: ignore[arg-type]
    )
    os.environ[AGENT_SECRET] = "the-agents-own"  # the agent inherits it (LocalCluster._env)
    try:
        c.start()
        del os.environ[AGENT_SECRET]
        yield c
    finally:
        os.environ.pop(AGENT_SECRET, None)
        c.stop()
        for log in sorted(c.data_dir.glob("*.log")):
            print(f"----- {log.name}\n" + "\n".join(log.read_text().splitlines()[-30:]))


def state(c: Client, job: str, want: set[str], timeout_s: float = 60.0) -> str:
    def check() -> str | None:
        s = c.job(job).state
        if s in TERMINAL and s not in want:
            raise AssertionError(f"job {job} ended {s}: {c.job(job).events}")
        return s if s in want else None

    return str(wait_for(f"job {job} in {want}", check, timeout_s))


A_JOB = (
    "id -u; echo mine > /tmp/a-marker; echo TMP=$(ls -A /tmp | tr '\\n' ' '); "
    "echo TMPDIR=$TMPDIR; echo ready; exec sleep 120"
)
# $1: the pid of A's task
B_JOB = (
    "id -u; "
    "if cat /proc/$1/environ >/dev/null 2>&1; then echo READ-ENV; else echo no-env; fi; "
    "if kill -TERM $1 2>/dev/null; then echo SIGNALLED; else echo no-signal; fi; "
    "if [ -e /tmp/a-marker ]; then echo SAW-A-TMP; else echo private-tmp; fi"
)


def b_tries(bob: Client, target: int) -> list[str]:
    """What B's job printed when it tried ``target`` (B_JOB)."""
    (b_job,) = bob.submit(
        {"name": "b", "command": ["/bin/sh", "-c", B_JOB, "sh", str(target)], "time_limit_s": 120}
    )
    state(bob, b_job, {"SUCCEEDED"})
    out = wait_for("B's whole log", lambda: bob.logs(b_job).complete and log_of(bob, b_job), 60)
    return str(out).splitlines()


def test_jobs_run_as_their_owners_and_cannot_touch_each_other(
    cluster: LocalCluster, users: list[str]
) -> None:
    a_name, b_name = users
    a_uid, b_uid = (pwd.getpwnam(n).pw_uid for n in users)
    alice, bob = cluster.user(a_name), cluster.user(b_name)
    (a_job,) = alice.submit(
        {
            "name": "a",
            "command": ["/bin/sh", "-c", A_JOB],
            "env": {"WANDB_API_KEY": "a-secret"},
            "time_limit_s": 300,
        }
    )
    state(alice, a_job, {"RUNNING"})
    wait_for("A's task ready", lambda: "ready" in log_of(alice, a_job), 60)
    a_out = log_of(alice, a_job).splitlines()
    assert a_out[0] == str(a_uid)
    assert "TMP=a-marker" in a_out  # an empty /tmp of its own, then what it wrote
    assert "TMPDIR=/tmp" in a_out
    (pidfile,) = (cluster.data_dir / "node-0" / a_job).glob("*/rank0.pid")
    keeper = psutil.Process(int(json.loads(pidfile.read_text())["pid"]))
    # the pid file names the task's keeper (the agent's account: ADR 0031), the task its child
    assert keeper.uids().real == os.geteuid()
    (task,) = keeper.children()
    a_pid = task.pid
    assert task.cmdline() == ["sleep", "120"]  # the job's own command (its exec), no wrapper
    assert set(task.uids()) == {a_uid} and set(task.gids()) == {pwd.getpwnam(a_name).pw_gid}
    assert os.stat(f"/proc/{a_pid}").st_uid == a_uid
    environ = Path(f"/proc/{a_pid}/environ").read_bytes().split(b"\0")
    assert b"WANDB_API_KEY=a-secret" in environ
    names = {v.split(b"=", 1)[0] for v in environ}
    assert not names & {AGENT_SECRET.encode(), b"PYTHONUNBUFFERED"}  # the agent's, not A's

    # B tries A's task and its keeper: it can neither read their environment nor signal them
    for target in (a_pid, keeper.pid):
        assert b_tries(bob, target) == [str(b_uid), "no-env", "no-signal", "private-tmp"]
    assert alice.job(a_job).state == "RUNNING"  # B's SIGTERMs never reached it
    assert task.is_running() and keeper.is_running()

    attempt_dir = pidfile.parent
    for f in (attempt_dir / "rank0.out", attempt_dir / "rank0.err"):
        st = f.stat()
        assert (stat.S_IMODE(st.st_mode), st.st_uid) == (0o600, a_uid), f
    for d in (attempt_dir, attempt_dir.parent):  # the agent's own: a job plants no symlink
        st = d.stat()
        assert (stat.S_IMODE(st.st_mode), st.st_uid) == (0o700, 0), d
    tmpdir = attempt_dir / "rank0.tmpdir"
    assert (tmpdir / "a-marker").read_text() == "mine\n"  # what A's /tmp really is
    assert (stat.S_IMODE(tmpdir.stat().st_mode), tmpdir.stat().st_uid) == (0o700, a_uid)

    alice.cancel(a_job)
    state(alice, a_job, {"CANCELLED"})
    wait_for("A's private /tmp removed", lambda: not tmpdir.exists(), 30)


def test_a_user_without_an_account_on_the_node_is_refused_saying_how_to_fix_it(
    cluster: LocalCluster,
) -> None:
    """At submit: the node was asked about the user and said it has no such account (ADR
    0037; tests/integration/test_identity.py holds the rest)."""
    ghost = cluster.user("no-account-gf")
    with pytest.raises(ApiError) as e:
        ghost.submit({"name": "ghost", "command": ["/bin/true"], "time_limit_s": 60})
    assert e.value.status == 422
    why = str(e.value)
    assert "user 'no-account-gf' has no Unix account on any node that could run this job " in why
    assert "(node-0)" in why and "useradd no-account-gf" in why


def test_a_jobs_owner_finds_srun_and_scontrol_on_path(users: list[str]) -> None:
    """The agent's slurm-bin is reachable by a job's own account (the data dir passable, the
    scripts 0755 and root's), first on the PATH of a job that has step hosts. Its own cluster,
    outside /tmp: a task's /tmp is its own, which hides a data dir under pytest's."""
    root = Path(tempfile.mkdtemp(prefix="gpufleet-slurmbin-", dir="/var/tmp"))
    root.chmod(0o711)
    owner = pwd.getpwnam(users[0])
    with user_python(owner.pw_uid, owner.pw_gid) as python:
        c = LocalCluster(
            root / "cluster",
            agents=1,
            gpus="2xH100",
            agent_python=python,
            **FAST,  # type: ignore[arg-type]
        )
        try:
            c.start()
            bindir = c.data_dir / "node-0" / "slurm-bin"
            assert unreachable(bindir) is None
            out = _path_job(c.user(users[0]))
        finally:
            c.stop()
            shutil.rmtree(root, ignore_errors=True)
    assert out == [f"srun ok {bindir}/srun", f"scontrol ok {bindir}/scontrol", "#!"], out


def _path_job(alice: Client) -> list[str]:
    script = (
        'for c in srun scontrol; do p=$(command -v $c) && test -x "$p" && test -r "$p" '
        '&& echo "$c ok $p"; done; head -c 2 "$(command -v srun)"; echo'
    )
    (job,) = alice.submit(
        {
            "name": "path",
            "workers": 2,
            "gpus_per_worker": 1,
            "batch": True,  # its script may run srun: its other rank is the step daemon
            "command": ["/bin/sh", "-c", script],
            "time_limit_s": 120,
        }
    )
    state(alice, job, {"SUCCEEDED"})
    return log_of(alice, job).splitlines()


def test_a_job_cannot_have_its_output_written_where_its_owner_may_not_write(
    cluster: LocalCluster, users: list[str]
) -> None:
    """The root agent never opens ``--output`` itself: a path (with ``..``) into a directory
    only root may write fails the job as Slurm fails it, and no file is made there as root."""
    private = Path(tempfile.mkdtemp(prefix="gpufleet-root-only-", dir="/var/tmp"))
    private.chmod(0o755)  # others may enter it, not write in it
    try:
        alice = cluster.user(users[0])
        target = private / "owned.out"
        (job,) = alice.submit(
            {
                "name": "owned",
                "gpus_per_worker": 0,
                "batch": True,
                "command": ["/bin/sh", "-c", "echo written"],
                "output": f"{private}/../{private.name}/owned.out",
                "time_limit_s": 60,
            }
        )
        state(alice, job, {"FAILED"})
        assert not target.exists()
        assert sorted(private.iterdir()) == []
    finally:
        shutil.rmtree(private, ignore_errors=True)
