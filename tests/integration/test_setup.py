"""``gpufleet setup controller|node|path``: the files of /etc/gpufleet and the systemd units,
written once (a second run changes nothing and says so); the units pass ``systemd-analyze
verify``; a controller and an agent started from those config files make a cluster."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.support.waiting import wait_for

from gpufleet.ops.localcluster import free_port
from support import plainhttp

GPUFLEET = str(Path(sys.executable).parent / "gpufleet")
ME = pwd.getpwuid(os.geteuid()).pw_name  # the controller's account: this test's own


def _run(*argv: str, path: str, check: bool = True) -> str:
    env = {**os.environ, "PATH": path}
    for k in ("GPUFLEET_SERVER", "GPUFLEET_TOKEN", "GPUFLEET_TOKEN_FILE"):
        env.pop(k, None)
    done = subprocess.run([GPUFLEET, *argv], capture_output=True, text=True, env=env)
    if check:
        assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


@pytest.fixture
def host(tmp_path: Path) -> dict[str, Path]:
    """A host's /etc/gpufleet, systemd directory and /usr/local/bin, under tmp_path; a PATH
    without a real Slurm (this machine may have one in /usr/bin)."""
    d = {n: tmp_path / n for n in ("etc", "units", "bin", "data", "agent", "empty")}
    d["empty"].mkdir()
    return d


def _where(h: dict[str, Path]) -> list[str]:
    return ["--etc", str(h["etc"]), "--systemd-dir", str(h["units"]), "--bin-dir", str(h["bin"])]


def test_setup_controller_twice_changes_nothing_the_second_time(host: dict[str, Path]) -> None:
    argv = ["setup", "controller", *_where(host), "--data-dir", str(host["data"]), "--user", ME]
    first = _run(*argv, path=str(host["empty"]))
    assert "wrote" in first and "next:" in first and "systemctl enable --now" in first
    config = host["etc"] / "controller.yaml"
    assert stat.S_IMODE(config.stat().st_mode) == 0o644
    assert stat.S_IMODE(host["data"].stat().st_mode) == 0o700
    second = _run(*argv, path=str(host["empty"]))
    assert "nothing changed" in second
    assert all(line.startswith(("unchanged", "nothing", "next", "  ")) or not line
               for line in second.splitlines()), second  # fmt: skip
    # an edited config file is the administrator's: kept unless --force
    config.write_text(config.read_text() + "fallback-account: ana\n")
    assert "kept" in _run(*argv, path=str(host["empty"]))
    assert "fallback-account: ana" in config.read_text()
    assert "updated" in _run(*argv, "--force", path=str(host["empty"]))
    assert "fallback-account: ana" not in config.read_text()


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_both_units_pass_systemd_analyze_verify(host: dict[str, Path], tmp_path: Path) -> None:
    _run("setup", "controller", *_where(host), "--user", "root", "--data-dir", "/var/lib/gpufleet",
         path=str(host["empty"]))  # fmt: skip
    _run("setup", "node", *_where(host), "--controller", "http://10.0.0.1:8600", "--name", "n1",
         path=str(host["empty"]))  # fmt: skip
    units = sorted(str(p) for p in host["units"].glob("*.service"))
    assert [Path(u).name for u in units] == [
        "gpufleet-agent.service",
        "gpufleet-controller.service",
    ]
    done = subprocess.run(["systemd-analyze", "verify", *units], capture_output=True, text=True)
    assert done.returncode == 0 and not done.stdout + done.stderr, done.stdout + done.stderr
    agent = (host["units"] / "gpufleet-agent.service").read_text()
    assert "KillMode=process" in agent and "KillSignal=SIGHUP" in agent
    assert "NoNewPrivileges" not in agent  # setuid helpers of jobs (nvidia-modprobe, apptainer)
    controller = (host["units"] / "gpufleet-controller.service").read_text()
    wanted = ["ProtectSystem=strict", "PrivateTmp=yes", "NoNewPrivileges=yes", "User=root"]
    wanted += ["StateDirectory=gpufleet", f"ExecStart={GPUFLEET} controller"]
    assert [s for s in wanted if s not in controller] == []
    # a broken unit fails the same check (the test can fail)
    bad = tmp_path / "bad.service"
    bad.write_text(controller.replace("Restart=on-failure", "Restart=sometimes"))
    broken = subprocess.run(["systemd-analyze", "verify", str(bad)], capture_output=True, text=True)
    assert "sometimes" in broken.stderr


def test_slurm_commands_on_path_unless_a_real_slurm_is_there(host: dict[str, Path]) -> None:
    out = _run("setup", "path", "--bin-dir", str(host["bin"]), path=str(host["empty"]))
    names = ("sbatch", "srun", "squeue", "scancel", "sacct", "sinfo", "scontrol")
    assert all(os.access(host["bin"] / n, os.X_OK) for n in names), out
    assert (host["bin"] / "gpufleet").resolve() == Path(GPUFLEET).resolve()
    again = _run("setup", "path", "--bin-dir", str(host["bin"]), path=str(host["empty"]))
    assert "nothing changed" in again
    # the written squeue runs, with this gpufleet, as a user's would: no server configured
    env = {"PATH": f"{host['bin']}:/usr/bin:/bin", "HOME": str(host["empty"])}
    sq = subprocess.run([str(host["bin"] / "squeue")], capture_output=True, text=True, env=env)
    assert sq.returncode != 0 and "no gpufleet server is configured" in sq.stderr, sq.stderr
    # with --controller, every user of the host gets its URL (client.yaml; no token there)
    url = "http://127.0.0.1:9"
    _run("setup", "path", "--bin-dir", str(host["bin"]), "--etc", str(host["etc"]),
         "--controller", url, path=str(host["empty"]))  # fmt: skip
    assert (host["etc"] / "client.yaml").read_text().endswith(f"server: {url}\n")
    env |= {"GPUFLEET_SITE_CONFIG": str(host["etc"] / "client.yaml"), "GPUFLEET_TOKEN": "t"}
    sq = subprocess.run([str(host["bin"] / "squeue")], capture_output=True, text=True, env=env)
    assert "cannot reach the gpufleet controller" in sq.stderr, sq.stderr
    # a real Slurm on PATH: nothing of ours is written beside or over it
    slurm = host["empty"] / "slurm"
    slurm.mkdir()
    (slurm / "sbatch").write_text("#!/bin/sh\necho real slurm\n")
    other = host["empty"] / "bin2"
    out = _run("setup", "path", "--bin-dir", str(other), path=str(slurm))
    assert f"a real Slurm is on PATH ({slurm / 'sbatch'}" in out
    assert sorted(p.name for p in other.iterdir()) == ["gpufleet"]


@pytest.fixture
def stopped() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()


def test_a_controller_and_an_agent_run_from_the_files_setup_wrote(
    host: dict[str, Path], stopped: list[subprocess.Popen[bytes]]
) -> None:
    port, empty = free_port(), str(host["empty"])
    _run("setup", "controller", *_where(host), "--host", "127.0.0.1", "--port", str(port),
         "--data-dir", str(host["data"]), "--user", ME, path=empty)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    logs = host["empty"]
    with (logs / "controller.log").open("wb") as log:
        stopped.append(subprocess.Popen(
            [GPUFLEET, "controller", "--config", str(host["etc"] / "controller.yaml")],
            stdout=log, stderr=subprocess.STDOUT,
        ))  # fmt: skip
    wait_for("the controller", lambda: plainhttp.get(f"{url}/healthz").is_success, 60,
             ignoring=(httpx.HTTPError,))  # fmt: skip
    admin = host["data"] / "admin.token"
    token = host["empty"] / "n1.token"
    create = subprocess.run(
        [GPUFLEET, "token", "create", "n1", "--role", "agent", "--node", "n1", "--out", str(token)],
        env={**os.environ, "GPUFLEET_SERVER": url, "GPUFLEET_TOKEN_FILE": str(admin)},
        capture_output=True, text=True,
    )  # fmt: skip
    assert create.returncode == 0, create.stderr
    node = ["--controller", url, "--name", "n1", "--token-from", str(token)]
    _run("setup", "node", *_where(host), *node, "--simulate", "2xH100",
         "--data-dir", str(host["agent"]), path=empty)  # fmt: skip
    assert stat.S_IMODE((host["etc"] / "agent.token").stat().st_mode) == 0o600
    with (logs / "agent.log").open("wb") as log:
        stopped.append(subprocess.Popen(
            [GPUFLEET, "agent", "--config", str(host["etc"] / "agent.yaml"), "--no-access-check"],
            stdout=log, stderr=subprocess.STDOUT,
        ))  # fmt: skip
    wait_for("the node registered", lambda: plainhttp.get(f"{url}/healthz").json()["nodes"] == 1,
             60, ignoring=(httpx.HTTPError,))  # fmt: skip


def test_setup_node_warns_when_the_agent_would_refuse_to_start(host: dict[str, Path]) -> None:
    from gpufleet.base.reach import closed

    out = _run("setup", "node", *_where(host), "--controller", "http://10.0.0.1:8600", "--name",
               "n1", path=str(host["empty"]))  # fmt: skip
    obstacle = closed(Path(sys.executable), run=True)  # this test's own Python, as the agent's
    if obstacle is None:
        assert "would refuse to start" not in out
    else:
        assert f"the agent would refuse to start: {obstacle.line()}" in out
        assert "gpufleet install --prefix /opt/gpufleet" in out
