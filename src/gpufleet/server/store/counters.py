"""The store's counters read without taking from them: the id its next job gets (what sbatch
--test-only prints, storing nothing)."""

from __future__ import annotations

import sqlalchemy as sa

from gpufleet.server.store.connections import Connections
from gpufleet.server.store.schema import counters


class CounterStore(Connections):
    def next_job_id(self) -> str:
        """The id the next job stored gets (as ``add_jobs`` numbers them)."""
        with self._read() as c:
            v = c.execute(sa.select(counters.c.value).where(counters.c.name == "job")).scalar()
        return str(int(v or 0) + 1)
