"""The read-back of a start, a rebuild or a takeover (``Recovery._restore``) sets off no cyclic
garbage collection (issue 26): it makes a few objects per unfinished job, and each collection
they set off walks the controller's whole heap (20,000 held jobs: 1.6 s of CPU with them, 1.15 s
without, which a new leader spends before it answers)."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

from gpufleet.base.clock import ManualClock
from gpufleet.model.job import JobSpec
from gpufleet.scheduler.framework import Profile
from gpufleet.server.logs import LogStore
from gpufleet.server.service import ControllerService
from gpufleet.server.store import NewJob, Store, sqlite_url

HELD = 3_000  # jobs waiting on a dependency, as the failover bench's load


def test_the_read_back_sets_off_no_garbage_collection_and_leaves_the_collector_on(
    tmp_path: Path,
) -> None:
    url = sqlite_url(tmp_path / "db")
    with Store.open(url) as store:
        (gate,) = store.add_jobs([NewJob(JobSpec("gate", "alice", "default", gpus_per_worker=1))])
        store.add_jobs(
            [
                NewJob(
                    JobSpec(f"held-{k}", "alice", "default", gpus_per_worker=1),
                    depends_on=(("afterok", gate),),
                )
                for k in range(HELD)
            ]
        )
    store = Store.open(url)
    try:
        svc = ControllerService(
            store, Profile.build(), ManualClock(1e9), logs=LogStore(tmp_path / "logs")
        )
        collections: list[int] = []

        def note(phase: str, info: dict[str, Any]) -> None:
            if phase == "start":
                collections.append(int(info["generation"]))

        assert gc.isenabled()
        gc.callbacks.append(note)
        try:
            svc._restore()
        finally:
            gc.callbacks.remove(note)
        assert len(svc.ctrl.jobs) == HELD + 1  # every unfinished job read back
        assert collections == []
        assert gc.isenabled()
    finally:
        store.close()
