"""The container runtimes' command lines (podman's is also run for real in
tests/integration/test_containers_podman.py; apptainer's, enroot's and docker's only here),
the order they are found in, and the env file that keeps values off every command line."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gpufleet.agent.containers import (
    ContainerTask,
    Runtime,
    choose,
    container_name,
    detect_all,
    env_file_text,
    nvidia_cdi,
    nvidia_device_nodes,
)
from gpufleet.agent.containers.apptainer import Apptainer
from gpufleet.agent.containers.docker import Docker
from gpufleet.agent.containers.enroot import Enroot
from gpufleet.agent.containers.podman import Podman
from gpufleet.agent.gpu import DeviceRef
from gpufleet.model.container import Mount

TASK = ContainerTask(
    name="gpufleet-j1-2-0",
    image="localhost/app:1",
    command=["python", "train.py"],
    uid=1001,
    gid=1002,
    env_file="/dev/stdin",
    workdir="/work",
    mounts=(Mount("/data", "/mnt/data", True), Mount("/scratch", "/scratch")),
    gpus=(1, 3),
    tmp="/var/lib/gpufleet/j1/2/rank0.tmpdir",
    ulimits=(("nofile", 1024, 4096),),
)


def which(*present: str):  # type: ignore[no-untyped-def]
    return lambda b: f"/usr/bin/{b}" if b in present else None


def test_podman_runs_the_job_as_its_uid_with_its_gpus_mounts_and_workdir() -> None:
    argv = Podman("/usr/bin/podman", "runc").argv(TASK)
    assert argv[:6] == ["/usr/bin/podman", "run", "--rm", "--init", "--name", "gpufleet-j1-2-0"]
    joined = " ".join(argv)
    assert "--runtime runc" in joined and "--user 1001:1002" in joined
    assert "--userns=keep-id" not in joined  # a root agent
    assert "--env-file /dev/stdin" in joined and "--ulimit nofile=1024:4096" in joined
    assert "--mount type=bind,source=/var/lib/gpufleet/j1/2/rank0.tmpdir,target=/tmp" in joined
    assert "--mount type=bind,source=/data,target=/mnt/data,ro=true" in joined
    assert "--mount type=bind,source=/scratch,target=/scratch --workdir /work" in joined
    assert argv[-4:] == ["--", "localhost/app:1", "python", "train.py"]
    assert "--device" not in argv  # no CDI spec and no device node given
    cdi = Podman("podman").argv(_with(cdi=True))
    assert [cdi[i + 1] for i, a in enumerate(cdi) if a == "--device"] == [
        "nvidia.com/gpu=1",
        "nvidia.com/gpu=3",
    ]
    nodes = Podman("podman").argv(_with(device_nodes=("/dev/nvidia1", "/dev/nvidiactl")))
    assert [nodes[i + 1] for i, a in enumerate(nodes) if a == "--device"] == [
        "/dev/nvidia1",
        "/dev/nvidiactl",
    ]
    assert "--userns=keep-id" in Podman("podman").argv(_with(rootless=True))
    assert "--runtime" not in Podman("podman", "").argv(TASK)  # no runc: podman's default
    labelled = Podman("podman").argv(_with(owner="abc"))
    assert labelled[labelled.index("--label") + 1] == "io.gpufleet.agent=abc"
    assert "label=io.gpufleet.agent=abc" in Podman("podman").list_argv("abc")
    assert Podman("podman").cleanup_argv("gpufleet-j1-2-0") == [
        "podman", "rm", "--force", "--time", "0", "--ignore", "gpufleet-j1-2-0",
    ]  # fmt: skip


def test_docker_passes_the_jobs_gpus_with_its_own_flag() -> None:
    argv = Docker("docker").argv(TASK)
    assert argv[:4] == ["docker", "run", "--rm", "--init"]
    assert argv[argv.index("--gpus") + 1] == '"device=1,3"'
    assert "--user" in argv and argv[argv.index("--user") + 1] == "1001:1002"
    assert argv[-4:] == ["--", "localhost/app:1", "python", "train.py"]
    assert "--gpus" not in Docker("docker").argv(_with(gpus=()))
    assert Docker("docker").cleanup_argv("n") == ["docker", "rm", "--force", "n"]


def test_apptainer_exec_with_nv_and_containall() -> None:
    argv = Apptainer("apptainer").argv(TASK)
    assert argv[:6] == [
        "apptainer",
        "exec",
        "--containall",
        "--cleanenv",
        "--env-file",
        "/dev/stdin",
    ]
    assert "--nv" in argv
    assert argv[argv.index("/data:/mnt/data:ro") - 1 :][:2] == ["--bind", "/data:/mnt/data:ro"]
    assert argv[argv.index("--pwd") + 1] == "/work"
    assert argv[-3:] == ["docker://localhost/app:1", "python", "train.py"]
    pyxis = Apptainer("apptainer").argv(_with(image="docker://nvcr.io#nvidia/pytorch:24.05"))
    assert "docker://nvcr.io/nvidia/pytorch:24.05" in pyxis
    assert "/shared/app.sif" in Apptainer("a").argv(_with(image="/shared/app.sif", gpus=()))
    assert "--nv" not in Apptainer("a").argv(_with(gpus=()))
    assert Apptainer("a").cleanup_argv("n") is None  # nothing outlives its process


def test_enroot_start_with_mounts_and_a_workdir() -> None:
    argv = Enroot("enroot").argv(TASK)
    assert argv[:2] == ["enroot", "start"]
    assert argv[argv.index("/data:/mnt/data:ro") - 1 :][:2] == ["--mount", "/data:/mnt/data:ro"]
    i = argv.index("localhost/app:1")
    assert argv[i + 1 :] == ["/bin/sh", "-c", 'cd "$0" && exec "$@"', "/work", "python", "train.py"]


def test_runtimes_are_found_in_order_and_a_named_one_must_exist() -> None:
    assert [r.NAME for r in detect_all(which("docker", "podman", "apptainer"))] == [
        "apptainer",
        "podman",
        "docker",
    ]
    assert choose("", which("docker", "podman")).NAME == "podman"  # type: ignore[union-attr]
    assert choose("", which()) is None
    assert choose("none", which("podman")) is None
    assert choose("docker", which("docker", "podman")).NAME == "docker"  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="not installed"):
        choose("enroot", which("podman"))
    with pytest.raises(ValueError, match="unknown container runtime 'lxc'"):
        choose("lxc", which("podman"))
    assert container_name("j1", 2, 0) == "gpufleet-j1-2-0"
    # two agents' job 1 on one host: two names, each with its agent's mark
    assert container_name("1", 1, 0, "a1b2c3d4e5f6") == "gpufleet-1-1-0-a1b2c3d4"
    assert container_name("1", 1, 0, "ffff0000") != container_name("1", 1, 0, "a1b2c3d4")


def test_env_file_lines_and_a_value_it_cannot_hold() -> None:
    assert env_file_text({"A": "1", "B": "x y=z"}) == "A=1\nB=x y=z\n"
    with pytest.raises(ValueError, match="newline"):
        env_file_text({"A": "two\nlines"})


def test_gpu_devices_by_cdi_spec_or_device_nodes(tmp_path: Path) -> None:
    cdi = tmp_path / "cdi"
    cdi.mkdir()
    assert not nvidia_cdi([str(cdi), str(tmp_path / "none")])
    (cdi / "nvidia.yaml").write_text("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: []\n")
    assert nvidia_cdi([str(cdi)])
    dev = tmp_path / "dev"
    dev.mkdir()
    for n in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"):
        (dev / n).touch()
    assert nvidia_device_nodes([1], str(dev)) == [
        f"{dev}/nvidia1",
        f"{dev}/nvidiactl",
        f"{dev}/nvidia-uvm",
    ]


def _with(**kw: object) -> ContainerTask:
    from dataclasses import replace

    return replace(TASK, **kw)  # type: ignore[arg-type]


def test_a_node_without_a_runtime_refuses_an_image_job(tmp_path: Path) -> None:
    from gpufleet.agent.runner import EXIT_REFUSED, TaskRunner
    from gpufleet.api.schemas import AgentCommand

    r = TaskRunner(tmp_path, lambda g: "", as_root=False, container_runtime=None)
    cmd = AgentCommand(
        kind="launch", job="j", attempt=1, rank=0, command=["true"], container={"image": "i"}
    )
    [ev] = r.launch(cmd)
    assert (ev.kind, ev.exit_code) == ("exited", EXIT_REFUSED)
    assert "no container runtime (apptainer, singularity, enroot, podman, docker)" in ev.why
    assert "no container runtime" in r.log_paths(ev.key)[1].read_text()


def test_the_watchdog_removes_a_container_its_pid_file_names(tmp_path: Path) -> None:
    import json
    import time

    from gpufleet.agent.watchdog import remove_container

    done = tmp_path / "removed"
    pidfile = tmp_path / "rank0.pid"
    pidfile.write_text(json.dumps({"pid": 1, "create_time": 0, "cleanup": ["touch", str(done)]}))
    remove_container(pidfile)
    deadline = time.monotonic() + 30
    while not done.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert done.exists()
    bare = tmp_path / "rank1.pid"
    bare.write_text(json.dumps({"pid": 1, "create_time": 0}))
    remove_container(bare)  # a bare task's: nothing to run, no error
    bare.write_text(json.dumps({"pid": 1, "create_time": 0, "cleanup": "rm -rf /"}))
    remove_container(bare)  # not an argv: ignored


# ----- MIG devices ---------------------------------------------------------------------------

MIG_REFS = (DeviceRef(1, "MIG-aa", parent=0, mig=2), DeviceRef(3, "GPU-bb", parent=1))


def test_mig_devices_by_the_runtimes_own_names() -> None:
    task = _with(gpus=(1, 3), devices=MIG_REFS, cdi=True)
    argv = Podman("podman").argv(task)
    # nvidia-ctk's CDI names: "<gpu>:<mig>" for a MIG device, the NVML index for a whole GPU
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--device"] == [
        "nvidia.com/gpu=0:2",
        "nvidia.com/gpu=1",
    ]
    docker = Docker("docker").argv(task)
    assert docker[docker.index("--gpus") + 1] == '"device=MIG-aa,1"'  # a MIG device: its UUID


def test_mig_device_nodes_add_the_capability_nodes(tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    (dev / "nvidia-caps").mkdir(parents=True)
    for n in ("nvidia0", "nvidiactl", "nvidia-caps/nvidia-cap1", "nvidia-caps/nvidia-cap2"):
        (dev / n).touch()
    whole = nvidia_device_nodes([0], str(dev))
    assert whole == [f"{dev}/nvidia0", f"{dev}/nvidiactl"]
    assert nvidia_device_nodes([0], str(dev), mig=True) == [
        *whole,
        f"{dev}/nvidia-caps/nvidia-cap1",
        f"{dev}/nvidia-caps/nvidia-cap2",
    ]


class Recording(Runtime):
    """A runtime that records its task and prints the env file it was given."""

    NAME = "recording"

    def __init__(self) -> None:
        super().__init__("recording")
        self.tasks: list[ContainerTask] = []

    def argv(self, task: ContainerTask) -> list[str]:
        self.tasks.append(task)
        return [sys.executable, "-c", "import sys; sys.stdout.write(sys.stdin.read())"]


def test_a_container_job_on_mig_devices_gets_their_uuids_and_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpufleet.agent import containers
    from gpufleet.agent.runner import TaskRunner
    from gpufleet.api.schemas import AgentCommand

    monkeypatch.setattr(containers, "nvidia_cdi", lambda: True)  # the node has a CDI spec
    rt = Recording()
    refs = {r.index: r for r in MIG_REFS}
    r = TaskRunner(
        tmp_path,
        lambda gpus: ",".join(refs[g].uuid for g in gpus),
        as_root=False,
        container_runtime=rt,
        device_refs=lambda gpus: [refs[g] for g in gpus],
    )
    launch = {"kind": "launch", "job": "j", "attempt": 0, "rank": 0, "gpus": [1, 3]}
    r.launch(AgentCommand.model_validate({**launch, "command": ["x"], "container": {"image": "i"}}))
    [ev] = [e for e in r.wait(30.0) if e.kind == "exited"]
    assert ev.exit_code == 0, r.log_paths(ev.key)[1].read_text()
    env = dict(
        line.split("=", 1) for line in r.log_paths(ev.key)[0].read_text().splitlines() if line
    )
    # not "0,1": CUDA knows a MIG device by its UUID alone, in a container as outside
    assert env["CUDA_VISIBLE_DEVICES"] == "MIG-aa,GPU-bb"
    [task] = rt.tasks
    assert task.devices == MIG_REFS and task.cdi
    assert "nvidia.com/gpu=0:2" in Podman("podman").argv(task)


def _container_env(tmp_path: Path, rt: Runtime, gpus: list[int]) -> dict[str, str]:
    """Run a one-rank container job on ``rt`` (a recording runtime) on a node with a CDI
    spec for its GPUs; the task's environment as the container got it."""
    from gpufleet.agent.runner import TaskRunner
    from gpufleet.api.schemas import AgentCommand

    uuids = {0: "GPU-a0", 1: "GPU-b1", 2: "GPU-c2", 3: "GPU-d3"}
    r = TaskRunner(
        tmp_path,
        lambda gs: ",".join(uuids[g] for g in gs),
        as_root=False,
        container_runtime=rt,
    )
    launch = {"kind": "launch", "job": "j", "attempt": 0, "rank": 0, "gpus": gpus}
    spec = {**launch, "command": ["x"], "container": {"image": "i"}, "env": {"MODEL": "m"}}
    r.launch(AgentCommand.model_validate(spec))
    [ev] = [e for e in r.wait(30.0) if e.kind == "exited"]
    assert ev.exit_code == 0, r.log_paths(ev.key)[1].read_text()
    return dict(
        line.split("=", 1) for line in r.log_paths(ev.key)[0].read_text().splitlines() if line
    )


class RecordingApptainer(Recording):
    own_gpus_only = False  # as apptainer --nv: every GPU of the node is in the container


class RecordingEnroot(Recording):
    gpus_by_env = True


def test_each_runtime_tells_the_job_its_own_gpus_in_the_container(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpufleet.agent import containers

    monkeypatch.setattr(containers, "nvidia_cdi", lambda: True)  # only the job's GPUs by CDI
    # podman/docker: the container holds the job's GPUs alone, numbered from 0
    env = _container_env(tmp_path / "p", Recording(), [1, 3])
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1" and "NVIDIA_VISIBLE_DEVICES" not in env
    # apptainer --nv binds every GPU: "0,1" would be two other jobs' GPUs
    env = _container_env(tmp_path / "a", RecordingApptainer(), [1, 3])
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-b1,GPU-d3"
    # enroot: its NVIDIA hook mounts what NVIDIA_VISIBLE_DEVICES names; none for a CPU job
    rt = RecordingEnroot()
    env = _container_env(tmp_path / "e", rt, [1, 3])
    assert env["NVIDIA_VISIBLE_DEVICES"] == "GPU-b1,GPU-d3" and env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert _container_env(tmp_path / "e0", rt, [])["NVIDIA_VISIBLE_DEVICES"] == "void"
    # enroot starts from the image's environment: every task variable is passed by name
    argv = Enroot("enroot").argv(rt.tasks[0])
    named = {argv[i + 1] for i, a in enumerate(argv) if a == "--env"}
    assert {"MODEL", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "HOME"} <= named
    assert set(rt.tasks[0].env_names) <= named
    assert not any("=" in n for n in named)  # names only: no value on the command line


class RecordingWithImageEnv(Recording):
    """A root runtime whose image sets IMAGE_SAYS and PATH; each inspect is counted."""

    def __init__(self, count: Path) -> None:
        super().__init__()
        self.count = count

    def image_env_argv(self, image: str) -> list[str]:
        code = (
            "import sys; open(sys.argv[1], 'a').write('x'); "
            "print('IMAGE_SAYS=image'); print('PATH=/opt/img/bin')"
        )
        return [sys.executable, "-c", code, str(self.count)]


def _env_of(r: object, spec: dict[str, object]) -> dict[str, str]:
    from gpufleet.agent.runner import TaskRunner
    from gpufleet.api.schemas import AgentCommand

    assert isinstance(r, TaskRunner)
    r.launch(AgentCommand.model_validate(spec))
    [ev] = [e for e in r.wait(30.0) if e.kind == "exited"]
    assert ev.exit_code == 0, r.log_paths(ev.key)[1].read_text()
    return dict(
        line.split("=", 1) for line in r.log_paths(ev.key)[0].read_text().splitlines() if line
    )


def test_a_containers_environment_is_the_jobs_but_for_what_the_image_sets(
    tmp_path: Path,
) -> None:
    from gpufleet.agent.runner import IMAGE_ENV_TTL_S, TaskRunner
    from gpufleet.base.clock import ManualClock

    count = tmp_path / "inspections"
    clock = ManualClock(0.0)
    r = TaskRunner(
        tmp_path / "a",
        lambda g: "",
        clock=clock,
        as_root=False,
        container_runtime=RecordingWithImageEnv(count),
    )
    spec = {
        "kind": "launch", "job": "j", "attempt": 0, "rank": 0, "command": ["x"],
        "container": {"image": "i"},
        # sbatch --export=ALL: what the submitter had
        "user_env": {"FROM_SUBMIT": "yes", "IMAGE_SAYS": "host", "PATH": "/host/bin"},
        # the job's own (--env) and the launch's Slurm variables
        "env": {"SLURM_JOB_ID": "7", "CHOSEN": "job"},
    }  # fmt: skip
    env = _env_of(r, spec)
    # pyxis: the submitter's environment reaches the container, but what the image's own
    # environment sets keeps the image's value (the runtime then uses it: not in the env file)
    assert env["FROM_SUBMIT"] == "yes" and env["SLURM_JOB_ID"] == "7" and env["CHOSEN"] == "job"
    assert "IMAGE_SAYS" not in env and "PATH" not in env
    # what the job names itself overrides the image (pyxis's --container-env)
    env = _env_of(r, {**spec, "job": "k", "env": {"IMAGE_SAYS": "job"}})
    assert env["IMAGE_SAYS"] == "job"
    assert count.read_text() == "x"  # one inspection for both: an image's names are kept
    clock.advance(IMAGE_ENV_TTL_S + 1)
    _env_of(r, {**spec, "job": "l"})
    assert count.read_text() == "xx"  # for a minute


def test_an_image_whose_environment_is_unknown_keeps_its_path_and_libraries(
    tmp_path: Path,
) -> None:
    from gpufleet.agent.runner import TaskRunner

    r = TaskRunner(tmp_path, lambda g: "", as_root=False, container_runtime=Recording())
    user_env = {"PATH": "/host/bin", "LD_LIBRARY_PATH": "/host/lib", "FROM_SUBMIT": "yes"}
    spec = {"kind": "launch", "job": "j", "attempt": 0, "rank": 0, "command": ["x"],
            "container": {"image": "i"}, "user_env": user_env}  # fmt: skip
    env = _env_of(r, spec)
    assert env["FROM_SUBMIT"] == "yes"
    assert "PATH" not in env and "LD_LIBRARY_PATH" not in env  # the host's would break it


def test_a_batch_jobs_step_daemon_runs_on_the_node_not_in_the_image(tmp_path: Path) -> None:
    from gpufleet.agent.runner import TaskRunner
    from gpufleet.api.schemas import AgentCommand

    # a node with no runtime at all: the step daemon is gpufleet's own (slurmstepd's part),
    # which the job's image does not have; the node runs it as for a bare job
    r = TaskRunner(tmp_path, lambda g: "", as_root=False, container_runtime=None)
    cmd = AgentCommand(
        kind="launch", job="j", attempt=1, rank=1, command=[], role="step",
        container={"image": "i"},
    )  # fmt: skip
    [ev] = r.launch(cmd)
    assert ev.kind == "started", ev
    [ev] = [e for e in r.wait(30.0) if e.kind == "exited"]
    err = r.log_paths(ev.key)[1].read_text()
    assert "container runtime" not in err and "GPUFLEET_STEP" in err, err


def test_podman_and_docker_forward_a_batch_scripts_input_and_read_the_images_env() -> None:
    for rt in (Podman("podman", "runc"), Docker("docker")):
        assert "--interactive" not in rt.argv(TASK)
        assert "--interactive" in rt.argv(_with(stdin=True))
        inspect = rt.image_env_argv("localhost/app:1")
        assert inspect[1:3] == ["image", "inspect"] and inspect[-2:] == ["--", "localhost/app:1"]


def test_the_driver_capabilities_a_job_was_given_reach_each_runtimes_container(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The controller's NVIDIA_DRIVER_CAPABILITIES (core/launch env: `video` for an encoder
    job) is in the container's environment on every runtime, where the toolkit's hook, enroot's
    and apptainer's read it; enroot, which starts from the image's environment, by name."""
    from gpufleet.agent import containers
    from gpufleet.agent.runner import TaskRunner

    monkeypatch.setattr(containers, "nvidia_cdi", lambda: True)
    caps = "compute,utility,video"
    for name, rt in (("p", Recording()), ("a", RecordingApptainer()), ("e", RecordingEnroot())):
        r = TaskRunner(tmp_path / name, lambda gs: ",".join(f"GPU-{g}" for g in gs),
                       as_root=False, container_runtime=rt)  # fmt: skip
        spec = {"kind": "launch", "job": "j", "attempt": 0, "rank": 0, "gpus": [2],
                "command": ["x"], "container": {"image": "i"},
                "env": {"NVIDIA_DRIVER_CAPABILITIES": caps}}  # fmt: skip
        assert _env_of(r, spec)["NVIDIA_DRIVER_CAPABILITIES"] == caps, name
    argv = Enroot("enroot").argv(rt.tasks[0])
    assert "NVIDIA_DRIVER_CAPABILITIES" in {argv[i + 1] for i, a in enumerate(argv) if a == "--env"}
