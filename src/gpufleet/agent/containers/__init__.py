"""Container runtimes: a task whose job names an image runs under the node's runtime.

One module per runtime, each a ``Runtime`` with ``detect()`` (its binary, or None),
``argv(task)`` (the command line that runs the task in its container, in the foreground, so the
runner supervises it as it does a bare task: its process group, logs, exit code) and
``cleanup_argv(name)`` (what removes a task's container after a kill: killing the runtime's
client with SIGKILL may leave the container running). The agent uses the runtime it is told to
(``--container-runtime``) or the first found in ``ORDER``.

Only podman is exercised by a real runtime in the test suite; the others' command lines are
checked by unit tests alone.
"""

from __future__ import annotations

import abc
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpufleet.agent.gpu import DeviceRef
from gpufleet.model.container import Mount

ORDER = ("apptainer", "singularity", "enroot", "podman", "docker")
NAME_PREFIX = "gpufleet-"
# the label that says which agent started a container (its data directory, hashed): the orphan
# sweep of one agent leaves another's alone (LocalCluster runs several on one host)
OWNER_LABEL = "io.gpufleet.agent"
Which = Callable[[str], str | None]


@dataclass(frozen=True, slots=True)
class ContainerTask:
    """Everything a runtime needs to run one rank in its container."""

    name: str  # gpufleet-JOB-ATTEMPT-RANK: what cleanup and the orphan sweep find it by
    image: str
    command: Sequence[str]
    uid: int
    gid: int
    env_file: str  # KEY=VALUE lines (podman, docker: --env-file; values never on the argv)
    workdir: str = ""  # "" : the image's
    mounts: Sequence[Mount] = ()
    gpus: Sequence[int] = ()  # the job's GPUs on this node (indices)
    # how the runtime names them (a MIG device: CDI's "<gpu>:<mig>", docker's MIG-… UUID);
    # empty: by index, as ``gpus``
    devices: Sequence[DeviceRef] = ()
    tmp: str = ""  # the task's private directory, mounted on /tmp (as a bare task's)
    rootless: bool = False  # the agent is not root
    ulimits: Sequence[tuple[str, int, int]] = ()  # (name, soft, hard): the agent's own
    cdi: bool = False  # the node has a CDI spec for nvidia.com/gpu
    device_nodes: Sequence[str] = field(default=())  # /dev/nvidia* to pass without CDI
    owner: str = ""  # the agent's OWNER_LABEL value
    # the task environment's names (its values are in the env file and, for a runtime that
    # switches to the job's user, in its own process environment): enroot takes each by name
    env_names: Sequence[str] = ()
    # the task reads its stdin (a batch script's --input): podman and docker forward it (-i)
    stdin: bool = False
    # where podman and docker write the container's ID (``--cidfile``): the agent finds the
    # container's processes by it in their cgroup (per-job GPU use, ADR 0050's neighbour)
    cidfile: str = ""


class Runtime(abc.ABC):
    """A container runtime (one module each). Subclasses set NAME and build the argv."""

    NAME = ""
    BINARIES: tuple[str, ...] = ()
    # the container gets only the job's GPUs (device nodes, CDI, NVIDIA_VISIBLE_DEVICES), so
    # they are numbered from 0 in it; False: every GPU of the node is in it (apptainer --nv),
    # and CUDA_VISIBLE_DEVICES names the job's by UUID
    own_gpus_only = True
    # the job's GPUs are named in NVIDIA_VISIBLE_DEVICES for the runtime's NVIDIA hook (enroot)
    gpus_by_env = False

    def __init__(self, binary: str) -> None:
        self.binary = binary

    @classmethod
    def detect(cls, which: Which = shutil.which) -> Runtime | None:
        for b in cls.BINARIES or (cls.NAME,):
            path = which(b)
            if path:
                return cls(path)
        return None

    @abc.abstractmethod
    def argv(self, task: ContainerTask) -> list[str]:
        """The runtime's command line that runs ``task``."""

    def image_env_argv(self, image: str) -> list[str] | None:
        """A command printing the image's own environment (``ENV``), ``NAME=VALUE`` a line;
        None when the runtime has none (the job's then overrides the image's, but for the
        host's PATH and LD_LIBRARY_PATH: see taskenv.container_env)."""
        return None

    def cleanup_argv(self, name: str) -> list[str] | None:
        """The command that removes ``name``'s container (None: nothing outlives the client)."""
        return None

    def list_argv(self, owner: str) -> list[str] | None:
        """A command printing the names of the containers ``owner`` started, one a line (the
        orphan sweep); None when the runtime keeps none."""
        return None


class DockerCli(Runtime):
    """What podman and docker say alike: the image's environment (``image inspect``) and the
    names of one agent's containers (``ps``)."""

    def image_env_argv(self, image: str) -> list[str]:
        env_lines = "{{range .Config.Env}}{{println .}}{{end}}"
        return [self.binary, "image", "inspect", "--format", env_lines, "--", image]

    def list_argv(self, owner: str) -> list[str]:
        return [
            self.binary,
            "ps",
            "--all",
            "--filter",
            f"name=^{NAME_PREFIX}",
            "--filter",
            f"label={OWNER_LABEL}={owner}",
            "--format",
            "{{.Names}}",
        ]


def runtimes() -> dict[str, type[Runtime]]:
    from gpufleet.agent.containers import apptainer, docker, enroot, podman

    return {
        "apptainer": apptainer.Apptainer,
        "singularity": apptainer.Singularity,
        "enroot": enroot.Enroot,
        "podman": podman.Podman,
        "docker": docker.Docker,
    }


def detect_all(which: Which = shutil.which) -> list[Runtime]:
    """Every runtime this node has, in ``ORDER``."""
    found = []
    for name in ORDER:
        rt = runtimes()[name].detect(which)
        if rt is not None:
            found.append(rt)
    return found


def choose(configured: str = "", which: Which = shutil.which) -> Runtime | None:
    """The runtime named (ValueError when unknown or not installed), else the first found."""
    if configured:
        if configured == "none":
            return None
        kinds = runtimes()
        if configured not in kinds:
            raise ValueError(
                f"unknown container runtime {configured!r}: one of {', '.join(ORDER)} or none"
            )
        rt = kinds[configured].detect(which)
        if rt is None:
            raise ValueError(f"container runtime {configured!r} is not installed on this node")
        return rt
    found = detect_all(which)
    return found[0] if found else None


def container_name(job: str, attempt: int, rank: int, owner: str = "") -> str:
    """The task's container, named for the agent too (its OWNER_LABEL's first 8 characters):
    job ids are a cluster's own, and two agents on one host (a test machine's clusters, a
    restored store's reused ids) would otherwise ask the runtime for one name twice, and the
    second ``run`` is refused ("name is already in use") while the first container lives."""
    mark = f"-{owner[:8]}" if owner else ""
    return f"{NAME_PREFIX}{job}-{attempt}-{rank}{mark}"


def nvidia_cdi(dirs: Sequence[str] = ("/etc/cdi", "/var/run/cdi")) -> bool:
    """Whether a CDI spec names nvidia.com/gpu devices (nvidia-ctk cdi generate writes one)."""
    for d in dirs:
        p = Path(d)
        if not p.is_dir():
            continue
        for spec in [*p.glob("*.yaml"), *p.glob("*.json")]:
            try:
                text = spec.read_text(errors="replace")[:1_000_000]
            except OSError:
                continue
            if "nvidia.com/gpu" in text.replace('"', "").replace(" ", ""):
                return True
    return False


def nvidia_device_nodes(gpus: Sequence[int], dev: str = "/dev", *, mig: bool = False) -> list[str]:
    """The device nodes of ``gpus`` (physical GPUs) and the driver's shared ones, those that
    exist. ``mig``: with the MIG capability nodes (``nvidia-caps/``) a MIG device needs too;
    they open every MIG device of the node, so CUDA_VISIBLE_DEVICES alone narrows it to the
    job's (CDI gives a container only its own)."""
    shared = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")
    nodes = [f"{dev}/nvidia{g}" for g in gpus] + [f"{dev}/{s}" for s in shared]
    caps = Path(dev) / "nvidia-caps"
    if mig and caps.is_dir():
        nodes += sorted(str(p) for p in caps.iterdir())
    return [n for n in nodes if Path(n).exists()]


def cdi_name(ref: DeviceRef) -> str:
    """nvidia-ctk's CDI device name (its default "index" strategy): "0", or "0:1" for MIG
    device 1 of GPU 0."""
    return f"{ref.parent}:{ref.mig}" if ref.mig is not None else str(ref.parent)


def env_file_text(env: dict[str, str]) -> str:
    """``KEY=VALUE`` lines, as podman's and docker's --env-file read them; ValueError for a
    value such a file cannot hold (a newline)."""
    for k, v in env.items():
        if "\n" in v or "\n" in k:
            raise ValueError(
                f"env[{k!r}] contains a newline, which a container runtime's env file cannot hold"
            )
    return "".join(f"{k}={v}\n" for k, v in env.items())
