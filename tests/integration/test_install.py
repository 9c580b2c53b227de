"""``gpufleet install`` of a wheel into a prefix of the run's own (a real venv; pip resolves
against the run's wheelhouse of what this machine's index gives, tests/support/installs.py),
then the installed gpufleet as a cluster: ``setup controller`` and ``setup node`` write its
files, its controller and its agent run from them (the agent as root, with its access check
on), and a batch job run as another account (``nobody``) calls ``srun`` with nothing on its
PATH but what the install put in ``bin``."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.support.waiting import wait_for

from gpufleet.base.reach import closed
from gpufleet.ops.localcluster import free_port
from support import installs, plainhttp

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="runs a job as another account: needs root"),
]
GPUFLEET = str(Path(sys.executable).parent / "gpufleet")
SLURM = ("sbatch", "srun", "squeue", "scancel", "sacct", "sinfo", "scontrol")


@pytest.fixture(scope="module")
def installed() -> tuple[Path, Path, Path]:
    """(prefix, bin, wheel): gpufleet[server] installed from its wheel under /var/tmp (a
    directory every account can pass through, as /opt; pytest's own is 0700), once per run
    by whichever worker asks first, and shared with the README's cluster guide
    (tests/support/installs.py); the README's install, from the checkout, runs in
    test_install_readme.py. Module-scoped: this module's tests wait for it on one worker."""
    return installs.installed()


def _as_nobody(*argv: str) -> subprocess.CompletedProcess[str]:
    who = pwd.getpwnam("nobody")
    drop = ["setpriv", f"--reuid={who.pw_uid}", f"--regid={who.pw_gid}", "--clear-groups"]
    # through a shell of its own: setpriv's exec still holds root's capabilities
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"}
    return subprocess.run([*drop, "/bin/sh", "-c", 'exec "$@"', "sh", *argv],
                          capture_output=True, text=True, cwd="/", env=env)  # fmt: skip


def test_every_account_can_run_what_was_installed(installed: tuple[Path, Path, Path]) -> None:
    prefix, bin_dir, wheel = installed
    site = next(prefix.glob("lib/python3*/site-packages"))
    assert closed(site, tree=True) is None and closed(prefix / "bin" / "python", run=True) is None
    # the Slurm commands and gpufleet on the bin directory, run by the installed Python
    assert (bin_dir / "gpufleet").resolve() == (prefix / "bin" / "gpufleet").resolve()
    for name in SLURM:
        assert (bin_dir / name).read_text().startswith(f"#!{prefix}/bin/python"), name
    # another account runs the installed helpers (srun's module, the step daemon's)
    done = _as_nobody(str(prefix / "bin" / "python"), "-I", "-c", "import gpufleet.slurm.stepd")
    assert done.returncode == 0, done.stderr
    done = _as_nobody(str(bin_dir / "squeue"))
    assert "no gpufleet server is configured" in done.stderr, done.stderr
    # installing again changes nothing that matters: the same commands, still runnable
    again = subprocess.run(
        [GPUFLEET, "install", "--prefix", str(prefix), "--extras", "server",
         "--from", str(wheel), "--bin-dir", str(bin_dir)],
        capture_output=True, text=True, env={**os.environ, "PATH": str(bin_dir)},
    )  # fmt: skip
    assert again.returncode == 0 and "making a venv" not in again.stdout, again.stderr
    assert "nothing changed" in again.stdout


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        p.terminate()
    for p in started:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()


def test_the_installed_cluster_runs_a_batch_job_s_srun_as_another_account(
    installed: tuple[Path, Path, Path], procs: list[subprocess.Popen[bytes]]
) -> None:
    prefix, bin_dir, _ = installed
    exe = str(prefix / "bin" / "gpufleet")
    root = Path(tempfile.mkdtemp(prefix="cluster-", dir=installs.run_dir()))  # removed with it
    root.chmod(0o755)
    etc, work = root / "etc", root / "work"
    work.mkdir(parents=True)
    work.chmod(0o1777)  # the submit directory: the job's account writes its output there
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(work)}
    where = ["--etc", str(etc), "--systemd-dir", str(root / "units"), "--bin-dir", str(bin_dir)]

    def run(*argv: str, extra: dict[str, str] | None = None) -> str:
        done = subprocess.run([*argv], capture_output=True, text=True, env={**env, **(extra or {})})
        assert done.returncode == 0, done.stdout + done.stderr
        assert "would refuse to start" not in done.stderr, done.stderr  # setup node's warning
        return done.stdout

    run(exe, "setup", "controller", *where, "--host", "127.0.0.1", "--port", str(port),
        "--data-dir", str(root / "data"), "--user", "root")  # fmt: skip
    with (etc / "controller.yaml").open("a") as f:
        f.write("fallback-account: nobody\n")  # user 'admin' has no account here
    with (root / "controller.log").open("wb") as log:
        procs.append(subprocess.Popen([exe, "controller", "--config", str(etc / "controller.yaml")],
                                      stdout=log, stderr=subprocess.STDOUT, env=env))  # fmt: skip
    wait_for("the controller", lambda: plainhttp.get(f"{url}/healthz").is_success, 60,
             ignoring=(httpx.HTTPError,))  # fmt: skip
    admin = {"GPUFLEET_SERVER": url, "GPUFLEET_TOKEN_FILE": str(root / "data" / "admin.token")}
    token = root / "n1.token"
    run(exe, "token", "create", "n1", "--role", "agent", "--node", "n1", "--out", str(token),
        extra=admin)  # fmt: skip
    run(exe, "setup", "node", *where, "--controller", url, "--name", "n1", "--token-from",
        str(token), "--simulate", "2xH100", "--data-dir", str(root / "agent"))  # fmt: skip
    # as root, with the access check on: the installed agent passes it
    with (root / "agent.log").open("wb") as log:
        procs.append(subprocess.Popen([exe, "agent", "--config", str(etc / "agent.yaml")],
                                      stdout=log, stderr=subprocess.STDOUT, env=env))  # fmt: skip
    wait_for("the node registered", lambda: plainhttp.get(f"{url}/healthz").json()["nodes"] == 1,
             60, ignoring=(httpx.HTTPError,))  # fmt: skip
    out = work / "out.txt"
    script = "srun sh -c 'echo rank $SLURM_PROCID as $(id -un)'"
    jid = run("sbatch", "--parsable", "-o", str(out), "--chdir", str(work), "--wrap", script,
              extra=admin).strip()  # fmt: skip
    state = wait_for(
        "the job ended",
        lambda: (s := run("sacct", "-j", jid, "-n", "-X", "-P", "-o", "State", extra=admin)
                 .strip()) not in ("", "PENDING", "RUNNING") and s,
        120,
    )  # fmt: skip
    assert state == "COMPLETED", (state, out.read_text() if out.exists() else "")
    assert out.read_text().strip() == "rank 0 as nobody"


def test_a_prefix_others_cannot_reach_is_refused_before_anything_is_written() -> None:
    closed_dir = Path(tempfile.mkdtemp(prefix="gpufleet-closed-", dir="/var/tmp"))
    try:
        closed_dir.chmod(0o700)
        argv = [GPUFLEET, "install", "--prefix", str(closed_dir / "opt"), "--bin-dir", ""]
        done = subprocess.run(argv, capture_output=True, text=True)
        assert done.returncode == 2
        assert f"{closed_dir} (0700) is closed to others" in done.stderr
        assert f"run: chmod o+x {closed_dir}" in done.stderr
        assert list(closed_dir.iterdir()) == []
    finally:
        shutil.rmtree(closed_dir, ignore_errors=True)


def test_a_plain_pip_install_into_the_systems_python_runs_and_puts_slurms_commands_on_path(
    installed: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """``pip install gpufleet`` with Debian's own Python, not the installer: into its layout
    (``dist-packages``, ``/usr/local/bin``) under a root of the test's own, so this machine's
    Python is left as it was (PEP 668 asks for --break-system-packages of any such install);
    the dependencies come from this checkout's venv, the package and its entry point from the
    wheel. Then ``gpufleet setup path`` puts sbatch & co. beside it."""
    system = Path("/usr/bin/python3")
    if not system.exists() or subprocess.run([system, "-m", "pip", "--version"]).returncode:
        why = "no system Python with pip here (Debian's python3-pip: .ci/run installs it)"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    _, _, wheel = installed
    root = tmp_path / "root"
    pip = [system, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index"]
    pip += ["--break-system-packages", "--root", str(root), str(wheel)]
    done = subprocess.run(pip, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    (site,) = root.glob("usr/local/lib/python3*/dist-packages")
    exe = root / "usr" / "local" / "bin" / "gpufleet"
    assert exe.read_text().startswith(f"#!{system}")  # the system's interpreter runs it
    deps = next(Path(sys.prefix).glob("lib/python3*/site-packages"))
    # its /usr/local/bin on PATH, as on a Debian host; no real Slurm on it (this machine may
    # have Debian's, and setup then rightly writes no sbatch of ours)
    env = {**os.environ, "PYTHONPATH": f"{site}:{deps}", "PATH": f"{exe.parent}:/nonexistent"}
    out = subprocess.run([exe, "--help"], capture_output=True, text=True, env=env)
    assert out.returncode == 0 and "submit" in out.stdout, out.stderr
    from_site = subprocess.run(
        [system, "-c", "import gpufleet, sys; print(gpufleet.__file__)"],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert from_site.stdout.startswith(str(site)), from_site
    bin_dir = tmp_path / "bin"
    setup = [exe, "setup", "path", "--bin-dir", str(bin_dir), "--etc", str(tmp_path / "etc")]
    done = subprocess.run(setup, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert all((bin_dir / name).exists() for name in SLURM), sorted(bin_dir.iterdir())
