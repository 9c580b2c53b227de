"""srun's reading of its options and environment, and its block layout of a step over the
job's node slots."""

from __future__ import annotations

import pytest

from gpufleet.slurm.layout import base_env, capacities, per_node, plan, task_envs
from gpufleet.slurm.srun_opts import SrunError, parse

JOB = {"SLURM_NTASKS": "6", "SLURM_NNODES": "3", "SLURM_TASKS_PER_NODE": "2(x3)"}


def layout(*argv: str, env: dict[str, str] = JOB, slots: int = 3) -> list[int]:
    warn: list[str] = []
    return plan(parse([*argv, "true"], env), capacities(env, slots), warn)


def test_per_node_reads_slurms_compressed_counts() -> None:
    assert per_node("2(x3),1") == [2, 2, 2, 1]
    assert per_node("4") == [4]
    assert per_node("x") == []


def test_defaults_are_the_jobs_tasks_on_all_its_nodes() -> None:
    assert layout() == [2, 2, 2]


@pytest.mark.parametrize(
    ("argv", "want"),
    [
        (("-n1",), [1, 0, 0]),
        (("-n", "3"), [2, 1, 0]),
        (("-N2",), [1, 1, 0]),
        (("-N2", "-n3"), [2, 1, 0]),
        (("--ntasks-per-node=1",), [1, 1, 1]),
        (("-N2", "--ntasks-per-node=1"), [1, 1, 0]),
        (("-O", "-n9"), [3, 3, 3]),
    ],
)
def test_block_layout(argv: tuple[str, ...], want: list[int]) -> None:
    assert layout(*argv) == want


def test_too_much_is_refused_as_srun_refuses_it() -> None:
    with pytest.raises(SrunError, match="More processors requested than permitted"):
        layout("-n7")
    with pytest.raises(SrunError, match="more nodes than the job has"):
        layout("-N4")


def test_options_stop_at_the_command_and_k_takes_no_next_word() -> None:
    o = parse(["-K", "-l", "python", "-n", "5", "-l"], {})
    assert o.kill_on_bad_exit and o.label and o.command == ["python", "-n", "5", "-l"]
    assert (
        parse(["--kill-on-bad-exit=0", "x"], {"SLURM_KILL_BAD_EXIT": "1"}).kill_on_bad_exit is False
    )
    assert parse(["-W", "30", "--mpi=none", "x"], {}).wait_s == 30


def test_unsupported_options_warn_once_or_are_refused() -> None:
    o = parse(["--mem=4G", "-t", "10", "--cpu-bind=cores", "--exclusive", "x"], {})
    assert o.command == ["x"]
    assert o.warnings == ["ignoring --mem, -t, --cpu-bind, --exclusive (a gpufleet step runs "
                          "on the job's allocation as it is)"]  # fmt: skip
    with pytest.raises(SrunError, match="option -i is not supported here"):
        parse(["-i", "in.txt", "x"], {})
    o = parse(["-o", "%j_%t.out", "--error=e%2t", "--open-mode=append", "x"], {})
    assert (o.output, o.error, o.append, o.command) == ("%j_%t.out", "e%2t", True, ["x"])
    o = parse(["x"], {"SLURM_STDOUTMODE": "o", "SLURM_STDERRMODE": "none"})  # srun's input vars
    assert (o.output, o.error, o.append) == ("o", "none", False)
    with pytest.raises(SrunError, match="only --mpi=none"):
        parse(["--mpi=pmix", "x"], {})
    with pytest.raises(SrunError, match="unrecognized option '--bogus'"):
        parse(["--bogus", "x"], {})
    with pytest.raises(SrunError, match="no executable"):
        parse(["-n2"], {})


def test_export() -> None:
    env = {"PATH": "/bin", "SLURM_JOB_ID": "1", "SECRET": "s", "A": "1"}
    assert base_env(env, "ALL") == env
    assert base_env(env, "NONE") == {"PATH": "/bin", "SLURM_JOB_ID": "1"}
    assert base_env(env, "A,B=2") == {"PATH": "/bin", "SLURM_JOB_ID": "1", "A": "1", "B": "2"}
    assert base_env(env, "ALL,B=2") == {**env, "B": "2"}


def test_labels_as_srun_writes_them() -> None:
    from gpufleet.slurm.srun import labelled

    assert labelled(b"a\nb\n", 3, 2) == b"03: a\n03: b\n"
    assert labelled(b"partial", 12, 2) == b"12: partial\n"


def test_two_slots_on_one_node_are_one_node_of_the_step() -> None:
    """``-n2 --gpus-per-task=1``: the job's two workers on one node, each a slot of its own;
    the step is on one node, its tasks that node's 0 and 1, as Slurm numbers them, each with
    its own GPU."""
    nodes = {i: {"name": "n1", "gpus": [str(i)], "job_gpus": ["0", "1"], "env": {}} for i in (0, 1)}
    o = parse(["--gpus-per-task=1", "true"], {})
    envs = task_envs({}, [1, 1], nodes, step_id=0, launch_addr="127.0.0.1", o=o)
    (t0,), (t1,) = ([e for _, e in envs[slot]] for slot in (0, 1))
    for e in (t0, t1):
        assert e["SLURM_NNODES"] == e["SLURM_STEP_NUM_NODES"] == "1"
        assert e["SLURM_NODELIST"] == e["SLURM_STEP_NODELIST"] == "n1"
        assert e["SLURM_TASKS_PER_NODE"] == e["SLURM_STEP_TASKS_PER_NODE"] == "2"
        assert e["SLURM_NODEID"] == "0" and e["SLURM_GTIDS"] == "0,1"
        assert (e["SLURM_TOPOLOGY_ADDR"], e["SLURM_TOPOLOGY_ADDR_PATTERN"]) == ("n1", "node")
    assert [t0["SLURM_PROCID"], t1["SLURM_PROCID"]] == ["0", "1"]
    assert [t0["SLURM_LOCALID"], t1["SLURM_LOCALID"]] == ["0", "1"]
    assert [t0["CUDA_VISIBLE_DEVICES"], t1["CUDA_VISIBLE_DEVICES"]] == ["0", "1"]


def test_gpus_per_task_gives_each_task_its_own_and_says_so() -> None:
    """``--ntasks-per-node=4 --gpus-per-task=1``: each task sees one GPU and, as Slurm's,
    SLURM_STEP_GPUS names it (not the node's four)."""
    nodes = {0: {"name": "n1", "gpus": ["0", "1", "2", "3"], "job_gpus": ["4", "5", "6", "7"]}}
    o = parse(["--gpus-per-task=1", "true"], {})
    envs = task_envs({}, [4], nodes, step_id=0, launch_addr="127.0.0.1", o=o)
    got = [(e["CUDA_VISIBLE_DEVICES"], e["SLURM_STEP_GPUS"]) for _, e in envs[0]]
    assert got == [("0", "4"), ("1", "5"), ("2", "6"), ("3", "7")]
