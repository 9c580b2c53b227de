"""The environment of a launched rank speaks Slurm's and torchrun's languages whole: every
output variable of sbatch/srun that means something here, and torchrun's worker set, with the
values those systems give (Slurm's ``2(x3)`` counts, its hostlist syntax, whole CPUs)."""

from __future__ import annotations

from dataclasses import replace

from builders import cluster_spec, profile, spec

from gpufleet.core.commands import Launch
from gpufleet.core.controller import Controller
from gpufleet.core.events import JobSubmitted
from gpufleet.core.launch_env import ArrayFacts, JobFacts, per_node_counts, rank_env
from gpufleet.model.allocation import Placement
from gpufleet.model.hostlist import expand
from gpufleet.model.job import JobSpec


def P(node: str, gpus: tuple[int, ...]) -> Placement:
    return Placement(node, gpus, 1000, 1000, 4096)


def gang() -> tuple[Placement, ...]:
    """5 ranks of 2 GPUs: 2 on gpu-01, 2 on gpu-02, 1 on gpu-03."""
    return (
        P("gpu-01", (0, 1)),
        P("gpu-01", (2, 3)),
        P("gpu-02", (0, 1)),
        P("gpu-02", (4, 5)),
        P("gpu-03", (6, 7)),
    )


def envs(facts: JobFacts | None, attempt: int = 1) -> list[dict[str, str]]:
    return [dict(e) for e in rank_env("42", 7, attempt, gang(), facts)]


FACTS = JobFacts.of(spec("train", gpus=2, cpus=3.5, mem_gib=8, queue="vision", retries=2))


def test_per_node_counts_in_slurms_compressed_form() -> None:
    assert per_node_counts([2, 2, 2, 1]) == "2(x3),1"
    assert per_node_counts([4]) == "4" and per_node_counts([1, 2, 1]) == "1,2,1"


def test_slurms_job_and_step_variables() -> None:
    e = envs(FACTS)
    first, last = e[0], e[-1]
    for k, v in {
        "SLURM_JOB_ID": "42",
        "SLURM_JOBID": "42",
        "SLURM_JOB_NAME": "train",
        "SLURM_JOB_PARTITION": "vision",
        "SLURM_JOB_USER": "alice",
        "SLURM_CLUSTER_NAME": "gpufleet",
        "SLURM_NTASKS": "5",
        "SLURM_NPROCS": "5",
        "SLURM_NNODES": "3",
        "SLURM_JOB_NUM_NODES": "3",
        "SLURM_JOB_NODELIST": "gpu-[01-03]",
        "SLURM_NODELIST": "gpu-[01-03]",
        "SLURM_TASKS_PER_NODE": "2(x2),1",
        "SLURM_JOB_CPUS_PER_NODE": "8(x2),4",
        "SLURM_CPUS_PER_TASK": "4",  # 3.5 CPUs: Slurm counts whole ones
        "SLURM_GPUS_PER_TASK": "2",
        "SLURM_STEP_ID": "0",
        "SLURM_STEP_NUM_TASKS": "5",
        "SLURM_STEP_NODELIST": "gpu-[01-03]",
    }.items():
        assert all(x[k] == v for x in e), (k, [x.get(k) for x in e])
    assert expand(first["SLURM_JOB_NODELIST"]) == ["gpu-01", "gpu-02", "gpu-03"]
    assert [x["SLURM_PROCID"] for x in e] == ["0", "1", "2", "3", "4"]
    assert [x["SLURM_LOCALID"] for x in e] == ["0", "1", "0", "1", "0"]
    assert [x["SLURM_NODEID"] for x in e] == ["0", "0", "1", "1", "2"]
    assert [x["SLURMD_NODENAME"] for x in e] == ["gpu-01"] * 2 + ["gpu-02"] * 2 + ["gpu-03"]
    # per node: its GPUs (their indices on the node), CPUs, memory (MB)
    assert first["SLURM_GPUS_ON_NODE"] == "4" and first["SLURM_JOB_GPUS"] == "0,1,2,3"
    assert e[2]["SLURM_JOB_GPUS"] == "0,1,4,5" and last["SLURM_JOB_GPUS"] == "6,7"
    assert first["SLURM_CPUS_ON_NODE"] == "8" and last["SLURM_CPUS_ON_NODE"] == "4"
    assert first["SLURM_MEM_PER_NODE"] == str(2 * 8 * 1024)
    assert "SLURM_RESTART_COUNT" not in first  # set only once the job was requeued
    assert envs(FACTS, attempt=3)[0]["SLURM_RESTART_COUNT"] == "2"


def test_torchruns_worker_variables() -> None:
    e = envs(FACTS, attempt=2)
    assert [x["GROUP_RANK"] for x in e] == [x["NODE_RANK"] for x in e] == ["0", "0", "1", "1", "2"]
    for x in e:
        assert x["ROLE_RANK"] == x["RANK"] and x["ROLE_WORLD_SIZE"] == x["WORLD_SIZE"] == "5"
        assert x["GROUP_WORLD_SIZE"] == "3" and x["ROLE_NAME"] == "default"
        assert x["TORCHELASTIC_RUN_ID"] == "42"
        assert x["TORCHELASTIC_RESTART_COUNT"] == "1" and x["TORCHELASTIC_MAX_RESTARTS"] == "2"
        # rank 0 serves the store itself (no elastic agent): "True" would make it a client
        assert x["TORCHELASTIC_USE_AGENT_STORE"] == "False"
    assert [x["LOCAL_WORLD_SIZE"] for x in e] == ["2", "2", "2", "2", "1"]


def test_a_batch_jobs_ranks_are_slurms_not_torchruns() -> None:
    """A batch job's script is Slurm's batch step: no torchrun worker variables (Lightning
    takes a TORCHELASTIC_RUN_ID for a torchrun launch and ignores Slurm's)."""
    e = envs(JobFacts.of(replace(spec("train", gpus=2), batch=True)))
    for x in e:
        assert not [k for k in x if k.startswith(("TORCHELASTIC_", "ROLE_", "GROUP_"))]
        assert "LOCAL_WORLD_SIZE" not in x and "NODE_RANK" not in x
        assert x["SLURM_NTASKS"] == x["WORLD_SIZE"] == "5" and x["MASTER_PORT"]
    assert [x["SLURM_PROCID"] for x in e] == [x["RANK"] for x in e] == ["0", "1", "2", "3", "4"]


def test_what_lightning_reads_of_slurm_is_consistent() -> None:
    """PyTorch Lightning's SLURMEnvironment refuses ``SLURM_NTASKS`` > 1 without
    ``SLURM_NTASKS_PER_NODE`` ("You set --ntasks=… not supported"), and takes its world size,
    ranks and main address from these variables (the first host of SLURM_NODELIST)."""
    for x in envs(FACTS):
        assert "SLURM_NTASKS_PER_NODE" in x
        assert x["SLURM_JOB_NAME"] not in ("bash", "interactive")
        assert expand(x["SLURM_NODELIST"])[0] == x["MASTER_ADDR"] == "gpu-01"
        assert x["SLURM_NTASKS"] == x["WORLD_SIZE"] and x["SLURM_PROCID"] == x["RANK"]
        assert x["SLURM_LOCALID"] == x["LOCAL_RANK"] and x["SLURM_NODEID"] == x["NODE_RANK"]
    even = [dict(e) for e in rank_env("9", 1, 1, gang()[:4], FACTS)]
    assert {x["SLURM_NTASKS_PER_NODE"] for x in even} == {"2"}


def test_an_array_tasks_variables_as_slurm_sets_them() -> None:
    facts = JobFacts.of(spec("sweep"), ArrayFacts("100", 6, (0, 3, 6, 9)))
    (e,) = [dict(x) for x in rank_env("102", 1, 1, (P("n1", (0,)),), facts)]
    assert e["SLURM_ARRAY_JOB_ID"] == "100" and e["SLURM_ARRAY_TASK_ID"] == "6"
    assert e["SLURM_ARRAY_TASK_COUNT"] == "4" and e["SLURM_ARRAY_TASK_STEP"] == "3"
    assert (e["SLURM_ARRAY_TASK_MIN"], e["SLURM_ARRAY_TASK_MAX"]) == ("0", "9")
    assert "SLURM_ARRAY_JOB_ID" not in envs(FACTS)[0]


def test_the_controller_gives_a_launch_its_jobs_facts() -> None:
    c = Controller(profile(), cluster_spec(1, 8))
    ids = ["7", "8", "9"]
    out = c.handle(
        0.0,
        *(
            JobSubmitted(i, spec("sweep", queue="nlp"), 0.0, array_id="7", array_index=k * 2)
            for k, i in enumerate(ids)
        ),
    )
    launches = {x.job_id: x for x in out if isinstance(x, Launch)}
    assert set(launches) == set(ids)
    for i, launch in launches.items():
        (e,) = [dict(x) for x in launch.environment(c.launch_facts(i))]
        assert e["SLURM_JOB_PARTITION"] == "nlp" and e["SLURM_ARRAY_JOB_ID"] == "7"
        assert e["SLURM_ARRAY_TASK_ID"] == str(ids.index(i) * 2)
        assert e["SLURM_ARRAY_TASK_COUNT"] == "3" and e["SLURM_ARRAY_TASK_STEP"] == "2"


def test_tasks_per_worker_count_as_tasks() -> None:
    """--nodes=2 --ntasks-per-node=4 --gres=gpu:8 -c 6: two workers, each a node's 4 tasks."""
    s = replace(spec("ddp", gpus=8, workers=2, cpus=24, mem_gib=64), tasks_per_worker=4)
    s = replace(s, distinct_nodes=True)
    facts = JobFacts.of(s)
    alloc = (
        Placement("gpu-01", tuple(range(8)), 1000, 24_000, 64 * 1024),
        Placement("gpu-02", tuple(range(8)), 1000, 24_000, 64 * 1024),
    )
    e = [dict(x) for x in rank_env("5", 1, 1, alloc, facts)]
    for x in e:
        assert x["SLURM_NTASKS"] == "8" and x["SLURM_NPROCS"] == "8"
        assert x["SLURM_TASKS_PER_NODE"] == "4(x2)" and x["SLURM_NTASKS_PER_NODE"] == "4"
        assert x["SLURM_GPUS_ON_NODE"] == "8" and x["SLURM_CPUS_ON_NODE"] == "24"
        assert x["SLURM_CPUS_PER_TASK"] == "6" and x["SLURM_MEM_PER_NODE"] == str(64 * 1024)
        assert "SLURM_GPUS_PER_TASK" not in x  # the node's GPUs are shared by its tasks
        assert x["SLURM_NNODES"] == "2"
    assert [x["SLURM_PROCID"] for x in e] == ["0", "4"]  # each worker's first task
    assert [x["SLURM_NODEID"] for x in e] == ["0", "1"]
    # torchrun's view stays that of the processes started: one per worker
    assert [(x["RANK"], x["WORLD_SIZE"], x["LOCAL_WORLD_SIZE"]) for x in e] == [
        ("0", "2", "1"),
        ("1", "2", "1"),
    ]


def test_driver_capabilities_follow_what_the_job_asked_of_its_gpus() -> None:
    def caps(s: JobSpec) -> str | None:
        return envs(JobFacts.of(s))[0].get("NVIDIA_DRIVER_CAPABILITIES")

    train = spec("train", gpus=2)
    assert caps(train) == "compute,utility"  # the container toolkit's default, not "all"
    assert caps(replace(train, gpu_engines=(("nvenc", 1),))) == "compute,utility,video"
    render = replace(train, gpu_engines=(("graphics", 1), ("nvdec", 1)))
    assert caps(render) == "compute,utility,video,graphics,display"
    own = replace(train, env=(("NVIDIA_DRIVER_CAPABILITIES", "all"),))
    assert caps(own) == "all"  # the job's own word, as the toolkit takes it
    assert caps(spec("cpu", gpus=0)) is None


def test_a_batch_jobs_shell_is_slurms_batch_step_not_a_step() -> None:
    """Slurm's batch shell has no SLURM_STEP_* (a tool that finds SLURM_STEP_ID takes itself
    for a step's task), no SLURM_GPUS_PER_TASK unless sbatch was given --gpus-per-task (srun
    reads it as its own option), and ENVIRONMENT=BATCH, SLURM_GTIDS and its node's
    SLURM_TOPOLOGY_ADDR."""
    batch = envs(JobFacts.of(replace(spec("train", gpus=2), batch=True)))
    for x, node in zip(batch, ["gpu-01", "gpu-01", "gpu-02", "gpu-02", "gpu-03"], strict=True):
        assert not [k for k in x if k.startswith("SLURM_STEP")] and "SLURM_GPUS_PER_TASK" not in x
        assert x["ENVIRONMENT"] == "BATCH" and x["SLURM_GTIDS"] == "0"
        assert (x["SLURM_TOPOLOGY_ADDR"], x["SLURM_TOPOLOGY_ADDR_PATTERN"]) == (node, "node")
    gang_env = envs(FACTS)[0]  # a gang's ranks are the tasks of its one step
    assert gang_env["SLURM_STEP_ID"] == "0" and gang_env["SLURM_GPUS_PER_TASK"] == "2"
    assert "ENVIRONMENT" not in gang_env


def test_an_array_tasks_job_name_is_the_arrays() -> None:
    """gpufleet names an array's task ``NAME_INDEX`` (squeue shows it); Slurm's
    SLURM_JOB_NAME is the array's name in every task, as scripts use it for paths."""
    facts = JobFacts.of(spec("sweep_6"), ArrayFacts("100", 6, (0, 3, 6, 9)))
    (e,) = [dict(x) for x in rank_env("102", 1, 1, (P("n1", (0,)),), facts)]
    assert e["SLURM_JOB_NAME"] == "sweep"
    assert JobFacts.of(spec("sweep_6")).name == "sweep_6"  # not an array's task: as named
