"""Issue 26, backups, with real processes: a cluster under load is backed up with the real
``gpufleet backup create`` while its controller runs; the controller is then SIGKILLed and its
store lost (the SQLite file moved away; on PostgreSQL a new empty database); ``gpufleet backup
restore`` puts the backup into an empty store, and a controller started on it carries on.

What it must have kept: queues, tokens, secrets (sealed: the restored row opens with the
cluster's key and with no other), the service and its replica, fair-share history, accounting,
and every job accepted before the backup began. The jobs running at backup time are adopted
from what their agents say and end once: counted from the tasks' own records (a line at each
start and each end), not from the controller's word.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from livehelp import wait_for, wait_state

import realparts
from gpufleet.api import schemas as s
from gpufleet.api.secrets import SecretCreate
from gpufleet.client import Client
from gpufleet.client.http import ApiError
from gpufleet.ops.localcluster import LocalCluster
from gpufleet.server.secrets_box import DecryptError, SecretBox, load_box, new_key_text, parse_key
from gpufleet.server.store import Store
from gpufleet.server.store import secrets as stored_secrets
from support.records import lines, shell_job

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.xdist_group("backup-live")]

TOLERANCE_S = 45.0  # the agents keep their tasks this long without a controller
VALUE = "backup-test-secret-5c1f7e"
SLEEP = [sys.executable, "-c", "import time; time.sleep(900)"]


def long_job(name: str, records: Path, go: Path) -> dict[str, Any]:
    line = '"$GPUFLEET_JOB_ID $GPUFLEET_ATTEMPT"'
    script = (
        f"echo start {line} >> {records}; "
        f"while [ ! -e {go} ]; do sleep 0.2; done; echo end {line} >> {records}"
    )
    return shell_job(name, script, gpus=4, queue="vision")


def gpufleet(*args: str) -> str:
    res = subprocess.run(
        [sys.executable, "-m", "gpufleet.cli.main", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        timeout=120,
    )
    assert res.returncode == 0, (args, res.stdout, res.stderr)
    return res.stdout


class Load:
    """Submits small jobs (no GPU, 0.5 s each) while it runs; remembers when each was
    accepted."""

    def __init__(self, u: Client) -> None:
        self.u = u
        self.accepted: list[tuple[float, str]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run)

    def run(self) -> None:
        spec = {"name": "load", "gpus_per_worker": 0, "cpus": 1, "memory_gib": 1}
        while not self.stop.wait(0.05):
            (jid,) = self.u.submit({**spec, "command": ["sleep", "0.5"]})
            self.accepted.append((time.monotonic(), jid))

    def __enter__(self) -> Load:
        self.thread.start()
        wait_for("the load under way", lambda: len(self.accepted) >= 10, 30)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def lose_the_store(c: LocalCluster, tmp_path: Path, new_db: str) -> list[str]:
    """The controller's store is gone: SQLite's files moved away, or a new empty database.
    Returns the store options for ``gpufleet backup restore``."""
    ctl = c.data_dir / "controller"
    if new_db:
        c.db_url = new_db
        return ["--db", new_db]
    lost = tmp_path / "lost"
    lost.mkdir()
    for f in ctl.glob("gpufleet.db*"):
        f.rename(lost / f.name)
    return ["--data-dir", str(ctl)]


def states_in(url: str) -> dict[str, tuple[str, int]]:
    """Each job's state and attempt in a store (here: as the backup holds them)."""
    with Store.open(url, migrate=False) as st, st.engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT id, state, attempt FROM jobs")).all()
    return {str(r[0]): (str(r[1]), int(r[2])) for r in rows}


def sealed_opens_only_with_the_key(c: LocalCluster, url: str) -> None:
    with Store.open(url, migrate=False) as st, st.engine.connect() as conn:
        row = stored_secrets.get(conn, "user", "alice", "api-key")
    assert row is not None
    box = load_box(None, c.data_dir / "controller", {})
    got = box.open(row_sealed(row), "user", "alice", "api-key")
    assert got == VALUE
    with pytest.raises(DecryptError):
        SecretBox(parse_key(new_key_text(), "a new key")).open(
            row_sealed(row), "user", "alice", "api-key"
        )


def row_sealed(row: stored_secrets.SealedRow) -> Any:
    from gpufleet.server.secrets_box import Sealed

    return Sealed(row.key_id, row.nonce, row.ciphertext)


@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
def test_a_cluster_restored_from_a_backup_taken_under_load_carries_on(
    store: str, new_cluster: Any, tmp_path: Path
) -> None:
    with ExitStack() as stack:
        src = new = ""
        if store == "postgresql":
            realparts.require("postgres", "pg_dump", "pg_restore")
            src = stack.enter_context(realparts.pg_database())
            new = stack.enter_context(realparts.pg_database())
        c: LocalCluster = new_cluster(
            agents=2,
            db_url=src,
            node_grace_s=0.0,
            # not 1.5 s: an agent starved that long by the suite's load had its watchdog fence
            # the replica, which this test would read as a restart by the restore
            lease_s=5.0,
            controller_args=["--outage-tolerance-s", str(TOLERANCE_S)],
        )
        run_the_scenario(c, tmp_path, src, new)


def run_the_scenario(c: LocalCluster, tmp_path: Path, src: str, new: str) -> None:
    records, go, out = tmp_path / "records", tmp_path / "go", tmp_path / "secret.sha"
    store_opts = ["--db", src] if src else ["--data-dir", str(c.data_dir / "controller")]
    with c.admin() as a, c.user("alice") as u:
        a.update_queue("vision", s.QueueUpdate(weight=3.0, cohort="lab", quota_gpus=12))
        u.create_secret(SecretCreate(name="api-key", value=VALUE))
        u.create_service(
            {"name": "web", "replicas": 1, "replica": {"gpus_per_worker": 1, "command": SLEEP}}
        )
        (short,) = u.submit(
            {"name": "short", "queue": "vision", "gpus_per_worker": 2, "command": ["sleep", "1"]}
        )
        wait_state(u, short, "SUCCEEDED", 60)
        longs = [*u.submit(long_job("one", records, go)), *u.submit(long_job("two", records, go))]
        for jid in longs:
            wait_state(u, jid, "RUNNING", 60)
        wait_for("both started", lambda: sum(lines(records).values()) == 2, 30)
        wait_for("the replica ready", lambda: u.service("web").ready == 1, 60)
        web_before = u.service("web")
        tokens_before = {t.name for t in a.tokens()}
        usage_before = next(q for q in a.queues() if q.name == "vision").fair_share_usage
        acct_before = {r.key: r for r in a.accounting(by="queue")}
        assert usage_before > 0 and acct_before["vision"].jobs >= 1

        backup = tmp_path / "backup.gpufleet"
        with Load(u) as load:
            began = time.monotonic()
            said = gpufleet("backup", "create", str(backup), *store_opts)
            ended = time.monotonic()
            wait_for("more load", lambda: load.accepted[-1][0] > ended + 0.5, 30)
        assert f"backup {backup}" in said
        before_backup = [jid for t, jid in load.accepted if t < began]
        after_backup = [jid for t, jid in load.accepted if t > ended]
        late = a.create_token(s.TokenCreate(name="late", role="user", user="bob"))

    c.kill_controller()  # SIGKILL, and the store with it
    restore_opts = lose_the_store(c, tmp_path, new)
    said = gpufleet("backup", "restore", str(backup), *restore_opts)
    assert f"restored {backup}" in said
    at_backup = states_in(new or f"sqlite:///{c.data_dir / 'controller/gpufleet.db'}")
    running = {j: a for j, (st, a) in at_backup.items() if st in ("STARTING", "RUNNING")}
    # and load jobs (each runs 0.5 s), running when the backup was taken: ended since
    assert set(longs) | {"web.1"} < set(running), running
    c.start_controller()
    c.wait_nodes(2)
    check_what_was_kept(c, longs, web_before, tokens_before, usage_before, acct_before)
    check_the_jobs(c, longs, before_backup, after_backup, records, go)
    with c.user("alice") as u:  # running at backup time, ended since: ended once, not rerun
        for jid, attempt in running.items():
            if jid in longs or jid.startswith("web."):  # checked above
                continue
            j = wait_state(u, jid, "SUCCEEDED", 60)
            assert j.attempt == attempt, (jid, attempt, j.events)
    assert late.token is not None
    with c.client(late.token) as bob, pytest.raises(ApiError) as e:
        bob.jobs()  # made after the backup: not in it
    assert e.value.status == 401
    sealed_opens_only_with_the_key(c, new or f"sqlite:///{c.data_dir / 'controller/gpufleet.db'}")
    with c.user("alice") as u:  # the secret, opened by the restored controller for a new job
        (jid,) = u.submit(
            {
                "name": "uses-secret",
                "gpus_per_worker": 0,
                "command": ["/bin/sh", "-c", f'printf %s "$API_KEY" | sha256sum > {out}'],
                "secrets": [{"name": "api-key", "env": "API_KEY"}],
            }
        )
        wait_state(u, jid, "SUCCEEDED", 60)
    assert out.read_text().split()[0] == hashlib.sha256(VALUE.encode()).hexdigest()
    assert VALUE.encode() not in backup.read_bytes()  # sealed in the backup


def check_what_was_kept(
    c: LocalCluster,
    longs: list[str],
    web_before: Any,
    tokens_before: set[str],
    usage_before: float,
    acct_before: dict[str, s.AccountingRow],
) -> None:
    with c.admin() as a, c.user("alice") as u:  # the admin token: restored
        q = next(q for q in a.queues() if q.name == "vision")
        assert (q.weight, q.cohort, q.quota_gpus) == (3.0, "lab", 12)
        assert q.fair_share_usage >= usage_before * 0.99  # the history, decayed a little
        assert {t.name for t in a.tokens()} >= tokens_before
        acct = {r.key: r for r in a.accounting(by="queue")}
        assert acct["vision"].jobs >= acct_before["vision"].jobs
        assert acct["vision"].gpu_hours >= acct_before["vision"].gpu_hours
        assert [x.name for x in u.secrets()] == ["api-key"]
        web = wait_for("the replica ready again", lambda: (w := u.service("web")).ready and w, 60)
        before = [(r.job_id, r.node, r.port) for r in web_before.replicas]
        assert [(r.job_id, r.node, r.port) for r in web.replicas] == before
        assert web.generation == web_before.generation
        for r in web.replicas:  # adopted, not started again
            assert u.job(r.job_id).attempt == 1


def check_the_jobs(
    c: LocalCluster,
    longs: list[str],
    before_backup: list[str],
    after_backup: list[str],
    records: Path,
    go: Path,
) -> None:
    with c.user("alice") as u:
        for jid in longs:  # adopted from what the agents say: still attempt 1
            j = wait_state(u, jid, "RUNNING", 30)
            assert j.attempt == 1, (jid, j.events)
        go.touch()
        for jid in longs:
            j = wait_state(u, jid, "SUCCEEDED", 60)
            assert j.attempt == 1, (jid, j.events)
        # every job accepted before the backup began ends; one that started after the backup
        # runs again (the backup cannot know), numbered past the attempt its node ran: a
        # launch of the same number would be dropped as a redelivery, and wait for the
        # launch deadline (120 s) to be started again
        for jid in before_backup:
            wait_state(u, jid, "SUCCEEDED", 60)
        # every job, not the listing's newest 200: the load goes on while `backup create`
        # starts, and a loaded host's interpreter start lets hundreds more into the backup
        known = {j.id for j in u.jobs(all_states=True, limit=100_000)}
        assert set(before_backup) <= known
        assert not set(after_backup) & known  # accepted after the backup ended: not in it
    got = lines(records)
    for jid in longs:
        assert got[f"start {jid} 1"] == 1 and got[f"end {jid} 1"] == 1, got
    assert sum(got.values()) == 4, got  # no other attempt, nothing ran twice
