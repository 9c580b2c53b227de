"""HTTPS end to end with a CA the test makes: a real controller serving --tls-cert/--tls-key,
a real agent that verifies it with --ca, a job submitted through the CLI and followed through
the SDK with the CA; clients without the CA, or with another one, are refused."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from livehelp import read_log, wait_for, wait_state
from localca import LocalCA
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.client import Client
from gpufleet.ops.localcluster import LocalCluster

pytestmark = pytest.mark.e2e


def gpufleet(*args: str) -> tuple[int, str, str]:
    env = {"GPUFLEET_TOKEN": None, "GPUFLEET_CA": None, "GPUFLEET_CONFIG": "/nonexistent"}
    r = CliRunner(env=env).invoke(app, list(args))
    return r.exit_code, r.stdout, r.stderr


def test_https_with_the_clusters_ca_and_refusals_without_it(
    tmp_path: Path, new_cluster: Callable[..., LocalCluster]
) -> None:
    ca = LocalCA.make(tmp_path / "ca")
    cert, key = ca.server_cert(tmp_path / "ca")
    other = LocalCA.make(tmp_path / "other", "another-ca")
    # new_cluster waits until the agent registered: over HTTPS, verified with --ca
    c = new_cluster(agents=1, tls_cert=cert, tls_key=key, ca=ca.cert_file, prefork=False)
    assert c.url.startswith("https://127.0.0.1:")
    assert b"--ca" in Path(f"/proc/{c.agent_procs['node-0'].proc.pid}/cmdline").read_bytes()

    # the CLI, with the CA: an admin makes a user token into a file, the user submits with it
    tok = tmp_path / "alice.token"
    code, _, err = gpufleet(
        "--ca", str(ca.cert_file), "token", "create", "alice", "--role", "user",
        "--user", "alice", "--out", str(tok), "--server", c.url,
        "--token-file", str(c.admin_token_file),
    )  # fmt: skip
    assert code == 0, err
    code, out, err = gpufleet(
        "--ca", str(ca.cert_file), "submit", "--server", c.url, "--token-file", str(tok),
        "--", "echo", "over https",
    )  # fmt: skip
    assert code == 0, err
    m = re.match(r"Submitted job (\S+)", out)
    assert m, out
    # the SDK, with the CA
    with Client(c.url, tok.read_text().strip(), ca=ca.cert_file) as alice:
        wait_state(alice, m.group(1), "SUCCEEDED", timeout_s=60)
        assert read_log(alice, m.group(1)) == "over https\n"

    # refused: the system's CAs do not know ours, another CA does not vouch for this server
    for verify in (None, other.cert_file):
        with (
            Client(c.url, c.admin_token, ca=verify) as stranger,
            pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"),
        ):
            stranger.nodes()
    code, _, err = gpufleet("jobs", "--server", c.url, "--token-file", str(tok))
    assert code == 1 and "certificate" in err and "--ca" in err
    code, _, err = gpufleet(
        "--ca", str(other.cert_file), "jobs", "--server", c.url, "--token-file", str(tok)
    )
    assert code == 1 and "CERTIFICATE_VERIFY_FAILED" in err

    # an agent given another CA does not talk to this controller, and says why
    c.start_agent(1, "--ca", str(other.cert_file))  # the last --ca wins
    log = c.data_dir / "node-1.log"
    wait_for(
        "node-1 saying its controller's certificate failed",
        lambda: "CERTIFICATE_VERIFY_FAILED" in log.read_text(errors="replace"),
        60,
    )
    with c.admin() as a:
        assert "node-1" not in {n.name for n in a.nodes()}
