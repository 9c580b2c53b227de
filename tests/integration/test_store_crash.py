"""Crash safety: a writer killed with SIGKILL at a random point leaves every batch whole.

The child submits batches of jobs (idempotency keys ``r<round>-b<batch>-<k>``) and then moves
each batch to STARTING in a second transaction, printing the batch number once both committed.
After the kill, a reopened store must hold every acknowledged batch in full, and every batch
either fully or not at all, for the jobs and for the transitions alike."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from collections import defaultdict

import pytest

from gpufleet.model.job import JobState
from gpufleet.server.store import Store

pytestmark = pytest.mark.both_stores  # the store's contract: SQLite and PostgreSQL

BATCH = 25
CHILD = """
import sys
from gpufleet.core.commands import Transition
from gpufleet.model.job import JobSpec, JobState
from gpufleet.server.store import NewJob, Store

url, rnd, batch = sys.argv[1], sys.argv[2], int(sys.argv[3])
store = Store.open(url)
for b in range(100_000):
    spec = JobSpec(f"{rnd}-b{b}", "crash")
    ids = store.add_jobs([NewJob(spec, b, idempotency_key=f"{rnd}-b{b}-{k}") for k in range(batch)])
    S = JobState
    store.apply_transitions([Transition(i, 1, S.PENDING, S.STARTING, b + 0.5) for i in ids])
    print(b, flush=True)
"""


def _run_and_kill(url: str, rnd: str, acks: int) -> int:
    """Start the writer, SIGKILL it after ``acks`` acknowledged batches; the last one acked."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, url, rnd, str(BATCH)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    last = -1
    try:
        for _ in range(acks):
            line = proc.stdout.readline()
            assert line, f"the writer died by itself (rc={proc.poll()})"
            last = int(line)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    return last


def test_sigkill_leaves_every_batch_whole(db_url: str) -> None:
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    Store.open(db_url).close()  # migrate once, so the kill never lands inside a migration
    for r in range(3):
        rnd = f"r{r}"
        acked = _run_and_kill(db_url, rnd, rng.randint(1, 30))
        with Store.open(db_url) as store:
            jobs = [
                j
                for j in store.list_jobs(user="crash", limit=None)
                if j.spec.name.startswith(f"{rnd}-")
            ]
            batches: dict[int, list[JobState]] = defaultdict(list)
            for j in jobs:
                batches[int(j.spec.name.split("-b")[1])].append(j.state)
            ctx = f"seed {seed}, round {r}, acked up to batch {acked}"
            assert sorted(batches) == list(range(len(batches))), ctx
            assert len(batches) >= acked + 1, ctx  # nothing acknowledged is lost
            for b, states in batches.items():
                assert len(states) == BATCH, f"batch {b} is partial ({len(states)}); {ctx}"
                assert len(set(states)) == 1, f"batch {b} half transitioned; {ctx}"
                if b <= acked:
                    assert states[0] is JobState.STARTING, ctx
            for j in jobs[:: BATCH // 5]:
                n = len(store.job_events(j.id))
                assert n == (2 if j.state is JobState.STARTING else 1), ctx
