"""Secrets and files on a real cluster (a controller process and agent processes started by
``LocalCluster``): no token on any command line, not even where a job can look (its parent's
``/proc/PID/cmdline``), everything the controller and the agents create is private, and a
database password reaches the controller through its environment, not argv or its log."""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from livehelp import read_log, wait_state

from gpufleet.ops.localcluster import LocalCluster

pytestmark = pytest.mark.e2e
PY = sys.executable

# a job that prints the command line of each of its ancestors, up to the agent (or init)
ANCESTORS = r"""
import os
pid = os.getppid()
while pid > 1:
    print(open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode())
    status = open(f"/proc/{pid}/status").read()
    pid = int(status.split("PPid:")[1].split()[0])
"""


def cmdline(pid: int) -> bytes:
    return Path(f"/proc/{pid}/cmdline").read_bytes()


def mode(p: Path) -> int:
    return stat.S_IMODE(p.lstat().st_mode)


def test_no_token_on_a_command_line_not_even_where_a_job_looks(
    new_cluster: Callable[..., LocalCluster],
) -> None:
    c = new_cluster(agents=1, prefork=False)  # exec'd: their own command lines
    ap = c.agent_procs["node-0"]
    assert ap.token and ap.token_file is not None
    assert ap.token.encode() not in cmdline(ap.proc.pid)
    assert b"--token-file" in cmdline(ap.proc.pid) and mode(ap.token_file) == 0o600
    assert c.controller is not None
    assert c.admin_token.encode() not in cmdline(c.controller.pid)

    alice = c.user("alice")
    (job,) = alice.submit({"name": "peek", "command": [PY, "-c", ANCESTORS]})
    wait_state(alice, job, "SUCCEEDED", timeout_s=60)
    seen = read_log(alice, job)
    assert "gpufleet.agent" in seen  # it did reach the agent's command line
    assert ap.token not in seen and c.admin_token not in seen


def test_what_the_controller_and_agents_create_is_private(
    new_cluster: Callable[..., LocalCluster],
) -> None:
    old = os.umask(0o022)  # as a login shell has it: the processes must not rely on ours
    try:
        c = new_cluster(agents=1)
    finally:
        os.umask(old)
    alice = c.user("alice")
    (job,) = alice.submit({"name": "out", "command": ["echo", "private output"]})
    wait_state(alice, job, "SUCCEEDED", timeout_s=60)
    assert read_log(alice, job) == "private output\n"

    ctl = c.data_dir / "controller"
    named = [ctl / "gpufleet.db", ctl / "gpufleet.db-wal", ctl / "admin.token", ctl / "logs"]
    assert all(p.exists() for p in named), sorted(p.name for p in ctl.iterdir())
    shared: list[str] = []
    node = c.data_dir / "node-0"
    assert mode(ctl) == 0o700
    # the agent's directory only lets others pass (not list) to srun's and scontrol's
    # scripts in slurm-bin (0755, the agent's own: users run them, cannot change them)
    assert mode(node) == 0o711
    public = node / "slurm-bin"
    assert mode(public) == 0o755 and sorted(p.name for p in public.iterdir()) == [
        "scontrol",
        "srun",
    ]
    for root in (ctl, node):
        for dirpath, dirs, files in os.walk(root):
            if Path(dirpath) == public:
                continue
            for name in [*dirs, *files]:
                p = Path(dirpath) / name
                if p != public and mode(p) & 0o077:
                    shared.append(f"{p} {mode(p):04o}")
    assert shared == []
    logs = list((ctl / "logs").rglob("rank0.stdout"))
    assert logs and all(mode(p) == 0o600 for p in logs)


def test_a_database_password_stays_off_the_command_line_and_out_of_the_log(
    new_cluster: Callable[..., LocalCluster], pg_url: str
) -> None:
    from sqlalchemy.engine import make_url

    password = "s3cret-pw-e2e"  # trust auth on the test server: accepted, and never needed
    url = make_url(pg_url).set(password=password).render_as_string(hide_password=False)
    c = new_cluster(agents=1, db_url=url, prefork=False)  # exec'd: its own command line
    assert c.controller is not None
    assert password.encode() not in cmdline(c.controller.pid)
    c.stop()  # everything it will log about its store is written
    log = (c.data_dir / "controller.log").read_text(errors="replace")
    assert password not in log
    assert "store postgresql+psycopg://postgres:***@127.0.0.1" in log  # it names its store
