"""Which jobs wait for which (``--dependency``), and the tasks of each job array.

A dependency on an array's id is on every task of it (afterok: all succeeded), not on its
first task, as in Slurm. Pure bookkeeping for the JobMaster: it holds no job, and answers from
the records it is given."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gpufleet.core.state import JobRecord
from gpufleet.model.job import Job, JobState


class Dependencies:
    def __init__(self) -> None:
        self._dependents: dict[str, list[str]] = {}  # a job id → the jobs that wait for it
        # an array's id (its first task's) → its tasks' ids
        self._arrays: dict[str, dict[str, None]] = {}

    def add(self, rec: JobRecord) -> None:
        """A job known from now on: into its array, and as a dependent of what it waits for."""
        if rec.array_id is not None:
            self._arrays.setdefault(rec.array_id, {})[rec.id] = None
        for _, dep in rec.depends_on:
            self._dependents.setdefault(dep, []).append(rec.id)

    def dependents(self, rec: JobRecord) -> list[str]:
        """The jobs that wait for ``rec`` (or for its whole array)."""
        waiting = self._dependents.get(rec.id, [])
        if rec.array_id is not None and rec.array_id != rec.id:  # on its whole array too
            waiting = [*waiting, *self._dependents.get(rec.array_id, ())]
        return waiting

    def array_tasks(self, array_id: str) -> Iterable[str]:
        return self._arrays.get(array_id, ())

    def unmet(self, rec: JobRecord, jobs: Mapping[str, JobRecord]) -> str:
        """What ``rec`` still waits for, in words ("" when nothing)."""
        if not rec.depends_on:
            return ""
        unmet = []
        for kind, dep in rec.depends_on:
            left = sum(not d.finished for d in self._depended_on(dep, jobs))
            if left:
                tasks = self._arrays.get(dep)
                of = f" ({left} of {len(tasks)} array tasks)" if tasks and len(tasks) > 1 else ""
                unmet.append(f"{kind}:{dep}{of}")
        return f"waiting for {', '.join(unmet)}" if unmet else ""

    def failed(self, rec: JobRecord, jobs: Mapping[str, JobRecord]) -> str:
        """Why ``rec`` can never start (an afterok dependency that did not succeed), or ""."""
        for kind, dep in rec.depends_on:
            if kind != "afterok":
                continue
            for d in self._depended_on(dep, jobs):
                if d.finished and d.state is not JobState.SUCCEEDED:
                    task = f" (array task {d.id})" if d.id != dep else ""
                    return f"dependency afterok:{dep}{task} ended {d.state.value}"
        return ""

    def open(self, rec: JobRecord, jobs: Mapping[str, JobRecord]) -> tuple[str, ...]:
        """Its dependencies not met yet, as Slurm's ``scontrol show job`` words them
        (``Dependency=``): ``afterok:1(unfulfilled)``, or ``afterok:1(failed)`` for one that
        can never be met; those met are left out, as there."""
        out = []
        for kind, dep in rec.depends_on:
            deps = self._depended_on(dep, jobs)
            ok = JobState.SUCCEEDED
            if kind == "afterok" and any(d.finished and d.state is not ok for d in deps):
                out.append(f"{kind}:{dep}(failed)")
            elif any(not d.finished for d in deps):
                out.append(f"{kind}:{dep}(unfulfilled)")
        return tuple(out)

    def left(self, rec: JobRecord, jobs: Mapping[str, JobRecord]) -> str:
        """``open`` as one text (``afterok:1(failed)``): what a job that ends pending keeps as
        its ``Dependency=``, as Slurm does; "" when none is left (those of a job that ran)."""
        return ",".join(self.open(rec, jobs))

    def _depended_on(self, dep: str, jobs: Mapping[str, JobRecord]) -> list[Job]:
        """The jobs a dependency on ``dep`` waits for: every task when it is an array's id."""
        tasks = self._arrays.get(dep)
        if not tasks:
            return [jobs[dep].job]
        return [jobs[t].job for t in tasks if t in jobs]
