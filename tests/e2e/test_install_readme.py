"""The README's "Install on real hosts" commands run as written, on this one host standing for
the controller's and the node's: every absolute path under a root of the test's own (``/opt``,
``/etc``, ``/var/lib``, ``/usr/local/bin``), the controller's address and port its own, the
controller's account root (``setup controller`` would make a system account ``gpufleet`` on
this machine), and a ``systemctl`` of the test's that starts a unit's ``ExecStart=`` line as
written by ``setup`` (there is no systemd here). The node registers from those files. pip's
configuration is the run's: the releases this machine's index resolves to, fetched once into
a wheelhouse that every install of the run resolves against (tests/support/installs.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.support import systemctl
from tests.support.waiting import wait_for

from gpufleet.ops.localcluster import free_port
from support import installs, plainhttp
from support.readme import blocks, section

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="the README's install runs as root"),
]
GPUFLEET = Path(sys.executable).parent / "gpufleet"


@pytest.fixture
def root() -> Iterator[Path]:
    """The hosts' root: under /var/tmp, which every account passes through (as /opt)."""
    r = Path(tempfile.mkdtemp(prefix="gpufleet-readme-", dir="/var/tmp"))
    r.chmod(0o755)
    for d in ("var/lib", "etc/systemd/system", "usr/local/bin", "opt", "logs", "fake"):
        (r / d).mkdir(parents=True, mode=0o755)
    try:
        yield r
    finally:
        systemctl.stop_all(r / "logs")
        installs.remove_later(r)


def test_the_readmes_install_commands_work_as_written(root: Path) -> None:
    port = free_port()
    script = blocks(section("Install on real hosts"))[0]
    units, binary = root / "etc/systemd/system", root / "usr/local/bin"
    where = f"--etc {root}/etc/gpufleet --systemd-dir {units} --bin-dir {binary}"
    for old, new in [
        (".venv/bin/gpufleet install", f"{GPUFLEET} install --bin-dir {binary}"),
        ("/opt/gpufleet", f"{root}/opt/gpufleet"),
        ("/var/lib/gpufleet", f"{root}/var/lib/gpufleet"),
        ("gpufleet setup controller", f"gpufleet setup controller {where} --user root "
                                      f"--data-dir {root}/var/lib/gpufleet"),
        ("gpufleet setup node", f"gpufleet setup node {where} "
                                f"--data-dir {root}/var/lib/gpufleet-agent"),
        ("ctl-1:8600", f"127.0.0.1:{port}"),
        ("--port 8600", f"--port {port}"),
    ]:  # fmt: skip
        assert old in script, old
        script = script.replace(old, new)
    systemctl.install(root / "fake")
    env = {**os.environ, **installs.pip_env(installs.wheelhouse())}
    env |= {"UNITS": str(units), "LOGS": str(root / "logs")}
    env["PATH"] = f"{binary}:{root / 'fake'}:/usr/bin:/bin"
    for k in ("GPUFLEET_SERVER", "GPUFLEET_TOKEN", "GPUFLEET_TOKEN_FILE", "VIRTUAL_ENV"):
        env.pop(k, None)
    done = subprocess.run(
        ["bash", "-ec", script], cwd=root / "logs", env=env, capture_output=True, text=True,
        timeout=500,
    )  # fmt: skip
    logs = systemctl.logs_of(root / "logs")
    assert done.returncode == 0, done.stdout + done.stderr + logs
    assert "installed " in done.stdout and "next:" in done.stdout
    url = f"http://127.0.0.1:{port}"
    wait_for("gpu-01 registered", lambda: plainhttp.get(f"{url}/healthz").json()["nodes"] == 1, 60,
             ignoring=(httpx.HTTPError,))  # fmt: skip
    # the agent the unit started is the installed one, its access check passed (no flag)
    assert (
        f"{root}/opt/gpufleet/bin/gpufleet agent --config"
        in (units / "gpufleet-agent.service").read_text()
    )
