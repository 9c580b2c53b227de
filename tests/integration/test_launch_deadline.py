"""The launch deadline through the real API (uvicorn on 127.0.0.1, the service loop, a real
store): a job whose rank never starts is requeued past the deadline, not charged, and its node
is shown suspect in GET /nodes with why and audited, until its agent registers again. The
controller's clock is a ManualClock (test_api.py's ``serve``): the deadline passes when the
test moves it, while node loss, timed on the monotonic clock, does not happen."""

from __future__ import annotations

from pathlib import Path

from test_api import SPEC, T0, events, register, serve, wait_for

from gpufleet.base.clock import ManualClock
from gpufleet.server.store import Store


def test_a_launch_that_never_starts_is_requeued_and_its_node_suspect(
    db_url: str, tmp_path: Path
) -> None:
    store = Store.open(db_url)
    clock = ManualClock(T0)
    try:
        with serve(store, tmp_path / "controller", clock) as api:
            a0 = api.agent("node-0")
            register(a0, "node-0")
            alice = api.user("alice")
            (job,) = alice.submit({**SPEC, "name": "silent", "max_retries": 0})
            assert alice.job(job).state == "STARTING"  # the agent never fetches, never starts
            clock.advance(121)  # past the 120 s default launch deadline
            (other,) = alice.submit({**SPEC, "name": "wakes-the-loop"})

            def requeued() -> bool:
                return events(alice.job(job))[-2:] == [(1, "NODE_LOST"), (1, "PENDING")]

            wait_for("the silent job requeued", requeued)
            j = alice.job(job)
            assert j.retries_used == 0 and "launch deadline" in (j.events or [])[-2].why
            node = {n.name: n for n in api.admin.nodes()}["node-0"]
            assert node.state == "suspect" and "did not start within the launch deadline" in (
                node.why
            )
            assert alice.job(other).state == "PENDING"  # nothing is placed on a suspect node
            audit = [(a.action, a.target) for a in api.admin.audit()]
            assert ("node.suspect", "node-0") in audit

            register(a0, "node-0")  # its agent is back: trusted again, the jobs start there
            wait_for("both started", lambda: alice.job(other).state == "STARTING")
            assert alice.job(job).attempt == 2
            assert {n.name: n.state for n in api.admin.nodes()}["node-0"] != "suspect"
            assert ("node.trusted", "node-0") in [(a.action, a.target) for a in api.admin.audit()]
    finally:
        store.close()
