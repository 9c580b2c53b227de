"""The README's "High availability" commands run as written (against a PostgreSQL schema of
the test's own and free ports): two controllers with ``--ha``, an agent and the CLI given both
addresses; then the leader is SIGKILLed and the same CLI submits through the new leader."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from gpufleet.client import Client
from gpufleet.ops.localcluster import free_port, wait_until
from support import plainhttp

pytestmark = [pytest.mark.e2e, pytest.mark.requires("postgres")]
README = Path(__file__).parents[2] / "README.md"


def readme_block(title: str) -> str:
    section = README.read_text().split(f"### {title}\n", 1)[1]
    return section.split("```sh\n", 1)[1].split("```", 1)[0]


def role(url: str) -> str:
    try:
        return str(plainhttp.get(f"{url}/healthz", timeout=2).json()["ha"]["role"])
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return ""


def test_the_readmes_high_availability_commands_work_as_written(
    pg_url: str, tmp_path: Path
) -> None:
    ports = [str(free_port()), str(free_port())]
    script = readme_block("High availability")
    script = script.replace("postgresql://postgres@127.0.0.1:5432/test", f"'{pg_url}'")
    script = script.replace("8600", ports[0]).replace("8601", ports[1])
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    for k in ("GPUFLEET_SERVER", "GPUFLEET_TOKEN", "GPUFLEET_TOKEN_FILE", "GPUFLEET_DB"):
        env.pop(k, None)
    sh = subprocess.Popen(
        ["bash", "-ec", script], cwd=tmp_path, env=env, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        out, _ = sh.communicate(timeout=120)
        assert sh.returncode == 0, out
        assert "Submitted job" in out, out
        urls = [f"http://127.0.0.1:{p}" for p in ports]
        token = next(tmp_path.glob("ha-*/admin.token")).read_text().strip()
        with Client(",".join(urls), token) as c:
            jid = out.split("Submitted job ")[1].split()[0]
            try:
                wait_until("the job done", lambda: str(c.job(jid).state).endswith("SUCCEEDED"), 60)
            except TimeoutError:
                raise AssertionError((c.job(jid), out)) from None
        leader = next(i for i, u in enumerate(urls) if role(u) == "leader")
        pid = int(
            subprocess.run(
                ["pgrep", "-f", "-s", str(sh.pid), "--", f"--port {ports[leader]}"],
                capture_output=True, text=True, check=True,
            ).stdout.split()[0]
        )  # fmt: skip
        os.kill(pid, signal.SIGKILL)
        wait_until("the standby leading", lambda: role(urls[1 - leader]) == "leader", 30)
        again = subprocess.run(
            ["gpufleet", "submit", "--gpus", "1", "--", "true"], cwd=tmp_path, capture_output=True,
            text=True, timeout=60, env={**env, "GPUFLEET_SERVER": ",".join(urls),
                                        "GPUFLEET_TOKEN": token},
        )  # fmt: skip
        assert again.returncode == 0 and "Submitted job" in again.stdout, again
        jid = again.stdout.split("Submitted job ")[1].split()[0]
        with Client(",".join(urls), token) as c:
            wait_until("the job done", lambda: str(c.job(jid).state).endswith("SUCCEEDED"), 60)
        # the services' proxy, its own process, outlived the failover and follows the new leader
        gateway_log = tmp_path / "gateway.log"
        new = f"following the leading controller at {urls[1 - leader]}"
        wait_until("the gateway following the new leader",
                   lambda: new in gateway_log.read_text(), 60)  # fmt: skip
        assert "Traceback" not in gateway_log.read_text(), gateway_log.read_text()
    finally:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(sh.pid, sig)
            except ProcessLookupError:
                break
            if sig == signal.SIGTERM:
                wait_until("the README's processes stopped", lambda: not _alive(sh.pid), 60)


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True
