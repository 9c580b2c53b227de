"""``gpufleet validate`` with the admin token on a cluster that runs every job as its owner's Unix
account and has no fallback account: its probe jobs run as the controller's probe account
(``--probe-account``, default ``gpufleet-probe``), which the nodes have, not as the token's name
``admin``, which they do not. Real root agent, real Unix account, real probe jobs.

The account is this test's own (``--probe-account``), not the default: while it exists on this
host, every other test's cluster would run its probes as that account (and fail to reach their
root-only temporary directories)."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from gpufleet.cli.validate import validate as validate_cmd
from gpufleet.ops.localcluster import LocalCluster
from userpython import user_python

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: a root agent and a Unix account"),
    pytest.mark.skipif(
        not all(shutil.which(t) for t in ("useradd", "userdel", "setpriv", "unshare", "mount")),
        reason="needs useradd/userdel (passwd) and setpriv/unshare/mount (util-linux)",
    ),
]
PROBE = f"gf-probe-{os.getpid()}"  # this test's --probe-account (see the module's docstring)
FAST = {"heartbeat_s": 0.5, "lease_s": 1.5, "node_grace_s": 4.0, "schedule_interval_s": 0.5}
LIGHT = [
    "--storage-mb", "16", "--storage-seconds", "1",
    "--min-write-mbps", "5", "--min-read-mbps", "5", "--min-iops", "20",
    "--max-heartbeat-age-s", "5", "--start-timeout-s", "30",
]  # fmt: skip


@pytest.fixture(scope="module")
def probe_account() -> Iterator[pwd.struct_passwd]:
    """The account as an installer makes it (``useradd --system``)."""
    made = False
    try:
        pwd.getpwnam(PROBE)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", PROBE], check=True)
        made = True
    try:
        yield pwd.getpwnam(PROBE)
    finally:
        if made:
            subprocess.run(["userdel", PROBE], check=False)


def test_validate_passes_with_the_admin_token_its_probes_run_as_the_probe_account(
    tmp_path: Path, probe_account: pwd.struct_passwd
) -> None:
    shared = Path(tempfile.mkdtemp(prefix="gf-shared-", dir="/var/tmp"))  # reachable by it
    shared.chmod(0o1777)
    try:
        with user_python(probe_account.pw_uid, probe_account.pw_gid) as python:
            run(tmp_path, python, shared, probe_account.pw_uid)
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def run(root: Path, python: str, shared: Path, uid: int) -> None:
    with LocalCluster(
        root, agents=1, gpus="2xH100", agent_python=python, fallback_account="",
        controller_args=["--probe-account", PROBE],
        **FAST,  # type: ignore[arg-type]
    ) as c:  # fmt: skip
        app = typer.Typer()
        app.command()(validate_cmd)
        args = [
            "--server", c.url, "--token-file", str(c.admin_token_file), "--json",
            "--layers", "device,storage,clock,scheduler,monitoring",
            "--shared", str(shared), "--python", python, *LIGHT,
        ]  # fmt: skip
        r = CliRunner().invoke(app, args, env={"COLUMNS": "1000"})
        doc = json.loads(r.stdout)
        fails = [ch for ch in doc["checks"] if ch["status"] == "FAIL"]
        assert r.exit_code == 0 and doc["ok"], f"{fails}\n{r.stderr}"
        with c.admin() as a:
            probes = a.jobs(all_states=True)
        assert probes and {j.user for j in probes} == {PROBE}
        assert {j.state for j in probes} == {"SUCCEEDED"}
        # the account the tasks ran as: the probes' files in the shared directory
        assert {p.stat().st_uid for p in shared.rglob("*")} <= {uid}
