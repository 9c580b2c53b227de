"""The README's "Run a real cluster" guide run as written, on three hosts made of network
namespaces (``ctl-1``, ``gpu-01``, ``gpu-02``, each its own address; the filesystem shared, as
a cluster's /home): gpufleet installed once (the guide's shared /opt/gpufleet: the run's
``gpufleet install`` of its wheel with ``--extras server``, tests/support/installs.py, which
test_install.py checks), its commands put on the hosts' PATH by ``setup path``, then each
host's commands in its namespace, ``ana``'s as her (``runuser``). What the test changes, and
only that: each host's /etc/gpufleet, systemd directory and /var/lib under a root of its own
(the hosts share this machine's files), the controller run as root (``setup controller``
would make a system account), the user's name and UID unique to this run (removed after), a
``systemctl`` that starts what the unit's ``ExecStart=`` says (no systemd here), and
``/usr/local/bin`` under the root (this machine may have a real Slurm on PATH)."""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.support import netns, systemctl
from tests.support.waiting import wait_for

from support import installs, plainhttp
from support.readme import blocks, section

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.skipif(netns.unsupported() is not None, reason=str(netns.unsupported())),
]
HOSTS = ["ctl-1", "gpu-01", "gpu-02"]


def free_uid() -> int:
    taken = {p.pw_uid for p in pwd.getpwall()}
    return next(u for u in range(23000, 60000) if u not in taken)


@pytest.fixture
def world() -> Iterator[tuple[Path, netns.Hosts, str]]:
    """(root, hosts, user): the hosts up, a root under /var/tmp (passable, as /opt), a user
    name of this run's own; everything undone after."""
    root = Path(tempfile.mkdtemp(prefix="gpufleet-guide-", dir="/var/tmp"))
    root.chmod(0o755)
    for h in HOSTS:
        for d in ("var/lib", "logs", "units"):
            (root / h / d).mkdir(parents=True, mode=0o755)
    for d in ("usr/local/bin", "fake", "shared"):
        (root / d).mkdir(parents=True, mode=0o755)
    hosts = netns.Hosts(list(HOSTS))
    user = f"gfa{uuid.uuid4().hex[:6]}"
    try:
        hosts.up()
        yield root, hosts, user
    finally:
        for h in HOSTS:
            systemctl.stop_all(root / h / "logs")
        hosts.down()
        subprocess.run(["userdel", "--remove", user], capture_output=True, check=False)
        shutil.rmtree(root, ignore_errors=True)


def _run(argv: list[str], cwd: Path, env: dict[str, str], root: Path) -> str:
    try:
        done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired as e:
        done = subprocess.CompletedProcess(argv, -9, str(e.stdout), f"timed out: {e.stderr}")
    logs = "\n".join(systemctl.logs_of(root / h / "logs") for h in HOSTS)
    assert done.returncode == 0, f"{argv[-1]}\n{done.stdout}\n{done.stderr}\n{logs}"
    return done.stdout


def test_the_readmes_cluster_guide_runs_as_written(world: tuple[Path, netns.Hosts, str]) -> None:
    root, hosts, user = world
    binary, shared = root / "usr/local/bin", root / "shared"
    # installed once, on the "shared filesystem"; on a PATH without this machine's Slurm
    prefix, _, _ = installs.installed()
    setup = [str(prefix / "bin/gpufleet"), "setup", "path", "--bin-dir", str(binary)]
    _run(setup, shared, {**os.environ, "PATH": f"{binary}:/nonexistent"}, root)
    systemctl.install(root / "fake")
    path = f"{binary}:{root / 'fake'}:/usr/sbin:/usr/bin:/sbin:/bin"
    base = {"PATH": path, "HOME": "/root", "LANG": "C.UTF-8"}
    ctl, node, as_user = blocks(section("Run a real cluster"))

    def common(script: str) -> str:
        script = script.replace("ctl-1", hosts.addr("ctl-1")).replace("2001", str(free_uid()))
        return re.sub(r"\bana\b", user, script)

    def on(host: str, script: str, **subs: str) -> str:
        where = f"--etc {root / host}/etc/gpufleet --systemd-dir {root / host}/units"
        where += f" --bin-dir {binary}"
        for old, new in subs.items():
            assert old in script, old
            script = script.replace(old, new.format(where=where, r=root / host))
        env = {**base, "UNITS": str(root / host / "units"), "LOGS": str(root / host / "logs")}
        return _run([*hosts.exec(host), "bash", "-ec", script], shared, env, root)

    on("ctl-1", common(ctl).replace("/var/lib/gpufleet", f"{root / 'ctl-1'}/var/lib/gpufleet"),
       **{"gpufleet setup controller": "gpufleet setup controller {where} --user root "
                                       "--data-dir {r}/var/lib/gpufleet"})  # fmt: skip
    for name in ("gpu-01", "gpu-02"):
        on(name, common(node).replace("gpu-01", name),
           **{"gpufleet setup node": "gpufleet setup node {where} "
                                     "--data-dir {r}/var/lib/gpufleet-agent"})  # fmt: skip
    url = f"http://{hosts.addr('ctl-1')}:8600"
    wait_for("both nodes registered", lambda: plainhttp.get(f"{url}/healthz").json()["nodes"] == 2,
             60, ignoring=(httpx.HTTPError,))  # fmt: skip
    home = Path(pwd.getpwnam(user).pw_dir)
    env = {"HOME": str(home), "PATH": path, "LANG": "C.UTF-8",
           "GPUFLEET_SITE_CONFIG": f"{root / 'ctl-1'}/etc/gpufleet/client.yaml"}  # fmt: skip
    as_her = ["runuser", "-u", user, "--", "env", "-i", *(f"{k}={v}" for k, v in env.items())]
    out = _run([*hosts.exec("ctl-1"), *as_her, "bash", "-ec", common(as_user)], home, base, root)
    tasks = sorted(line for line in out.splitlines() if line.startswith("task "))
    assert [t.rsplit(" ", 1)[0] for t in tasks] == ["task 0 of 2 on", "task 1 of 2 on"], out
    assert {t.rsplit(" ", 1)[1] for t in tasks} == {"gpu-01", "gpu-02"}, out  # one on each
    states = re.findall(r"\b(COMPLETED|FAILED|CANCELLED|TIMEOUT|PENDING|RUNNING)\b", out)
    assert states == ["COMPLETED"] * 6, out  # hello, the array's 4 tasks, after
    arrays = sorted(p.read_text().strip() for p in home.glob("slurm-*_*.out"))
    assert arrays == [f"array task {i}" for i in range(4)], out
