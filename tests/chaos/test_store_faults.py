"""The store fails under a live cluster (real controller, agents, PostgreSQL, disk): a fault
never makes a job run twice or get stuck, and the API answers 503 (retryable), never a 500
that half-happened. Memory only ever holds what the store committed: a turn whose commit
failed sent nothing, and the controller rebuilt itself from the store.

Each test prints its figures (``-s``): accepted, stored, ran twice, stuck, time to recover."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from chaoshelp import Burst, PgServer, Tmpfs, need_root, runs, settle_and_audit

from gpufleet.client import ApiError, Client
from gpufleet.ops.localcluster import LocalCluster
from gpufleet.server.store import Store, sqlite_url

pytestmark = pytest.mark.chaos

BURST = 300
OUTAGE_S = 8.0  # the issue's: PostgreSQL stopped for 8 s under load


def cluster(data_dir: Path, db_url: str = "") -> LocalCluster:
    return LocalCluster(
        data_dir,
        agents=3,
        gpus="8xH100",
        db_url=db_url,
        heartbeat_s=0.5,
        lease_s=3.0,
        node_grace_s=8.0,
        schedule_interval_s=0.5,
    )


def dump(c: LocalCluster) -> None:
    for f in [c.data_dir / "controller.log", *(c.data_dir / f"{n}.log" for n in c.agent_procs)]:
        lines = f.read_text(errors="replace").splitlines() if f.exists() else []
        print(f"--- {f}\n" + "\n".join(lines[-30:]))


@pytest.fixture
def pg() -> Iterator[PgServer]:
    need_root()
    server = PgServer()
    server.start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def live(request: pytest.FixtureRequest) -> Iterator[list[LocalCluster]]:
    made: list[LocalCluster] = []
    failed = request.session.testsfailed
    try:
        yield made
    finally:
        for c in made:
            if request.session.testsfailed != failed:
                dump(c)
            c.stop()


def burst_token(c: LocalCluster) -> str:
    with c.user("chaos") as u:
        return str(u.http.headers["authorization"].split()[1])


def wait_store_ok(c: LocalCluster, timeout_s: float) -> None:
    end = time.monotonic() + timeout_s
    while True:
        try:
            with Client(c.url, c.admin_token) as a:
                if a.health()["store"]["ok"]:
                    a.nodes()  # and the service answers (503 while it rebuilds)
                    return
        except Exception:
            pass
        assert time.monotonic() < end, "the controller did not come back after the store did"
        time.sleep(0.2)


@pytest.mark.slow
def test_postgres_stopped_mid_burst_no_job_runs_twice_none_stuck(
    pg: PgServer, live: list[LocalCluster], tmp_path: Path
) -> None:
    c = cluster(tmp_path / "pg", pg.url)
    live.append(c)
    c.start()
    burst = Burst(c.url, burst_token(c), BURST, "pgstop").start()
    burst.wait_accepted(BURST // 3, 120)
    pg.stop("immediate")  # mid-burst: connections cut, a turn's commit fails
    time.sleep(OUTAGE_S)  # the outage itself: nothing to poll, it is the fault's length
    with Client(c.url, c.admin_token) as a:  # while it is down: 503, and the cluster stands
        with pytest.raises(ApiError) as e:
            a.submit({"name": "during", "command": "true"}, idempotency_key="during")
        assert e.value.status == 503
        assert a.health()["store"]["ok"] is False
    t = time.monotonic()
    pg.start()  # crash recovery first (it was stopped as by a crash): seconds of its own
    cleared = time.monotonic()  # from here on the time to recover is the controller's
    print(f"PostgreSQL took {cleared - t:.1f} s to start again")
    wait_store_ok(c, 60)
    burst.join(240)
    fig = settle_and_audit(
        c, pg.url, burst, "postgres stopped 8 s", burst.first_accepted_after(cleared)
    )
    assert fig.retries.get("503", 0) > 0  # the outage did land in the middle of the burst
    assert "500" not in fig.retries
    # heartbeats went on while the store was down: no agent's lease ran out (its own log)
    fenced = [n for n in c.agent_procs if "fenced" in (c.data_dir / f"{n}.log").read_text()]
    assert not fenced, f"agents fenced their tasks during the outage: {fenced}"
    with Client(c.url, c.admin_token) as a:
        assert a.health()["store"]["rebuilds"] >= 1


def test_disk_full_cancel_is_503_or_done_never_half_and_nothing_runs_twice(
    live: list[LocalCluster], tmp_path: Path
) -> None:
    need_root()
    c = cluster(tmp_path / "full")
    disk = Tmpfs(c.data_dir / "controller", 64)  # the controller's SQLite data directory
    try:
        live.append(c)
        c.start()
        db = sqlite_url(c.data_dir / "controller")
        with c.user("victim") as v:
            (victim,) = v.submit({"name": "victim", "command": "sleep 600", "gpus_per_worker": 1})
            end = time.monotonic() + 60
            while v.job(victim).state != "RUNNING":
                assert time.monotonic() < end, v.job(victim)
                time.sleep(0.2)
        burst = Burst(c.url, burst_token(c), BURST, "full").start()
        burst.wait_accepted(BURST // 4, 120)
        disk.fill()
        # the burst goes on into the full disk: its commits fail, its callers get 503
        end = time.monotonic() + 60
        while burst.statuses.get("503", 0) == 0:
            assert time.monotonic() < end, f"no commit failed on the full disk: {burst.statuses}"
            assert not burst.errors, burst.errors
            time.sleep(0.1)
        answers = []
        with Client(c.url, c.admin_token) as a:
            for _ in range(5):  # an admin cancel on the full disk: 503, or done; never a 500
                try:
                    a.cancel(victim)
                    answers.append(200)
                    break
                except ApiError as e:
                    answers.append(e.status)
                    assert e.status == 503, e
                time.sleep(0.5)
        with Store.open(db, migrate=False) as st:
            stored = st.job(victim)
            assert stored is not None
            # a cancel that answered 503 did not happen: the store still runs the job
            assert (stored.state.value == "CANCELLED") == (answers[-1] == 200), (answers, stored)
        cleared = time.monotonic()
        disk.free()
        wait_store_ok(c, 60)
        with Client(c.url, c.admin_token) as a:
            if answers[-1] != 200:
                # memory says what the store says, and the job ran on through the outage
                assert a.job(victim).state == stored.state.value == "RUNNING"
                a.cancel(victim)
            end = time.monotonic() + 60
            while a.job(victim).state != "CANCELLED":
                assert time.monotonic() < end, a.job(victim)
                time.sleep(0.2)
        burst.join(240)
        fig = settle_and_audit(c, db, burst, "disk full", burst.first_accepted_after(cleared))
        assert "500" not in fig.retries
        # a restart afterwards runs the cancelled job again nowhere
        c.kill_controller()
        c.start_controller()
        c.wait_nodes(3)
        with Client(c.url, c.admin_token) as a:
            assert a.job(victim).state == "CANCELLED"
        assert [k for k in runs(c) if k[0] == victim] == [(victim, "1")]
    finally:
        c.stop()
        disk.close()


def test_controller_sigkill_mid_burst_on_postgres(
    pg: PgServer, live: list[LocalCluster], tmp_path: Path
) -> None:
    c = cluster(tmp_path / "kill", pg.url)
    live.append(c)
    c.start()
    burst = Burst(c.url, burst_token(c), BURST, "sigkill").start()
    burst.wait_accepted(BURST // 3, 120)
    c.kill_controller()  # SIGKILL mid-burst
    killed = time.monotonic()
    c.start_controller()
    up = time.monotonic()  # what is accepted from here on, the new process accepted
    burst.join(240)
    first = burst.first_accepted_after(up)
    fig = settle_and_audit(
        c, pg.url, burst, "controller SIGKILL", None if first is None else up - killed + first
    )
    assert "500" not in fig.retries
