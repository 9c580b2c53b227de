"""Identity that matches the site (ADR 0037): the nodes look their users up through NSS, and a
job runs only where its user has an account. Real Unix users this test creates, a real
controller and root agents; node-1 runs in a mount namespace of its own whose /etc/passwd
gives one user another UID (a site whose nodes disagree), as NSS there reads it.

- a user no node has is refused at the first submit, naming the user and the nodes;
- where the controller could not know at submit (it did not wait for the nodes), the job is
  held with its Reason in ``gpufleet jobs`` and ``squeue`` until the account exists, then runs
  as that user; once the nodes have answered, the next submit is refused at once;
- a UID that differs between nodes is reported."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.api.schemas import TokenCreate
from gpufleet.client import ApiError, Client
from gpufleet.ops.localcluster import LocalCluster
from support.waiting import wait_for

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: it creates Unix users"),
    pytest.mark.skipif(
        not all(shutil.which(t) for t in ("useradd", "userdel", "setpriv", "unshare", "mount")),
        reason="needs useradd/userdel (passwd) and setpriv/unshare/mount (util-linux)",
    ),
]
FAST = {"heartbeat_s": 0.5, "lease_s": 1.5, "node_grace_s": 4.0, "schedule_interval_s": 0.5}
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT"}


def useradd(name: str) -> None:
    subprocess.run(
        ["useradd", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/bin/sh", name],
        check=True,
    )


@pytest.fixture(scope="module")
def names() -> Iterator[dict[str, str]]:
    tag = uuid.uuid4().hex[:6]
    n = {k: f"gf{k[0]}{tag}" for k in ("here", "later", "mixed", "nowhere")}
    useradd(n["here"])
    useradd(n["mixed"])
    try:
        yield n
    finally:
        for k in ("here", "later", "mixed"):
            subprocess.run(["userdel", n[k]], check=False, capture_output=True)


def own_etc(path: Path, mixed: str) -> list[str]:
    """A command that runs the agent with a copy of /etc of its own at ``path``, whose passwd
    gives ``mixed`` another uid (NSS on that node answers with it; a user added to the host
    later is not there)."""
    shutil.copytree("/etc", path, symlinks=True)
    lines = []
    for line in (path / "passwd").read_text().splitlines():
        f = line.split(":")
        if f[0] == mixed:
            f[2] = str(int(f[2]) + 10000)
        lines.append(":".join(f))
    (path / "passwd").write_text("\n".join(lines) + "\n")
    script = 'mount --bind "$0" /etc && exec "$@"'
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", script, str(path)]


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, names: dict[str, str]
) -> Iterator[LocalCluster]:
    """Two root agents; the controller does not wait for the nodes' answers at submit."""
    root = tmp_path_factory.mktemp("identity")
    c = LocalCluster(
        root,
        agents=0,
        gpus="2xH100",
        fallback_account="",  # a user without an account is refused or held, never run
        controller_args=["--account-lookup-s", "0"],
        **FAST,  # type: ignore[arg-type]
    )
    try:
        c.start()
        c.start_agent(0)
        c.start_agent(1, wrap=own_etc(root / "etc-1", names["mixed"]))
        c.wait_nodes(2)
        yield c
    finally:
        c.stop()


def done(c: Client, job: str) -> str | None:
    state = c.job(job).state
    return state if state in TERMINAL else None


def cli(c: LocalCluster, token_file: Path, *args: str) -> str:
    env = dict(os.environ, GPUFLEET_SERVER=c.url, GPUFLEET_TOKEN_FILE=str(token_file))
    r = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_a_job_runs_as_its_owner_where_the_account_is(
    cluster: LocalCluster, names: dict[str, str]
) -> None:
    with cluster.user(names["here"]) as c:
        (job,) = c.submit({"name": "id", "command": ["id", "-un"], "gpus_per_worker": 1})
        assert wait_for("the job ends", lambda: done(c, job), 60) == "SUCCEEDED"
        assert c.logs(job).data.strip() == names["here"]


def test_held_with_its_reason_until_the_account_exists_then_refused_once_known(
    cluster: LocalCluster, names: dict[str, str], tmp_path: Path
) -> None:
    user = names["later"]
    with cluster.user(user) as c:
        (job,) = c.submit(
            {"name": "id", "command": ["id", "-un"], "gpus_per_worker": 1}
        )  # not known yet

        def held() -> str | None:  # once every node has answered (one may answer later)
            r = c.job(job).reason
            if r is None or r.code != "UserNotFoundOnHost" or "not yet looked up" in r.message:
                return None
            return r.message

        why = wait_for("the job held for its user", held, 30)
        assert why.startswith(f"user {user} has no Unix account on node-[0-1]: held until")
        token_file = tmp_path / "user.token"
        with cluster.admin() as a:
            tok = a.create_token(TokenCreate(name=f"cli-{user}", role="user", user=user))
        token_file.write_text(tok.token or "")
        token_file.chmod(0o600)
        assert "UserNotFoundOnHost" in cli(cluster, token_file, "-m", "gpufleet.cli.main", "jobs")
        squeue = cli(cluster, token_file, "-m", "gpufleet.shims.squeue")
        assert "(launch failed requeued held)" in squeue
        # the nodes have answered: the next submission is refused at once, naming them
        with pytest.raises(ApiError) as e:
            c.submit({"name": "id", "command": ["true"], "gpus_per_worker": 1})
        assert e.value.status == 422
        assert f"Invalid user id: user '{user}' has no Unix account on any node that could " in str(
            e.value
        )
        assert "(node-[0-1])" in str(e.value)
        assert c.job(job).state == "PENDING"
        useradd(user)  # on the host, which node-0 reads (node-1 has its own /etc): it runs there
        assert wait_for("the held job ends", lambda: done(c, job), 60) == "SUCCEEDED"
        assert c.logs(job).data.strip() == user
        assert {p.node for p in c.job(job).placement} == {"node-0"}


def test_a_uid_that_differs_between_nodes_is_reported(
    cluster: LocalCluster, names: dict[str, str]
) -> None:
    user = names["mixed"]
    uid = pwd.getpwnam(user).pw_uid
    with cluster.user(user) as c:
        (job,) = c.submit({"name": "id", "command": ["id", "-u"], "gpus_per_worker": 1})
        assert wait_for("the job ends", lambda: done(c, job), 60) == "SUCCEEDED"
    log = cluster.data_dir / "controller.log"
    words = (
        f"user {user} has different UIDs on different nodes (uid {uid} on node-0; "
        f"uid {uid + 10000} on node-1)"
    )
    wait_for("the mismatch in the controller's log", lambda: words in log.read_text(), 10)
    with cluster.admin() as a:  # and to an admin who asks (gpufleet accounts USER)
        got = a.user_accounts(user)
    assert got.nodes == {"node-0": uid, "node-1": uid + 10000} and got.not_answered == []
    assert got.uid_mismatch.startswith(words)
    admin_token = cluster.admin_token_file
    shown = cli(cluster, admin_token, "-m", "gpufleet.cli.main", "accounts", user)
    assert f"node-1   {uid + 10000}" in shown


def test_a_user_no_node_has_is_refused_at_the_first_submit(
    tmp_path: Path, names: dict[str, str]
) -> None:
    """With the controller's default wait for the nodes' answers at a user's first submit."""
    with LocalCluster(tmp_path, agents=2, gpus="2xH100", fallback_account="", **FAST) as c:  # type: ignore[arg-type]
        with c.user(names["nowhere"]) as u, pytest.raises(ApiError) as e:
            u.submit({"name": "id", "command": ["true"], "gpus_per_worker": 1})
        assert e.value.status == 422
        assert (
            f"user '{names['nowhere']}' has no Unix account on any node that could run this "
            "job (node-[0-1])" in str(e.value)
        )
        with c.admin() as a:
            assert a.jobs(all_states=True) == []  # nothing stored
            got = a.user_accounts(names["nowhere"])
            assert got.nodes == {"node-0": None, "node-1": None}


def test_a_held_job_stays_held_across_a_controller_restart_then_runs(
    cluster: LocalCluster, names: dict[str, str]
) -> None:
    """The restarted controller knows no user: the agents, registering again, are asked about
    the users of unfinished jobs, so the job is held for its user again (not waiting on a
    lookup forever), and runs once the account exists."""
    user = f"{names['later']}r"  # a user of its own (not yet on any node)
    with cluster.user(user) as c:
        (job,) = c.submit({"name": "id", "command": ["id", "-un"], "gpus_per_worker": 1})

        def code() -> str | None:
            r = c.job(job).reason
            return r.code if r is not None else None

        wait_for("held for its user", lambda: code() == "UserNotFoundOnHost", 30)
    cluster.kill_controller()
    cluster.start_controller()
    cluster.wait_nodes(2)
    with cluster.admin() as a:
        wait_for(
            "held again", lambda: (r := a.job(job).reason) and r.code == "UserNotFoundOnHost", 30
        )
        try:
            useradd(user)
            assert wait_for("the job ends", lambda: done(a, job), 60) == "SUCCEEDED"
            assert a.logs(job).data.strip() == user
        finally:
            subprocess.run(["userdel", user], check=False, capture_output=True)
