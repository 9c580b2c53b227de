"""A job with a container image runs in a real podman container (runc), through the real agent's
task runner as root: its output is captured as a bare task's, it runs as the job's uid, sees its
environment and secrets (never written where a name reaches them), its mount and workdir, its
exit code comes back, and a cancel, a time limit's SIGKILL and the orphan sweep leave no
container behind.

The image is built here from a static busybox (no registry is reachable). Podman on two cores
takes seconds per container: four container runs here, one more in
tests/e2e/test_containers_live.py."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import gpufleet.agent.runner.argv as runner_module
from containerimage import IMAGE_ENV, build_env_image, build_image
from gpufleet.agent.containers import OWNER_LABEL, container_name
from gpufleet.agent.containers.podman import Podman
from gpufleet.agent.runner import TaskRunner
from gpufleet.api.schemas import AgentCommand, TaskSecret
from gpufleet.model.container import ContainerSpec, Mount
from userpython import user_python

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: a root agent runs podman"),
]


def podman(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout)


def leftovers(*jobs: str) -> list[str]:
    """The containers of ``jobs`` (attempt 1, rank 0) still there: a test's own, not those of
    a test another worker runs meanwhile (pytest -n without --dist loadgroup)."""
    out = podman("ps", "--all", "--filter", "name=^gpufleet-", "--format", "{{.Names}}")
    mine = {container_name(j, 1, 0) for j in jobs}  # and each agent's mark after it
    return [n for n in out.stdout.split() if n in mine or n.rsplit("-", 1)[0] in mine]


@pytest.fixture(scope="module")
def image() -> str:
    return build_image()


@pytest.fixture(scope="module")
def env_image() -> str:
    return build_env_image()


@pytest.fixture(scope="module")
def nobody_taskstart() -> Iterator[tuple[str, str]]:
    """An interpreter nobody can run and its taskstart.py: a bare batch script's taskstart runs
    as the job's user (a clone under /tmp, as CI's, is not in a task's private /tmp)."""
    nobody = pwd.getpwnam("nobody")
    with user_python(nobody.pw_uid, nobody.pw_gid) as python:
        where = "import gpufleet.agent.taskstart as t; print(t.__file__)"
        found = subprocess.run([python, "-I", "-c", where], capture_output=True, text=True)
        assert found.returncode == 0, found.stderr
        yield python, found.stdout.strip()


@pytest.fixture
def submit_dir() -> Iterator[Path]:
    """A submit directory the job's user (nobody) owns, on a path it can reach (pytest's own
    temporary directories are root's alone; a bare task has a /tmp of its own)."""
    nobody = pwd.getpwnam("nobody")
    top = Path(tempfile.mkdtemp(prefix="gpufleet-submit-", dir="/var/tmp"))
    os.chmod(top, 0o755)
    d = top / "submit"
    d.mkdir()
    os.chown(d, nobody.pw_uid, nobody.pw_gid)
    yield d
    shutil.rmtree(top, ignore_errors=True)


@pytest.fixture
def runner(tmp_path: Path) -> Iterator[TaskRunner]:
    (tmp_path / "data").mkdir()
    r = TaskRunner(
        tmp_path / "data",
        lambda gpus: ",".join(str(g) for g in gpus),
        as_root=True,
        container_runtime=Podman.detect(),
    )
    yield r
    for key in r.live():
        r.kill(key, 0, "test over")
    r.wait(30)


def launch(runner: TaskRunner, job: str, command: list[str], **kw: object) -> AgentCommand:
    cmd = AgentCommand(kind="launch", job=job, attempt=1, rank=0, command=command, **kw)  # type: ignore[arg-type]
    [ev] = runner.launch(cmd)
    assert ev.kind == "started", ev
    return cmd


def finish(runner: TaskRunner, timeout_s: float = 90) -> tuple[int, str]:
    events = runner.wait(timeout_s)
    exits = [e for e in events if e.kind == "exited"]
    assert exits, "the task did not end"
    deadline = time.monotonic() + 60
    # `podman rm -f` runs in the background
    while runner.containers.cleanups and time.monotonic() < deadline:
        runner.poll()
        time.sleep(0.2)
    return exits[0].exit_code, exits[0].why


def test_a_container_task_runs_as_the_job_with_its_env_mount_and_workdir(
    image: str, runner: TaskRunner, tmp_path: Path
) -> None:
    nobody = pwd.getpwnam("nobody")
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "input.txt").write_text("from the host\n")
    secret = "s3cr3t-" + os.urandom(6).hex()
    spec = ContainerSpec(image, (Mount(str(shared), "/mnt/data", read_only=True),), "/work")
    script = (
        'echo "uid=$(id -u) gid=$(id -g)"; echo "pwd=$(pwd)"; echo "secret=$SECRET"; '
        'echo "rank=$RANK cuda=$CUDA_VISIBLE_DEVICES tmp=$TMPDIR"; cat /mnt/data/input.txt; '
        "echo x > /tmp/t && echo tmp-ok; echo y > /mnt/data/w 2>/dev/null || echo ro-ok; "
        'echo "token=$API_TOKEN"; cat "$GPUFLEET_SECRETS_DIR/c.pem"; echo; '
        "echo to-stderr >&2; exit 3"
    )
    token, pem = "tok-" + os.urandom(6).hex(), "pem-" + os.urandom(6).hex()
    sealed = [
        TaskSecret(name="t", scope="user", owner="nobody", env="API_TOKEN", value=token),
        TaskSecret(name="c", scope="user", owner="nobody", file="c.pem", value=pem),
    ]
    launch(
        runner,
        "ctr1",
        ["/bin/sh", "-c", script],
        env={"SECRET": secret, "RANK": "0"},
        gpus=[1, 3],
        run_as="nobody",
        container=spec.to_dict(),
        secrets=sealed,
    )
    # the environment is on no command line and in no file a name reaches
    for p in psutil_cmdlines():
        assert secret not in p and token not in p
    data = tmp_path / "data"
    for f in data.rglob("*"):
        if f.is_file() and f.name != "c.pem":  # the file secret: the task's own, 0600
            assert secret.encode() not in f.read_bytes(), f
            assert token.encode() not in f.read_bytes(), f
    code, why = finish(runner)
    out_path, err_path = runner.log_paths(("ctr1", 1, 0))
    out, err = out_path.read_text(), err_path.read_text()
    assert code == 3 and why == "exited with code 3", (code, why, err)
    assert f"uid={nobody.pw_uid} gid={nobody.pw_gid}" in out
    assert "pwd=/work" in out
    assert f"secret={secret}" in out
    # no GPU device on this node: the simulated GPUs are named as for a bare task
    assert "rank=0 cuda=1,3 tmp=/tmp" in out
    assert "from the host" in out and "tmp-ok" in out and "ro-ok" in out
    assert f"token={token}" in out and pem in out  # secrets: a variable and a file in /tmp
    assert err.strip().endswith("to-stderr")
    assert out_path.stat().st_uid == nobody.pw_uid
    assert not (shared / "w").exists()
    assert leftovers("ctr1") == []


def psutil_cmdlines() -> list[str]:
    import psutil  # type: ignore[import-untyped]

    out = []
    for p in psutil.process_iter(["cmdline"]):
        out.append(" ".join(p.info["cmdline"] or []))
    return out


def test_cancel_and_sigkill_stop_the_container(image: str, runner: TaskRunner) -> None:
    spec = ContainerSpec(image).to_dict()
    launch(runner, "ctr2", ["/bin/sh", "-c", "echo up; exec sleep 300"], container=spec)
    name = container_name("ctr2", 1, 0, runner.container_owner)
    wait_running(name)
    runner.kill(("ctr2", 1, 0), 60, "cancelled by the user")
    code, why = finish(runner)
    assert code == 143 and why.startswith("cancelled by the user"), (code, why)
    assert leftovers("ctr2", "ctr3") == []
    # a task that ignores SIGTERM: the SIGKILL after the grace reaches podman, not the container;
    # the runner removes the container itself
    script = "trap '' TERM; echo up; while :; do sleep 1; done"
    cmd = AgentCommand(
        kind="launch", job="ctr3", attempt=1, rank=0, command=["/bin/sh", "-c", script],
        container=spec, time_limit_s=1, grace_s=0,
    )  # fmt: skip
    [ev] = runner.launch(cmd, now=0.0)  # started at 0 on the runner's clock: the next poll
    assert ev.kind == "started", ev  # (the clock's now) is past the time limit
    wait_running(container_name("ctr3", 1, 0, runner.container_owner))
    code, why = finish(runner)
    assert code == 137, (code, why)
    assert why == "time limit (1 s) exceeded; killed by SIGKILL after 0 s grace", why
    assert leftovers("ctr2", "ctr3") == []


def wait_running(name: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        out = podman("ps", "--filter", f"name=^{name}$", "--format", "{{.Names}}").stdout
        if name in out.split():
            return
        time.sleep(0.3)
    raise AssertionError(f"container {name} did not start in {timeout_s:g} s")


def test_the_orphan_sweep_removes_containers_nobody_supervises(
    image: str, runner: TaskRunner
) -> None:
    # an agent that died left a task in a container: the next agent on its data directory
    # kills the runtime's client (SIGKILL) and removes the container the pid file names
    launch(
        runner,
        "ctr4",
        ["/bin/sh", "-c", "exec sleep 300"],
        container=ContainerSpec(image).to_dict(),
    )
    wait_running(container_name("ctr4", 1, 0, runner.container_owner))
    pidfile = runner.log_paths(("ctr4", 1, 0))[0].with_name("rank0.pid")
    assert "cleanup" in pidfile.read_text()
    after = TaskRunner(
        runner.data_dir, lambda g: "", as_root=True, container_runtime=Podman.detect()
    )
    assert after.kill_orphans() == [("ctr4", 1, 0)]
    assert leftovers("ctr4") == []
    runner.wait(30)
    name = container_name("orphan", 1, 0)
    other = container_name("others", 1, 0)  # another agent's (another data directory)
    for n, owner in ((name, runner.container_owner), (other, "someone-else")):
        # created, not started (no container run): the sweep removes this agent's alone
        started = podman(
            "create", "--name", n, "--label", f"{OWNER_LABEL}={owner}", image, "sleep", "300"
        )
        assert started.returncode == 0, started.stderr
    assert sorted(leftovers("orphan", "others")) == sorted([name, other])
    fresh = TaskRunner(
        runner.data_dir.parent / "fresh", lambda g: "", container_runtime=Podman.detect()
    )
    assert fresh.sweep_containers() == []  # an agent that never started a container: no look
    try:
        assert runner.sweep_containers() == [name]
        assert leftovers("orphan", "others") == [other]
    finally:
        podman("rm", "--force", "--time", "0", other)
    assert leftovers("orphan", "others") == []


def launch_batch(
    runner: TaskRunner, job: str, script: str, submit_dir: Path, image: str | None, **kw: object
) -> None:
    """``script`` as nobody's batch script submitted from ``submit_dir``, in ``image`` (None:
    bare)."""
    container = ContainerSpec(image).to_dict() if image else None
    launch(
        runner, job, ["/bin/sh", "-c", script], role="batch", workdir=str(submit_dir),
        run_as="nobody", container=container, **kw,
    )  # fmt: skip


# a batch script that shows what pyxis's users look for: its user, the launch's Slurm
# variables, the submitter's exported environment, its --input, its output files
BATCH = (
    'echo "uid=$(id -u) job=$SLURM_JOB_ID submit=$FROM_SUBMIT"; read line; echo "input=$line"; '
    'echo "says=$IMAGE_SAYS path=$PATH"; echo oops >&2; exit 4'
)


@pytest.mark.parametrize("where", ["bare", "container"])
def test_a_batch_script_in_a_container_has_a_bare_ones_files_and_environment(
    where: str,
    env_image: str,
    runner: TaskRunner,
    submit_dir: Path,
    nobody_taskstart: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    nobody = pwd.getpwnam("nobody")
    if where == "bare":  # as the agent started with an interpreter its users can run
        monkeypatch.setattr(runner_module.sys, "executable", nobody_taskstart[0])
        monkeypatch.setattr(runner_module, "TASKSTART", nobody_taskstart[1])
    (submit_dir / "in.txt").write_text("hello\n")
    launch_batch(
        runner,
        f"cb-{where}",
        BATCH,
        submit_dir,
        env_image if where == "container" else None,
        output="slurm-77.out",
        error="slurm-77.err",
        input="in.txt",
        env={"SLURM_JOB_ID": "77"},
        # sbatch --export=ALL: the submitter's environment, captured at submit
        user_env={"FROM_SUBMIT": "yes", "IMAGE_SAYS": "host", "PATH": "/usr/bin:/bin"},
    )
    code, why = finish(runner)
    log_out, log_err = runner.log_paths((f"cb-{where}", 1, 0))
    assert code == 4, (code, why, log_err.read_text())
    out_file, err_file = submit_dir / "slurm-77.out", submit_dir / "slurm-77.err"
    for f in (out_file, err_file):  # opened as the job's user, in its submit directory
        assert f.stat().st_uid == nobody.pw_uid, f
    out = out_file.read_text()
    lines = out.splitlines()
    assert lines[:2] == [f"uid={nobody.pw_uid} job=77 submit=yes", "input=hello"], out
    # pyxis: a name the image's own environment sets keeps the image's value (its PATH too);
    # the rest of the submitter's environment is the job's
    image = f"says={IMAGE_ENV['IMAGE_SAYS']} path={IMAGE_ENV['PATH']}"
    assert lines[2] == (image if where == "container" else "says=host path=/usr/bin:/bin")
    assert err_file.read_text() == "oops\n"
    assert log_out.read_text() == out  # and gpufleet's logs have the same
    assert log_err.read_text().endswith("oops\n")
    assert leftovers(f"cb-{where}") == []


def test_a_container_batch_script_writes_only_where_its_user_may(
    image: str, runner: TaskRunner, submit_dir: Path
) -> None:
    # the runtime runs as root; the files are opened with the user's ids all the same
    closed = submit_dir.parent / "roots"
    closed.mkdir(mode=0o755)
    launch_batch(runner, "cb-closed", "echo ran", submit_dir, image, output=f"{closed}/out.txt")
    code, why = finish(runner)
    assert code == 1, (code, why)
    _, log_err = runner.log_paths(("cb-closed", 1, 0))
    err = log_err.read_text()
    assert f"slurmstepd: error: Could not open stdout file {closed}/out.txt" in err, err
    assert not (closed / "out.txt").exists()
    assert "ran" not in runner.log_paths(("cb-closed", 1, 0))[0].read_text()
    assert leftovers("cb-closed") == []


def test_a_cancelled_container_batch_script_keeps_its_output_and_leaves_no_container(
    image: str, runner: TaskRunner, submit_dir: Path
) -> None:
    # behind taskstart the runtime's client still gets the group's SIGTERM and passes it on
    script = "echo started; exec sleep 300"
    launch_batch(runner, "cb-cancel", script, submit_dir, image, output="slurm-9.out")
    wait_running(container_name("cb-cancel", 1, 0, runner.container_owner))
    out_file = submit_dir / "slurm-9.out"
    deadline = time.monotonic() + 60
    while "started" not in out_file.read_text() and time.monotonic() < deadline:
        time.sleep(0.2)
    runner.kill(("cb-cancel", 1, 0), 60, "cancelled by the user")
    code, why = finish(runner)
    assert code == 143 and why.startswith("cancelled by the user"), (code, why)
    assert out_file.read_text() == "started\n"
    assert leftovers("cb-cancel") == []


def test_a_container_task_writes_its_checkpoint_file_where_the_agent_looks(
    image: str, runner: TaskRunner, submit_dir: Path
) -> None:
    """$GPUFLEET_CHECKPOINT_FILE in a container: the file's directory on the node (the submit
    directory) is mounted, so the job writes it as a bare job does (a temporary file renamed
    over it, as the DDP example), the agent sees the write, and the next attempt, bare or not,
    finds it at the same place."""
    script = (
        'echo "file=$GPUFLEET_CHECKPOINT_FILE"; echo step7 > "$GPUFLEET_CHECKPOINT_FILE.tmp" '
        '&& mv "$GPUFLEET_CHECKPOINT_FILE.tmp" "$GPUFLEET_CHECKPOINT_FILE" && echo written; sleep 3'
    )
    launch(
        runner,
        "ck1",
        ["/bin/sh", "-c", script],
        workdir=str(submit_dir),
        run_as="nobody",
        container=ContainerSpec(image).to_dict(),
        checkpoint_file="gpufleet-ck1.checkpoint",
    )
    events = runner.wait(90)
    out = runner.log_paths(("ck1", 1, 0))[0].read_text()
    assert "file=/gpufleet-checkpoint/gpufleet-ck1.checkpoint\nwritten\n" in out, out
    on_node = submit_dir / "gpufleet-ck1.checkpoint"
    assert on_node.read_text() == "step7\n"
    assert on_node.stat().st_uid == pwd.getpwnam("nobody").pw_uid
    assert [e.kind for e in events if e.kind in ("checkpoint", "exited")] == [
        "checkpoint",
        "exited",
    ]
