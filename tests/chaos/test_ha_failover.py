"""Controllers in high availability with real processes (issue 26, ADR 0032): two
``gpufleet controller --ha`` on different ports and data directories, one PostgreSQL
database, agents given both addresses. The leader is SIGKILLed, or frozen for 30 s and
thawed, or both start at once. Each case ends with one leader, every accepted job run once and
nothing run twice — counted from the tasks' own records (a line each start and each end
appends to a file), not from the controller's word."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
from tcpcut import Relay

from gpufleet.client import Client
from gpufleet.ops.hacluster import HaCluster
from gpufleet.ops.localcluster import free_port, wait_until
from gpufleet.shims.install import install

pytestmark = [pytest.mark.chaos, pytest.mark.requires("postgres")]


def job(name: str, records: Path, go: Path | None = None) -> dict[str, Any]:
    """Appends its start and end to ``records``; runs until ``go`` exists (None: at once)."""
    line = '"$GPUFLEET_JOB_ID $GPUFLEET_ATTEMPT"'
    wait = f"while [ ! -e {go} ]; do sleep 0.2; done; " if go is not None else ""
    script = f"echo start {line} >> {records}; {wait}echo end {line} >> {records}"
    return {"name": name, "gpus_per_worker": 8, "cpus": 1, "memory_gib": 1,
            "command": ["/bin/sh", "-c", script]}  # fmt: skip


def lines(records: Path) -> Counter[str]:
    try:
        return Counter(records.read_text().splitlines())
    except FileNotFoundError:
        return Counter()


def state(u: Client, jid: str) -> str:
    return str(u.job(jid).state)


def wait_state(u: Client, jid: str, want: str, timeout_s: float = 60) -> None:
    wait_until(f"job {jid} {want}", lambda: state(u, jid).endswith(want), timeout_s)


def assert_once(u: Client, ids: list[str], records: Path) -> None:
    """Every job SUCCEEDED in its first attempt, and its task started and ended once."""
    for jid in ids:
        wait_state(u, jid, "SUCCEEDED")
        j = u.job(jid)
        assert j.attempt == 1, (jid, j.attempt, j.events)
    got = lines(records)
    for jid in ids:
        assert got[f"start {jid} 1"] == 1 and got[f"end {jid} 1"] == 1, got
    assert sum(got.values()) == 2 * len(ids), got  # nothing else ran


def one_leader_for(c: HaCluster, seconds: float) -> int:
    """Sampled for ``seconds``: never two leaders; the one at the end."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        roles = c.roles()
        assert list(roles.values()).count("leader") <= 1, roles
        time.sleep(0.1)
    return c.wait_leader()


def test_a_killed_leaders_standby_takes_over_keeps_running_jobs_and_places_new_ones(
    ha_cluster: Any, tmp_path: Path
) -> None:
    c: HaCluster = ha_cluster()
    records, go = tmp_path / "records", tmp_path / "go"
    old = c.wait_leader()
    with c.user("alice") as u:
        (running,) = u.submit(job("long", records, go))
        wait_state(u, running, "RUNNING")
        c.kill_one(old)  # SIGKILL
        new = c.wait_leader(other_than=old)
        (placed,) = u.submit(job("after", records))  # through the standby's pointer
        wait_state(u, placed, "SUCCEEDED")
        go.touch()
        assert_once(u, [running, placed], records)
    assert new != old and c.leader() == new


@pytest.mark.slow
def test_a_leader_frozen_30_s_then_thawed_does_nothing_and_stands_by(
    ha_cluster: Any, tmp_path: Path
) -> None:
    c: HaCluster = ha_cluster()
    records, go = tmp_path / "records", tmp_path / "go"
    old = c.wait_leader()
    with c.user("alice") as u:
        (running,) = u.submit(job("long", records, go))
        wait_state(u, running, "RUNNING")
        c.kill_one(old, signal.SIGSTOP)
        frozen = time.monotonic()
        new = c.wait_leader(other_than=old)
        # its connection to the frozen leader times out; a keyed submission is sent again
        ids = [running, *u.submit(job("during", records), idempotency_key="during")]
        wait_state(u, ids[1], "SUCCEEDED")
        wait_until("30 s frozen", lambda: time.monotonic() - frozen >= 30, 40, 0.5)
        c.kill_one(old, signal.SIGCONT)
        # thawed, it finds itself deposed and starts again as a standby (same pid)
        wait_until("the old leader standing by", lambda: c.roles().get(old) == "standby", 60)
        assert one_leader_for(c, 3.0) == new
        ids += u.submit(job("after", records))
        go.touch()
        assert_once(u, ids, records)
    for name, ap in c.agent_procs.items():
        log = (c.data_dir / f"{name}.log").read_text(errors="replace")
        assert ap.proc.poll() is None, name
        assert "killed by" not in log, log[-2000:]


def test_controllers_started_at_once_elect_one_leader(ha_cluster: Any, tmp_path: Path) -> None:
    c: HaCluster = ha_cluster(agents=1)
    leader = one_leader_for(c, 3.0)
    (other,) = set(range(c.controllers)) - {leader}
    r = httpx.get(f"{c.urls[other]}/api/v1/jobs", timeout=5)  # a standby says where to go
    assert r.status_code == 503 and r.headers["retry-after"] == "1", r.text
    assert r.headers["x-gpufleet-leader"] == c.urls[leader] == r.json()["leader"]
    page = httpx.get(f"{c.urls[other]}/?x=1", timeout=5)  # the dashboard: to the leader
    assert page.status_code == 307 and page.headers["location"] == f"{c.urls[leader]}/?x=1"
    auth = {"Authorization": f"Bearer {c.admin_token}"}  # Prometheus scrapes both: their roles
    standby = httpx.get(f"{c.urls[other]}/metrics", headers=auth, timeout=5).text
    leads = httpx.get(f"{c.urls[leader]}/metrics", headers=auth, timeout=5).text
    assert "gpufleet_ha_leader 0" in standby and "gpufleet_nodes" not in standby, standby
    assert "gpufleet_ha_leader 1" in leads and "gpufleet_ha_epoch 0" not in leads
    records = tmp_path / "records"
    with c.user("alice") as u:
        ids = u.submit(job("a", records)) + u.submit(job("b", records))
        token = str(u.http.headers["authorization"].split()[1])
        # the Slurm shims too, given the standby's address first
        bindir = tmp_path / "bin"
        install(bindir)
        env = {**os.environ, "GPUFLEET_SERVER": f"{c.urls[other]},{c.urls[leader]}",
               "GPUFLEET_TOKEN": token, "PATH": f"{bindir}:{os.environ['PATH']}"}  # fmt: skip
        env.pop("GPUFLEET_TOKEN_FILE", None)
        cmd = (
            f"echo start $GPUFLEET_JOB_ID 1 >> {records}; echo end $GPUFLEET_JOB_ID 1 >> {records}"
        )
        out = subprocess.run(["sbatch", "--parsable", "--wrap", cmd], env=env, cwd=tmp_path,
                             capture_output=True, text=True, timeout=60)  # fmt: skip
        assert out.returncode == 0, out
        ids.append(out.stdout.strip().split(";")[0])
        q = subprocess.run(["squeue", "-h", "-t", "all", "-o", "%i"], env=env,
                           capture_output=True, text=True, timeout=60)  # fmt: skip
        assert q.returncode == 0 and ids[-1] in q.stdout.split(), q
        assert_once(u, ids, records)
    assert c.leader() == leader


@pytest.mark.slow
def test_three_controllers_settle_on_one_leader_after_each_kill(
    ha_cluster: Any, tmp_path: Path
) -> None:
    """Three controllers: started at once, one leads; each time the leader is SIGKILLed one
    of the two standbys leads and the other stays a standby, never two leaders, and a job
    running throughout keeps its first attempt."""
    c: HaCluster = ha_cluster(agents=1, controllers=3)
    records, go = tmp_path / "records", tmp_path / "go"
    leader = one_leader_for(c, 2.0)
    with c.user("alice") as u:
        (long,) = u.submit(job("long", records, go))
        wait_state(u, long, "RUNNING")
        for _ in range(2):
            c.kill_one(leader)  # SIGKILL
            new = c.wait_leader(other_than=leader)
            settled = one_leader_for(c, 2.0)
            assert settled == new, c.roles()
            # the other stands by: a standby that is slow to answer /healthz on a loaded host
            # ("" for 2 s) is not a second leader (one_leader_for sampled that): wait for it
            pair = lambda: sorted(c.roles().values()) == ["leader", "standby"]  # noqa: E731
            wait_until("one leader and one standby", pair, 30)
            c.start_one(leader)  # back, as a standby
            back = lambda old=leader: c.roles().get(old) == "standby"  # noqa: E731
            wait_until("the old leader standing by", back, 60)
            assert sorted(c.roles().values()) == ["leader", "standby", "standby"], c.roles()
            leader = new
        go.touch()
        assert_once(u, [long], records)
    assert c.leader() == leader


def test_a_leader_killed_mid_burst_loses_no_accepted_job_and_runs_none_twice(
    ha_cluster: Any, tmp_path: Path
) -> None:
    """Four clients submit 30 jobs each (every submission with an idempotency key, as the
    CLI's retries have); the leader is SIGKILLed after the first 20 are accepted. Every job a
    client was told is accepted runs once, in its first attempt."""
    c: HaCluster = ha_cluster()
    records = tmp_path / "records"
    old = c.wait_leader()
    accepted: list[str] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def client(k: int) -> None:
        with c.user(f"u{k}") as u:
            for n in range(30):
                try:
                    (jid,) = u.submit(job(f"b{k}-{n}", records), idempotency_key=f"b{k}-{n}")
                except BaseException as e:  # the test fails on any
                    errors.append(e)
                    return
                with lock:
                    accepted.append(jid)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    wait_until("20 accepted", lambda: len(accepted) >= 20, 60, 0.01)
    c.kill_one(old)
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert len(accepted) == len(set(accepted)) == 120
    c.wait_leader(other_than=old)
    with c.admin() as u:
        wait_until(
            "every accepted job ended",
            lambda: sum(1 for k in lines(records) if k.startswith("end")) >= 120,
            180,
            0.5,
        )
        time.sleep(1.0)  # what would run twice has had time to
        assert_ran_once(u, accepted, records)


def assert_ran_once(u: Client, ids: list[str], records: Path) -> None:
    """Every job SUCCEEDED and its task started and ended once, in the job's last attempt. A
    launch that the killed leader committed but never delivered is requeued as a new attempt
    by the reconcile (its agent does not run it): that attempt never started."""
    got = lines(records)
    for jid in ids:
        wait_state(u, jid, "SUCCEEDED")
        attempt = u.job(jid).attempt
        mine = {k: n for k, n in got.items() if k.split()[1] == jid}
        assert mine == {f"start {jid} {attempt}": 1, f"end {jid} {attempt}": 1}, mine
    assert sum(got.values()) == 2 * len(ids), got  # nothing else ran


def test_a_leader_stopped_cleanly_hands_over_at_once(ha_cluster: Any, tmp_path: Path) -> None:
    """SIGTERM (an upgrade, ``systemctl stop``): the leader leaves the lease as it stops, and
    the standby takes it at its next read instead of a lease later; running work goes on."""
    c: HaCluster = ha_cluster(agents=1, ha_lease_s=20.0)  # a lapse would take 20 s
    records, go = tmp_path / "records", tmp_path / "go"
    old = c.wait_leader()
    with c.user("alice") as u:
        (running,) = u.submit(job("long", records, go))
        wait_state(u, running, "RUNNING")
        c.kill_one(old, signal.SIGTERM)
        stopped = time.monotonic()
        c.wait_leader(other_than=old, timeout_s=15)
        assert time.monotonic() - stopped < 15  # well before the 20 s lease
        ids = [running, *u.submit(job("after", records), idempotency_key="after")]
        go.touch()
        assert_once(u, ids, records)


@pytest.mark.slow
def test_a_leader_cut_off_from_its_agents_but_not_from_postgresql_gives_the_lead_up(
    ha_cluster: Any, tmp_path: Path
) -> None:
    """Agents reach each controller through a relay of its own (which the controller
    advertises); the leader's is cut. It still renews its lease in PostgreSQL, but
    no agent reaches it: after the agent silence (4 s here) it gives the lead up, the standby
    (which the agents reach) takes over, they register with it, and new work runs; the job
    running all along keeps its first attempt."""
    ports = [free_port(), free_port()]
    relays = [Relay(("127.0.0.1", p)) for p in ports]
    try:
        c: HaCluster = ha_cluster(
            ports=ports,
            front={i: r.port for i, r in enumerate(relays)},
            controller_args=["--outage-tolerance-s", "60", "--ha-agent-silence-s", "4"],
        )
        records, go = tmp_path / "records", tmp_path / "go"
        old = c.wait_leader()
        with c.user("alice") as u:
            (running,) = u.submit(job("long", records, go))
            wait_state(u, running, "RUNNING")
            relays[old].cut()
            new = c.wait_leader(other_than=old, timeout_s=90)
            # requests to the cut leader hang until their timeouts (the relay accepts, then
            # holds): agents and clients reach the new one tens of seconds later at worst
            ids = [running, *u.submit(job("during", records), idempotency_key="during")]
            wait_state(u, ids[1], "SUCCEEDED", 180)
            relays[old].heal()
            wait_until("the old leader standing by", lambda: c.roles().get(old) == "standby", 60)
            assert one_leader_for(c, 3.0) == new
            go.touch()
            assert_once(u, ids, records)
    finally:
        for r in relays:
            r.close()


@pytest.mark.slow
def test_a_leader_whose_agents_all_died_keeps_the_lead(ha_cluster: Any) -> None:
    """Every agent SIGKILLed: the leader hears nobody, and neither does the standby, so no
    claim deposes it (ADR 0048): another leader would fare no better, and a cluster whose
    nodes are all down does not flap between its controllers."""
    c: HaCluster = ha_cluster(
        controller_args=["--outage-tolerance-s", "60", "--ha-agent-silence-s", "4"]
    )
    old = c.wait_leader()  # the agents registered with it (``start`` waits for them)
    epoch = httpx.get(f"{c.urls[old]}/healthz", timeout=10).json()["ha"]["epoch"]
    for ap in c.agent_procs.values():
        os.killpg(ap.proc.pid, signal.SIGKILL)
        ap.proc.wait(timeout=30)
    assert one_leader_for(c, 15.0) == old  # over three silences
    assert httpx.get(f"{c.urls[old]}/healthz", timeout=10).json()["ha"]["epoch"] == epoch
    for i in range(c.controllers):
        assert "giving the lead up" not in (c.data_dir / f"controller{i}.log").read_text()
