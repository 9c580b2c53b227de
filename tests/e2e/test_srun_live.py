"""srun inside a real job: a controller and two agents on 127.0.0.1. Until batch jobs run
the step daemon on their other ranks themselves, the job's own script plays that part: rank
0 runs srun as a batch script would, rank 1 execs the step daemon. What this checks is the
rest of the path: the controller's step environment (hosts, slot, key), the agent's srun and
scontrol on PATH, and a step across the two nodes."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable

import pytest
from livehelp import read_log, wait_state

from gpufleet.ops.localcluster import LocalCluster

pytestmark = pytest.mark.e2e

PY = shlex.quote(sys.executable)
SHOW = (
    'echo "step $SLURM_STEP_ID task $SLURM_PROCID on $SLURMD_NODENAME gpus $CUDA_VISIBLE_DEVICES"'
)
STOP = 'test "$SLURM_NODEID" = 1 && kill -TERM $PPID; exit 0'  # $PPID: the step daemon
SCRIPT = f"""
if [ "$GPUFLEET_STEP_SLOT" != 0 ]; then exec {PY} -m gpufleet.slurm.stepd; fi
command -v srun
srun -l --ntasks-per-node=1 sh -c '{SHOW}'
rc=$?
scontrol show hostnames
# the batch step's end stops the other ranks; here a last step stops its step daemon
srun -N2 --ntasks-per-node=1 sh -c '{STOP}' 2>/dev/null
exit $rc
"""


def test_srun_runs_a_step_across_a_real_jobs_two_nodes(
    new_cluster: Callable[..., LocalCluster],
) -> None:
    cluster = new_cluster(agents=2)
    alice = cluster.user("alice")
    (job,) = alice.submit(
        {
            "name": "steps",
            "workers": 2,
            "gpus_per_worker": 8,
            "command": ["sh", "-c", SCRIPT],
            "time_limit_s": 120,
        }
    )
    done = wait_state(alice, job, {"SUCCEEDED", "FAILED"}, 90)
    log = read_log(alice, job, 0)
    assert done.state == "SUCCEEDED", log
    lines = log.splitlines()
    assert lines[0].endswith("/slurm-bin/srun")  # the agent's, first on PATH
    nodes = [p.node for p in done.placement]
    assert len(set(nodes)) == 2  # a whole node each
    gpus = [",".join(str(g) for g in p.gpus) for p in done.placement]
    assert sorted(lines[1:3]) == [
        f"0: step 0 task 0 on {nodes[0]} gpus {gpus[0]}",
        f"1: step 0 task 1 on {nodes[1]} gpus {gpus[1]}",
    ]
    assert lines[3:5] == nodes  # scontrol show hostnames $SLURM_JOB_NODELIST
