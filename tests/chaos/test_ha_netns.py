"""Controllers in high availability on hosts of their own, partitioned by the network (issue
26): the test makes four network namespaces on one bridge (``tests/support/netns.py``), two
``gpufleet controller --ha`` and two agents, each in its own; PostgreSQL (a server of the
test's own) listens on the bridge, so every controller reaches it through its veth pair. A cut
is an iptables DROP rule inside the leader's namespace: packets are lost silently, as on a
broken link, and only between the peers named. No relay, no mock.

Each case ends with one leader, every accepted job run once, nothing run twice, and no agent
having killed anything — counted from the tasks' own records (a line each start and each end
appends to a file) and the agents' logs, not from the controller's word."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from chaoshelp import PgServer, need_root, stop_ha_clusters
from test_ha_failover import assert_once, job, one_leader_for, wait_state
from tests.support.netns import Hosts, unsupported

from gpufleet.ops.hacluster import HaCluster
from gpufleet.ops.localcluster import wait_until
from realparts import missing

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

CONTROLLERS, AGENTS = ["c0", "c1"], ["n0", "n1"]
CUT_S = 10.0  # the least a cut lasts: over three leader leases


@pytest.fixture
def net() -> Iterator[tuple[Hosts, PgServer]]:
    """The hosts, and PostgreSQL on this machine's address on their bridge."""
    need_root()
    why = unsupported()
    if why is not None:
        missing(why)
    hosts = Hosts([*CONTROLLERS, *AGENTS])
    hosts.up()
    pg: PgServer | None = None
    try:
        pg = PgServer(also_on=hosts.here)
        pg.start()
        yield hosts, pg
    finally:
        if pg is not None:
            pg.close()
        hosts.down()


@pytest.fixture
def ns_ha(
    request: pytest.FixtureRequest, tmp_path: Path, net: tuple[Hosts, PgServer]
) -> Iterator[Callable[..., HaCluster]]:
    hosts, pg = net
    made: list[HaCluster] = []

    def start(**kw: Any) -> HaCluster:
        c = HaCluster(
            tmp_path / "ha",
            agents=len(AGENTS),
            db_url=pg.url_at(hosts.here),
            heartbeat_s=0.5,
            node_grace_s=0.0,  # derived from the tolerance
            schedule_interval_s=0.5,
            host_for={i: hosts.addr(h) for i, h in enumerate(CONTROLLERS)},
            wrap_for={i: hosts.exec(h) for i, h in enumerate(CONTROLLERS)},
            agent_host={i: hosts.addr(h) for i, h in enumerate(AGENTS)},
            agent_wrap={i: hosts.exec(h) for i, h in enumerate(AGENTS)},
            **{"controller_args": ["--outage-tolerance-s", "60"], **kw},
        )
        made.append(c)
        c.start()
        return c

    failed = request.session.testsfailed
    try:
        yield start
    finally:
        stop_ha_clusters(made, request.session.testsfailed != failed, agents=True)


def reaches(hosts: Hosts, where: str, url: str) -> bool:
    """Whether host ``where`` reaches the host and port of ``url`` through the network: a
    connection made or refused (a process that does not listen there now) is reached; one
    that times out was dropped on the way."""
    code = (
        "import socket, sys\n"
        "try:\n"
        "    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3).close()\n"
        "except ConnectionRefusedError:\n"
        "    pass\n"
    )
    host, port = url.removeprefix("http://").split(":")
    r = subprocess.run([*hosts.exec(where), sys.executable, "-c", code, host, port],
                       capture_output=True, timeout=30)  # fmt: skip
    return r.returncode == 0


def nothing_killed(c: HaCluster) -> None:
    """Every agent ran throughout and killed no task (the fence of ADR 0031 never fired)."""
    for name, ap in c.agent_procs.items():
        log = (c.data_dir / f"{name}.log").read_text(errors="replace")
        assert ap.proc.poll() is None, name
        assert "killed by" not in log, log[-2000:]


def test_a_leader_cut_off_from_postgresql_but_not_from_the_agents_acts_no_more(
    ns_ha: Callable[..., HaCluster], net: tuple[Hosts, PgServer], tmp_path: Path
) -> None:
    """The leader's host loses PostgreSQL (its agents and clients still reach it). It cannot
    renew: it stops leading before its lease ends, the standby takes over, and the old one,
    whose writes hang meanwhile, commits and sends nothing; healed, it stands by."""
    hosts, pg = net
    c = ns_ha()
    records, go = tmp_path / "records", tmp_path / "go"
    old = c.wait_leader()
    with c.user("alice") as u:
        (running,) = u.submit(job("long", records, go))
        wait_state(u, running, "RUNNING")
        hosts.cut(CONTROLLERS[old], hosts.here, pg.port)
        cut = time.monotonic()
        new = c.wait_leader(other_than=old)
        ids = [running, *u.submit(job("during", records), idempotency_key="during")]
        wait_state(u, ids[1], "SUCCEEDED")
        # the partition is the one named: the agents' hosts still reach the old leader
        assert all(reaches(hosts, a, c.urls[old]) for a in AGENTS)
        assert c.roles()[old] != "leader"  # it answers nothing, or not as the leader
        wait_until("the cut held", lambda: time.monotonic() - cut >= CUT_S, 30, 0.2)
        hosts.heal(CONTROLLERS[old])
        wait_until("the old leader standing by", lambda: c.roles().get(old) == "standby", 90)
        assert one_leader_for(c, 3.0) == new
        ids += u.submit(job("after", records), idempotency_key="after")
        go.touch()
        assert_once(u, ids, records)
    nothing_killed(c)


def test_a_leader_cut_off_from_the_agents_but_not_from_postgresql_hands_over(
    ns_ha: Callable[..., HaCluster], net: tuple[Hosts, PgServer], tmp_path: Path
) -> None:
    """The leader's host loses both agents' hosts (PostgreSQL and the clients still reach it):
    it can still renew its lease, but the agents tell the standby they reach that they cannot
    reach it, and the standby proves so through the store (ADR 0048). The leader steps down
    and the standby leads; the agents register with it, the job running all along keeps its
    first attempt (no agent's fence fires: that would take 60 s), new work runs; healed, the
    old leader stands by and does not take the lead back."""
    hosts, _pg = net
    c = ns_ha()
    records, go = tmp_path / "records", tmp_path / "go"
    old = c.wait_leader()
    with c.user("alice") as u:
        (running,) = u.submit(job("long", records, go))
        wait_state(u, running, "RUNNING")
        for a in AGENTS:
            hosts.cut(CONTROLLERS[old], hosts.addr(a))
        cut = time.monotonic()
        new = c.wait_leader(other_than=old, timeout_s=120)
        ids = [running, *u.submit(job("during", records), idempotency_key="during")]
        wait_state(u, ids[1], "SUCCEEDED", 120)
        # the partition is the one named: no agent reaches the old leader's host, the
        # standby's host reaches PostgreSQL and the old leader's host too
        assert not any(reaches(hosts, a, c.urls[old]) for a in AGENTS)
        assert reaches(hosts, CONTROLLERS[new], c.urls[old])
        wait_until("the cut held", lambda: time.monotonic() - cut >= 3 * CUT_S, 60, 0.2)
        assert one_leader_for(c, 3.0) == new  # the old one did not take the lead back
        hosts.heal(CONTROLLERS[old])
        wait_until("the old leader standing by", lambda: c.roles().get(old) == "standby", 90)
        assert one_leader_for(c, 5.0) == new
        ids += u.submit(job("after", records), idempotency_key="after")
        go.touch()
        assert_once(u, ids, records)
    nothing_killed(c)
