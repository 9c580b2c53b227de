"""``scontrol show job`` counts a job's tasks as Slurm 22.05 does: a gpufleet worker holds a
node's tasks (``-N 2 --ntasks-per-node=4 -c 2``), and Slurm printed that job (compared with
gpufleet's by the user-script corpus, 2026-12-07) as ``NumTasks=8 CPUs/Task=2`` with
``MinCPUsNode=8`` (its node's CPUs); the shim printed the workers, ``NumTasks=2 CPUs/Task=8``."""

from __future__ import annotations

import re

from gpufleet.client.calls import Row
from gpufleet.shims.scontrol import job_lines


def shown(spec: Row, workers: int, placed: list[Row] | None = None) -> dict[str, str]:
    j = Row(id="7", name="ddp", user="alice", queue="gpu", state="RUNNING", submit_time=0.0,
            start_time=1.0, end_time=None, gpus=8.0, workers=workers, spec=spec, attempt=1,
            placement=placed or [Row(node=f"n{i}", cpu_milli=int(spec.get("cpus", 1)) * 1000,
                                     memory_mib=0) for i in range(workers)],
            reason=None)  # fmt: skip
    return dict(re.findall(r"(\S+?)=(\S*)", " ".join(job_lines(j, 2.0))))


def test_a_workers_tasks_are_counted_as_slurms() -> None:
    # sbatch -N 2 --ntasks-per-node=4 --gpus-per-task=1 -c 2 (io/sbatch/build.py's spec)
    spec = Row(workers=2, tasks_per_worker=4, cpus=8, gpus_per_worker=4, distinct_nodes=True)
    got = shown(spec, 2)
    assert (got["NumNodes"], got["NumCPUs"], got["NumTasks"], got["CPUs/Task"]) == (
        "2",
        "16",
        "8",
        "2",
    )
    assert got["MinCPUsNode"] == "8"


def test_one_task_per_worker_is_unchanged() -> None:
    got = shown(Row(workers=4, cpus=2), 4)  # sbatch -n 4 -c 2
    assert (got["NumCPUs"], got["NumTasks"], got["CPUs/Task"], got["MinCPUsNode"]) == (
        "8",
        "4",
        "2",
        "2",
    )


def test_all_of_each_nodes_memory_is_min_memory_0() -> None:
    """sbatch -N 1 --mem=0: Slurm 22.05 printed MinMemoryNode=0 (the corpus of 2026-12-07)."""
    got = shown(Row(workers=1, memory_mib=0, whole_node_memory=True), 1)
    assert got["MinMemoryNode"] == "0"


def test_an_exclusive_job_holds_its_nodes_cpus() -> None:
    """sbatch --exclusive -N 1 on an 8-CPU, 16000 MB node: Slurm 22.05 printed NumCPUs=8 and
    TRES=cpu=8,mem=16000M (the corpus of 2026-12-07); it asked for 1 CPU."""
    node = Row(node="n0", cpu_milli=8000, memory_mib=16000)
    got = shown(Row(workers=1, exclusive=True, memory_mib=4096), 1, [node])
    assert got["NumCPUs"] == "8" and got["TRES"].startswith("cpu=8,mem=16000M,node=1,billing=8")
    assert got["MinCPUsNode"] == "1"


def test_an_arrays_pending_record_shows_no_tasks_index_in_its_files() -> None:
    """sbatch --array=0-9:3%2, every task pending: Slurm 22.05's scontrol show job of the array
    printed ArrayTaskId=0,3,6,9%2 and StdOut=DIR/slurm-ID_4294967294.out (the corpus)."""
    from gpufleet.io.slurm_style import Tasks

    def task(i: int) -> Row:
        return Row(id=f"7{i}", name="a", user="alice", queue="gpu", state="PENDING",
                   submit_time=0.0, start_time=None, end_time=None, gpus=0.0, workers=1,
                   spec=Row(workdir="/w"), attempt=0, placement=[], reason=None,
                   array_id="70", array_index=i)  # fmt: skip

    lines = job_lines(Tasks([task(0), task(3)]), 1.0)
    assert "StdOut=/w/slurm-70_4294967294.out" in lines
