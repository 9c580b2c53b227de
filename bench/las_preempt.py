"""LAS with preemption over the Philly trace (issue 11): replay time, and the per-job outcomes.

The run: ``philly_dev.csv`` on 64 nodes × 8 GPUs in 4 leaves, ``las`` order (Tiresias' queues
at 3,250 and 7,200 GPU-s since ADR 0038; one at 3,200 before) preempting by its own rule
(``preempt: order``), topology placement, EASY backfill, the virtual clusters as equal-share
queues, exact time limits: what ``gpufleet simulate replay … --order las --preempt order
--placement topology --backfill easy --equal-shares`` runs. Target: ≤ 60 s for all 53,779 jobs.

``--dump FILE`` writes every launch (time, job, attempt, nodes and devices per rank) and kill,
then every job's outcome (first start, end, state, attempts, preemptions), one line each, so two
trees can be diffed. ``--profile FILE`` writes a pyinstrument profile of the replay
(text for a ``.txt`` name, else HTML).

    PYTHONPATH=src .venv/bin/python bench/las_preempt.py [--jobs N] [--dump F] [--profile F]
"""

from __future__ import annotations

import time

PROCESS_START = time.perf_counter()  # before the imports: "the whole process"

import argparse  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from gpufleet.core.commands import Command, Kill, Launch  # noqa: E402
from gpufleet.sim.engine import Simulation  # noqa: E402
from gpufleet.sim.replay import (  # noqa: E402
    ProfileChoice,
)

if __package__ in (None, ""):  # run as a file (python bench/X.py): the checkout on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.philly import DEFAULT_TRACE, philly_workload  # noqa: E402

LAS = ProfileChoice("las", "topology", "easy", ("order",))


class _Recording(Simulation):
    """The simulation, writing down each launch and kill as the executor sees it."""

    log: list[str]

    def apply(self, commands: Sequence[Command]) -> None:
        for c in commands:
            if isinstance(c, Launch):
                where = " ".join(f"{p.node}:{','.join(map(str, p.gpus))}" for p in c.allocation)
                self.log.append(f"L {self.now!r} {c.job_id} {c.attempt} {where}")
            elif isinstance(c, Kill):
                self.log.append(f"K {self.now!r} {c.job_id} {c.attempt} {c.why}")
        super().apply(commands)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--jobs", type=int, default=None, help="replay only the first N jobs")
    ap.add_argument("--dump", type=Path, default=None, help="write launches and outcomes here")
    ap.add_argument("--profile", type=Path, default=None, help="pyinstrument HTML here")
    args = ap.parse_args()
    cluster, jobs = philly_workload(args.trace, args.jobs)
    sim = _Recording(cluster, LAS.build(0), jobs)
    sim.log = []
    profiler: Any = None
    if args.profile is not None:
        from pyinstrument import Profiler

        profiler = Profiler(interval=0.002)
        profiler.start()
    start = time.perf_counter()
    sim.run()
    replay_s = time.perf_counter() - start
    if profiler is not None:
        profiler.stop()
        text = args.profile.suffix == ".txt"
        args.profile.write_text(
            profiler.output_text(show_all=False) if text else profiler.output_html()
        )
    ru = resource.getrusage(resource.RUSAGE_SELF)
    print(
        f"{LAS.label}: {len(jobs):,} jobs · replay {replay_s:.1f} s · process wall "
        f"{time.perf_counter() - PROCESS_START:.1f} s · CPU {ru.ru_utime + ru.ru_stime:.1f} s · "
        f"{sim.cycles:,} cycles · {sim.preemptions:,} preemptions"
    )
    if args.dump is not None:
        with args.dump.open("w") as f:
            for line in sim.log:
                f.write(line + "\n")
            for o in sim.outcomes.values():
                f.write(
                    f"J {o.id} {o.first_start!r} {o.end_time!r} {o.state} {o.attempts} "
                    f"{o.preemptions} {o.run_s!r}\n"
                )
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
