"""What starting a task costs behind ``agent/taskstart.py``: launch to exit of ``/bin/true``
through the agent's TaskRunner (in process, as the agent's own user), plain, with a working
directory (taskstart enters it, then execs the command), and as a batch script with an output
file (taskstart stays to copy the output to the file and the agent's log). Median of N runs."""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from gpufleet.agent.runner import TaskRunner
from gpufleet.api.schemas import AgentCommand


def launch_to_exit_ms(runs: int, **kw: Any) -> float:
    with tempfile.TemporaryDirectory() as d:
        r = TaskRunner(Path(d) / "agent", lambda gpus: "")
        times = []
        for i in range(runs):
            c = AgentCommand.model_validate(
                {
                    "kind": "launch",
                    "job": "m",
                    "attempt": i + 1,
                    "rank": 0,
                    "command": ["/bin/true"],
                    **kw,
                }
            )
            t0 = time.perf_counter()
            r.launch(c)
            ended = [e for e in r.wait(30.0, step_s=0.002) if e.kind == "exited"]
            if not ended or ended[0].exit_code != 0:
                raise RuntimeError(f"the task did not exit 0: {ended}")
            times.append(time.perf_counter() - t0)
        return statistics.median(times) * 1000


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--runs", type=int, default=30)
    a = p.parse_args(argv)
    wd = tempfile.mkdtemp(dir="/var/tmp")  # not /tmp: a root agent's task has its own
    try:
        plain = launch_to_exit_ms(a.runs)
        workdir = launch_to_exit_ms(a.runs, workdir=wd)
        output = launch_to_exit_ms(a.runs, workdir=wd, role="batch", output="o.txt")
    finally:
        shutil.rmtree(wd, ignore_errors=True)
    print(f"launch to exit of /bin/true, median of {a.runs}: plain {plain:.1f} ms, "
          f"with a workdir {workdir:.1f} ms, with an output file {output:.1f} ms")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
