"""An #SBATCH script through the CLI, a real controller and two root agents, run as its
owner's Unix account (a user this test creates, with a home outside /tmp: a task's /tmp is
its own): Slurm's batch semantics end to end. The script runs once, on rank 0, in the submit
directory (``python3 train.py`` finds its file), with the submitter's environment (an
activated venv's PATH, never GPUFLEET_TOKEN); --export=NONE and lists as sbatch's; the output
file is named by its pattern and owned by the job's user, truncated or appended; the job's
outcome is the script's; a plain job still runs its command on every rank."""

from __future__ import annotations

import json
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
from gpufleet.client import Client
from gpufleet.ops.localcluster import LocalCluster
from gpufleet.server.store.codec import HIDDEN_SPEC_KEYS
from support.waiting import wait_for
from userpython import user_python

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: it creates a Unix user"),
    pytest.mark.skipif(
        not all(shutil.which(t) for t in ("useradd", "userdel", "setpriv", "unshare", "mount")),
        reason="needs useradd/userdel (passwd) and setpriv/unshare/mount (util-linux)",
    ),
]
FAST = {"heartbeat_s": 0.5, "lease_s": 1.5, "node_grace_s": 4.0, "schedule_interval_s": 0.5}
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT"}


@pytest.fixture(scope="module")
def user() -> Iterator[pwd.struct_passwd]:
    name = f"gfs{uuid.uuid4().hex[:6]}"
    home = Path("/var/tmp") / f"{name}-home"  # not under /tmp: a task's /tmp is private
    subprocess.run(
        ["useradd", "--create-home", "--home-dir", str(home), "--shell", "/bin/sh", name],
        check=True,
    )
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", "--remove", name], check=False)
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="module")
def agent_python(user: pwd.struct_passwd) -> Iterator[str]:
    """An interpreter the job's user can run, for the agents (tests/userpython.py)."""
    with user_python(user.pw_uid, user.pw_gid) as python:
        yield python


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, agent_python: str) -> Iterator[LocalCluster]:
    c = LocalCluster(
        tmp_path_factory.mktemp("batch"),
        agents=2,
        gpus="2xH100",
        fallback_account="",
        agent_python=agent_python,
        **FAST,  # type: ignore[arg-type]
    )
    try:
        c.start()
        yield c
    finally:
        c.stop()
        for log in sorted(c.data_dir.glob("*.log")):
            print(f"----- {log.name}\n" + "\n".join(log.read_text().splitlines()[-30:]))


@pytest.fixture(scope="module")
def token(cluster: LocalCluster, user: pwd.struct_passwd) -> str:
    with cluster.admin() as c:
        tok = c.create_token(
            TokenCreate(name=f"user-{user.pw_name}", role="user", user=user.pw_name)
        )
    return str(tok.token)


@pytest.fixture
def proj(user: pwd.struct_passwd) -> Path:
    """The submit directory, in the user's home, owned by the user, with a venv-like bin."""
    d = Path(user.pw_dir) / f"proj-{uuid.uuid4().hex[:6]}"
    (d / "venv" / "bin").mkdir(parents=True)
    (d / "train.py").write_text("import os; print('trained in', os.getcwd(), 'as', os.getuid())\n")
    tool = d / "venv" / "bin" / "venvtool"
    tool.write_text("#!/bin/sh\necho venv tool\n")
    tool.chmod(0o755)
    for p in [d, *d.rglob("*")]:
        os.chown(p, user.pw_uid, user.pw_gid)
    return d


def submit(cluster: LocalCluster, token: str, proj: Path, script: str, *opts: str) -> str:
    """``gpufleet submit OPTS job.sh`` from ``proj``, in a shell with an activated venv and
    the user's token exported."""
    (proj / "job.sh").write_text(script)
    env = {
        **os.environ,
        "GPUFLEET_SERVER": cluster.url,
        "GPUFLEET_TOKEN": token,
        "VIRTUAL_ENV": str(proj / "venv"),
        "PATH": f"{proj / 'venv' / 'bin'}:{os.environ['PATH']}",
        "MY_SETTING": "from-the-login-shell",
    }
    r = subprocess.run(
        [sys.executable, "-m", "gpufleet.cli.main", "submit", "--json", *opts, "job.sh"],
        cwd=proj,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    (job,) = json.loads(r.stdout)["ids"]
    return str(job)


def ended(c: Client, job: str) -> str:
    return str(wait_for(f"job {job} ended", lambda: (s := c.job(job).state) in TERMINAL and s, 60))


def file_of(proj: Path, pattern: str) -> Path:
    (f,) = proj.glob(pattern)
    return f


SCRIPT = """#!/bin/bash
#SBATCH --nodes=2
#SBATCH --output=res-%x-%j-%N.out
echo "pwd=$(pwd)"
python3 train.py
venvtool
echo "token=${GPUFLEET_TOKEN:-none} setting=${MY_SETTING:-unset} procid=$SLURM_PROCID"
echo "submit_dir=$SLURM_SUBMIT_DIR"
"""


def test_the_script_runs_once_in_the_submit_dir_with_the_submitters_environment(
    cluster: LocalCluster, token: str, proj: Path, user: pwd.struct_passwd
) -> None:
    job = submit(cluster, token, proj, SCRIPT)
    c = cluster.client(token)
    assert ended(c, job) == "SUCCEEDED", c.job(job).events
    f = file_of(proj, f"res-job.sh-{job}-node-*.out")  # one file: the script ran once
    assert f.stat().st_uid == user.pw_uid  # created by the job's user, not the root agent
    assert f.read_text().splitlines() == [
        f"pwd={proj}",
        f"trained in {proj} as {user.pw_uid}",
        "venv tool",  # the activated venv's PATH reached the job
        "token=none setting=from-the-login-shell procid=0",
        f"submit_dir={proj}",
    ]
    assert c.logs(job).data == f.read_text()  # gpufleet logs keeps its copy
    assert c.logs(job, rank=1).data == ""  # rank 1 ran the step daemon, not the script
    shown = c.job(job).spec
    assert shown["batch"] is True and shown["workdir"] == str(proj)
    assert not set(HIDDEN_SPEC_KEYS) & set(shown)  # the captured environment is never shown
    with cluster.admin() as a:
        assert "submit_env" not in a.job(job).spec


def secure_path(cluster: LocalCluster, c: Client, job: str) -> str:
    """The account's secure path, after the agent's srun and scontrol (a batch job's, first)
    on the node the job ran on (either node may be free when it is placed)."""
    (node,) = {p.node for p in c.job(job).placement}
    return f"{cluster.data_dir}/{node}/slurm-bin:" + (
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    )


def test_export_none_and_a_list_as_sbatch(cluster: LocalCluster, token: str, proj: Path) -> None:
    script = (
        "#!/bin/bash\n#SBATCH --output=env.out\n"
        'echo "venv=${VIRTUAL_ENV:-unset} setting=${MY_SETTING:-unset} path=$PATH"\n'
    )
    c = cluster.client(token)
    job = submit(cluster, token, proj, script, "--export=NONE")
    assert ended(c, job) == "SUCCEEDED"
    said = (proj / "env.out").read_text()
    assert said == f"venv=unset setting=unset path={secure_path(cluster, c, job)}\n"
    job = submit(cluster, token, proj, script, "--export=VIRTUAL_ENV,EXTRA=1")
    assert ended(c, job) == "SUCCEEDED"
    secure = secure_path(cluster, c, job)
    venv = proj / "venv"
    assert (proj / "env.out").read_text() == f"venv={venv} setting=unset path={secure}\n"


def test_truncate_append_chdir_and_the_scripts_outcome(
    cluster: LocalCluster, token: str, proj: Path
) -> None:
    c = cluster.client(token)
    script = f"#!/bin/bash\n#SBATCH --output={proj}/fixed.out\necho line; pwd\nexit 7\n"
    job = submit(cluster, token, proj, script)
    assert ended(c, job) == "FAILED"  # the script's exit is the job's
    assert any("code 7" in e.why for e in c.job(job).events or [])
    job = submit(cluster, token, proj, script)
    assert ended(c, job) == "FAILED"
    assert (proj / "fixed.out").read_text() == f"line\n{proj}\n"  # truncated
    job = submit(cluster, token, proj, script, "--open-mode=append", "--chdir=nowhere")
    assert ended(c, job) == "FAILED", c.job(job).events
    assert (proj / "fixed.out").read_text().splitlines() == [
        "line",
        str(proj),
        f"slurmstepd: error: couldn't chdir to `{proj}/nowhere': No such file or directory: "
        "going to /tmp instead",
        "line",
        "/tmp",
    ]


def test_a_plain_job_runs_its_command_on_every_rank(cluster: LocalCluster, token: str) -> None:
    c = cluster.client(token)
    (job,) = c.submit(
        {
            "name": "plain",
            "workers": 2,
            "gpus_per_worker": 0,
            "command": ["sh", "-c", "echo r$RANK"],
        }
    )
    assert ended(c, job) == "SUCCEEDED"
    assert [c.logs(job, rank=r).data for r in (0, 1)] == ["r0\n", "r1\n"]
