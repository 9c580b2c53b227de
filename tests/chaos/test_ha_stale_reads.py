"""Reads from a standby, with real processes (issue 26: "reads may be served by a standby only
where they say how stale they are"; server/ha/stale.py): two ``gpufleet controller --ha`` on
one PostgreSQL database, one agent. A client that sends ``X-Gpufleet-Allow-Stale: true`` gets
the jobs and nodes from the standby, read from the store (the standby never held them in
memory), with how long ago it saw the leader; without the header the standby answers 503 and
names the leader; once the leader is gone, the standby's reads say no leader is known."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_ha_failover import job, wait_state

from gpufleet.client import Client
from gpufleet.ops.hacluster import HaCluster
from gpufleet.ops.localcluster import wait_until
from support import plainhttp

pytestmark = [pytest.mark.chaos, pytest.mark.requires("postgres")]
STALE = {"X-Gpufleet-Allow-Stale": "true"}


def test_a_standby_serves_jobs_and_nodes_from_the_store_saying_how_stale(
    ha_cluster: Any, tmp_path: Path
) -> None:
    c: HaCluster = ha_cluster(agents=1)
    leader = c.wait_leader()
    standby = c.urls[1 - leader]
    records, go = tmp_path / "records", tmp_path / "go"
    with c.user("alice") as u:
        (jid,) = u.submit(job("long", records, go))
        wait_state(u, jid, "RUNNING")
        token = str(u.http.headers["authorization"].split()[1])
    auth = {"Authorization": f"Bearer {token}"}
    admin = {"Authorization": f"Bearer {c.admin_token}"}

    plain = httpx.get(f"{standby}/api/v1/jobs", headers=auth, timeout=10)
    assert plain.status_code == 503 and plain.headers["x-gpufleet-leader"] == c.urls[leader]

    r = httpx.get(f"{standby}/api/v1/jobs", headers={**auth, **STALE}, timeout=10)
    assert r.status_code == 200, r.text
    assert r.headers["x-gpufleet-role"] == "standby"
    assert r.headers["x-gpufleet-known-leader"] == "true"
    assert r.headers["x-gpufleet-leader"] == c.urls[leader]
    assert 0 <= int(r.headers["x-gpufleet-last-contact"]) < 3000 * c.ha_lease_s
    (row,) = r.json()
    assert (row["id"], row["state"], row["user"]) == (jid, "RUNNING", "alice")
    assert row["placement"][0]["node"] == "node-0"

    one = httpx.get(f"{standby}/api/v1/jobs/{jid}", headers={**auth, **STALE}, timeout=10)
    assert one.status_code == 200 and one.json()["state"] == "RUNNING"
    assert "RUNNING" in [e["state"] for e in one.json()["events"]]  # from the store
    bob = c.user("bob")  # another user's job is not shown, on a standby either
    token_b = str(bob.http.headers["authorization"].split()[1])
    bob_auth = {"Authorization": f"Bearer {token_b}", **STALE}
    other = httpx.get(f"{standby}/api/v1/jobs/{jid}", headers=bob_auth, timeout=10)
    assert other.status_code == 403
    bob.close()
    nobody = httpx.get(f"{standby}/api/v1/jobs", headers=STALE, timeout=10)
    assert nobody.status_code == 401  # tokens are checked on a standby too

    nodes = httpx.get(f"{standby}/api/v1/nodes", headers={**admin, **STALE}, timeout=10)
    assert nodes.status_code == 200, nodes.text
    (n,) = nodes.json()
    assert n["name"] == "node-0" and n["jobs"] == [jid] and n["gpus_free"] == n["gpus"] - 8

    with Client(standby, token) as sdk:  # the SDK asks for it, and says how stale
        sdk.allow_stale()
        assert [j.id for j in sdk.jobs()] == [jid] and sdk.job(jid).state == "RUNNING"
        assert sdk.staleness.role == "standby" and sdk.staleness.known_leader
        assert sdk.staleness.last_contact_ms is not None
    env = {**os.environ, "GPUFLEET_ALLOW_STALE": "1", "GPUFLEET_TOKEN": token}
    env.pop("GPUFLEET_TOKEN_FILE", None)
    cli = subprocess.run([sys.executable, "-m", "gpufleet.cli.main", "jobs", "--server", standby],
                         env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert cli.returncode == 0 and jid in cli.stdout, cli
    assert "note: a standby answered from the store: it last saw the leader" in cli.stderr, cli

    fresh = httpx.get(f"{c.urls[leader]}/api/v1/jobs", headers={**auth, **STALE}, timeout=10)
    assert fresh.status_code == 200 and fresh.headers["x-gpufleet-role"] == "leader"
    assert fresh.headers["x-gpufleet-last-contact"] == "0"

    # the leader frozen: the standby's reads say how long ago it last saw it renew, and that
    # grows (it renewed every lease/4 before) until the standby takes over
    c.kill_one(leader, signal.SIGSTOP)
    half = int(500 * c.ha_lease_s)

    def aging() -> bool:
        r = plainhttp.get(f"{standby}/api/v1/jobs", headers={**auth, **STALE}, timeout=10)
        assert r.status_code == 200 and r.headers["x-gpufleet-role"] == "standby", r.headers
        assert r.json()[0]["id"] == jid
        return int(r.headers["x-gpufleet-last-contact"]) >= half

    wait_until("the standby's data aging", aging, 60, 0.05)
    c.wait_leader(other_than=leader)
    c.kill_one(leader, signal.SIGCONT)
    go.touch()
