"""Job secrets on a real cluster: a controller process and a root agent process
(``LocalCluster``), two Unix users this test creates. User A makes a secret with the real CLI
(its value on stdin) and a cluster secret is made from a file; A's job gets one as a variable
and one as a 0400 file of A's uid in a 0700 directory of A's; the directory is gone after the
job. The value is in no API answer, no store row (the SQLite file is grepped), not in the job's
spec, the audit log, any process's command line or either process's log; B's job may not use
A's secret and is refused at submit, naming it."""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gpufleet.client import Client
from gpufleet.client.http import ApiError
from gpufleet.ops.localcluster import LocalCluster
from support.waiting import wait_for

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        os.geteuid() != 0, reason="needs root: it creates two Unix users and a root agent"
    ),
    pytest.mark.skipif(
        not all(shutil.which(t) for t in ("useradd", "userdel", "setpriv", "unshare", "mount")),
        reason="needs useradd/userdel (passwd) and setpriv/unshare/mount (util-linux)",
    ),
]
FAST = {"heartbeat_s": 0.5, "lease_s": 1.5, "node_grace_s": 4.0, "schedule_interval_s": 0.5}
VALUE = f"live-secret-{uuid.uuid4().hex}"
CERT = f"-----BEGIN TEST-----\n{uuid.uuid4().hex}\n-----END TEST-----\n"
# prints digests, never the values: the job's log is an API answer too
JOB = (
    'id -u; printf %s "$API_KEY" | sha256sum | cut -c1-64; '
    'f="$GPUFLEET_SECRETS_DIR/cert.pem"; echo "DIR=$GPUFLEET_SECRETS_DIR"; '
    'sha256sum < "$f" | cut -c1-64; stat -c "%a %u" "$f" "$GPUFLEET_SECRETS_DIR"; '
    "echo ready; exec sleep 120"
)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture(scope="module")
def users() -> Iterator[list[str]]:
    tag = uuid.uuid4().hex[:6]
    names = [f"gsa{tag}", f"gsb{tag}"]
    for n in names:
        subprocess.run(
            ["useradd", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/bin/sh", n],
            check=True,
        )
    try:
        yield names
    finally:
        for n in names:
            subprocess.run(["userdel", n], check=False)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, users: list[str]) -> Iterator[LocalCluster]:
    c = LocalCluster(
        tmp_path_factory.mktemp("job-secrets"),
        agents=1,
        gpus="2xH100",
        fallback_account="",
        **FAST,  # type: ignore[arg-type]
    )
    try:
        c.start()
        yield c
    finally:
        c.stop()
        for log in sorted(c.data_dir.glob("*.log")):
            print(f"----- {log.name}\n" + "\n".join(log.read_text().splitlines()[-30:]))


def token_of(c: Client) -> str:
    return str(c.http.headers["authorization"]).split()[1]


def gpufleet(c: LocalCluster, token: str, *args: str, stdin: str = "") -> str:
    env = {**os.environ, "GPUFLEET_SERVER": c.url, "GPUFLEET_TOKEN": token,
           "GPUFLEET_CONFIG": "/nonexistent/gpufleet.yaml"}  # fmt: skip
    r = subprocess.run(
        [sys.executable, "-m", "gpufleet.cli.main", *args],
        input=stdin, capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert VALUE not in r.stdout + r.stderr
    return r.stdout


def test_a_job_gets_its_secrets_and_they_leak_nowhere(
    cluster: LocalCluster, users: list[str], tmp_path: Path
) -> None:
    a_name, b_name = users
    a_uid = pwd.getpwnam(a_name).pw_uid
    alice, bob = cluster.user(a_name), cluster.user(b_name)
    gpufleet(cluster, token_of(alice), "secret", "create", "api-key", stdin=VALUE + "\n")
    cert = tmp_path / "cert.pem"
    cert.write_text(CERT)
    gpufleet(
        cluster,
        cluster.admin_token,
        "secret",
        "create",
        "tls",
        "--cluster",
        "--from-file",
        str(cert),
    )
    listed = gpufleet(cluster, token_of(alice), "secret", "ls", "--json")
    assert "api-key" in listed and "tls" in listed

    (job,) = alice.submit(
        {
            "name": "uses-secrets",
            "command": ["/bin/sh", "-c", JOB],
            "time_limit_s": 300,
            "secrets": [{"name": "api-key", "env": "API_KEY"}, {"name": "tls", "file": "cert.pem"}],
        }
    )
    wait_for("the job's report", lambda: "ready" in alice.logs(job).data, 60)
    lines = alice.logs(job).data.splitlines()
    assert lines[0] == str(a_uid)
    assert lines[1] == digest(VALUE) and lines[3] == digest(CERT)
    assert lines[2] == "DIR=/tmp/.gpufleet-secrets"  # inside A's private /tmp
    assert lines[4:6] == [f"400 {a_uid}", f"700 {a_uid}"]
    # on the node: where A's /tmp really is
    (real,) = (cluster.data_dir / "node-0" / job).glob("*/rank0.tmpdir/.gpufleet-secrets")
    assert (real / "cert.pem").stat().st_uid == a_uid
    # no process's command line holds a value (ps shows them to every user)
    for p in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            assert VALUE.encode() not in p.read_bytes(), p
        except OSError:
            continue

    # B's job may not use A's secret: refused at submit, naming it
    with pytest.raises(ApiError) as e:
        bob.submit({"name": "b", "command": ["true"],
                    "secrets": [{"name": "api-key", "env": "K"}]})  # fmt: skip
    assert e.value.status == 422 and "'api-key'" in str(e.value) and "secrets[0]" in str(e.value)

    alice.cancel(job)
    wait_for("cancelled", lambda: alice.job(job).state == "CANCELLED", 60)
    wait_for("the secrets directory removed", lambda: not real.exists(), 30)

    # nowhere else: API answers, the job's spec, the audit log, the store's file, the logs
    admin = cluster.admin()
    answers = []
    for tok, path in (
        (token_of(alice), f"/jobs/{job}"),
        (token_of(alice), "/jobs?all=true"),
        (token_of(alice), "/secrets"),
        (cluster.admin_token, "/audit?limit=1000"),
        (cluster.admin_token, "/secrets"),
        (cluster.admin_token, "/dashboard/cluster"),
        (token_of(alice), "/dashboard/me"),
    ):
        r = httpx.get(f"{cluster.url}/api/v1{path}", headers={"Authorization": f"Bearer {tok}"})
        assert r.status_code == 200, (path, r.text)
        answers.append(r.text)
    scrape = {"Authorization": f"Bearer {cluster.admin_token}"}
    answers.append(httpx.get(f"{cluster.url}/metrics", headers=scrape).text)
    for text in answers:
        assert VALUE not in text and CERT.splitlines()[1] not in text
    spec = alice.job(job).spec
    assert spec["secrets"][0] == {"name": "api-key", "scope": "user", "env": "API_KEY", "file": ""}
    uses = [x for x in admin.audit(limit=1000) if x.action == "secret.use"]
    assert {(x.actor, x.target, x.detail["job"]) for x in uses} == {
        (f"job:{a_name}", f"secret:user:{a_name}:api-key", job),
        (f"job:{a_name}", "secret:cluster:tls", job),
    }
    ctl = cluster.data_dir / "controller"
    stored = b"".join(p.read_bytes() for p in ctl.glob("gpufleet.db*"))
    assert b"api-key" in stored  # the rows are there …
    assert VALUE.encode() not in stored and CERT.splitlines()[1].encode() not in stored  # … sealed
    for log in cluster.data_dir.glob("*.log"):
        text = log.read_text(errors="replace")
        assert VALUE not in text and CERT.splitlines()[1] not in text, log
    admin.close()
