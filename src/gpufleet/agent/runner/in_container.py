"""A task in a container image: the runtime's command line and environment for one launch, the
image environments it looked up, and the removal of containers a killed client leaves behind
(in the background at each poll, and at startup for those no live task of this agent runs)."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import resource
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

from gpufleet.agent import containers, sandbox
from gpufleet.agent.accounts import Account, LaunchRefused
from gpufleet.agent.gpu import DeviceRef
from gpufleet.agent.runner.argv import taskstart_argv
from gpufleet.agent.runner.taskhost import TaskHost
from gpufleet.agent.taskenv import SECURE_PATH, container_env
from gpufleet.agent.tasks import Key
from gpufleet.api.schemas import AgentCommand
from gpufleet.base.clock import Clock
from gpufleet.model.container import ContainerSpec, Mount, container_from_dict

CHECKPOINT_MOUNT = "/gpufleet-checkpoint"  # in a container: the checkpoint file's directory

log = logging.getLogger(__name__)

IMAGE_ENV_TTL_S = 60.0  # how long an image's environment names are kept (see image_env_names)


def cid_path(pidfile: Path) -> Path:
    """Where the runtime writes the container's ID (podman's and docker's ``--cidfile``),
    beside the task's pid file."""
    return pidfile.with_suffix(".cid")


@dataclass(frozen=True)
class ContainerLaunch:
    """What starts a task in its container: the runtime's command line, the runtime process's
    own environment, the env file (a descriptor: an unlinked file), the container's name, and
    whether the env file is the runtime's stdin (else it is inherited as /dev/fd/N, stdin being
    the job's --input)."""

    argv: list[str]
    env: dict[str, str]
    env_fd: int
    name: str
    env_on_stdin: bool


@dataclass(frozen=True)
class _Gpus:
    """The job's GPUs as the runtime is given them."""

    ids: tuple[int, ...]
    refs: tuple[DeviceRef, ...]
    cdi: bool
    nodes: list[str]
    visible: str  # what the task is told (CUDA_VISIBLE_DEVICES)


class Containers:
    def __init__(self, host: TaskHost, runtime: containers.Runtime | None, clock: Clock) -> None:
        self.host = host
        self.runtime = runtime
        self.clock = clock
        # this agent's mark on its containers (OWNER_LABEL): the same after a restart
        self.owner = hashlib.sha256(str(host.data_dir.resolve()).encode()).hexdigest()[:16]
        self.cleanups: list[subprocess.Popen[bytes]] = []  # `podman rm -f` still running
        self._image_envs: dict[str, tuple[frozenset[str], float]] = {}  # image → (names, when)

    def launch(
        self,
        cmd: AgentCommand,
        key: Key,
        account: Account,
        tmp: Path,
        launch_env: dict[str, str],
        checkpoint_dir: str = "",
    ) -> ContainerLaunch:
        """How ``cmd`` starts in its image (LaunchRefused: it cannot here).

        A batch script's files (``--output``/``--error``/``--input``) are opened as the job's
        user by taskstart, which copies the output to them and to the agent's logs as for a
        bare job: a runtime that switches users itself (podman, docker) is started by a
        taskstart that opens them with the user's effective ids and runs it as root; one that
        runs as the job (apptainer, enroot) is started by the bare runner's taskstart.
        ``checkpoint_dir``: the job's checkpoint file's directory on the node, mounted where
        its ``$GPUFLEET_CHECKPOINT_FILE`` points in the container ("": none)."""
        rt = self.runtime
        if rt is None:
            raise LaunchRefused(
                "refused: the job runs in a container image but this node has no container "
                f"runtime ({', '.join(containers.ORDER)})"
            )
        try:
            spec = container_from_dict(cmd.container or {})
        except (KeyError, TypeError, ValueError) as e:
            raise LaunchRefused(f"refused: a bad container in the launch: {e}") from None
        gpus = self._gpus(rt, cmd)
        image_names = self.image_env_names(rt, spec.image)
        host = self.host
        env = container_env(
            account, host.node_env, launch_env, gpus.visible, cmd.user_env, image_names
        )
        env.update(host.sharing.container_env(len(cmd.gpus), cmd.gpu_milli, tuple(cmd.gpus)))
        if rt.gpus_by_env:  # the runtime's hook mounts these (by UUID) and no others
            env["NVIDIA_VISIBLE_DEVICES"] = host.visible_devices(cmd.gpus) if gpus.ids else "void"
        try:
            text = containers.env_file_text(env)
        except ValueError as e:
            raise LaunchRefused(f"refused: {e}") from None
        # the orphan sweep looks for containers only where this agent ever started one
        self.used_marker().touch(mode=0o600, exist_ok=True)
        fd = _unlinked_file(tmp.parent, text.encode())
        try:
            if checkpoint_dir:
                mount = Mount(checkpoint_dir, CHECKPOINT_MOUNT)
                spec = replace(spec, mounts=(*spec.mounts, mount))
            return self._command(rt, cmd, key, account, tmp, spec, gpus, env, fd)
        except BaseException:
            os.close(fd)
            raise

    def _gpus(self, rt: containers.Runtime, cmd: AgentCommand) -> _Gpus:
        ids = tuple(cmd.gpus)
        device_refs = self.host.device_refs
        refs = tuple(device_refs(ids)) if device_refs is not None and ids else ()
        mig = any(r.mig is not None for r in refs)
        cdi = containers.nvidia_cdi() if ids else False
        parents = sorted({r.parent for r in refs}) if refs else list(ids)
        nodes = [] if cdi else containers.nvidia_device_nodes(parents, mig=mig)
        # in the container the job's GPUs are its only ones, numbered from 0; without a device
        # (the simulated backend) they are what a bare task is told; a MIG device is known to
        # CUDA by its MIG-… UUID alone, in a container as outside
        isolated = rt.own_gpus_only and (
            cdi or any(n.rsplit("/", 1)[-1][6:].isdigit() for n in nodes)
        )
        visible = (
            ",".join(str(i) for i in range(len(ids)))
            if isolated and not mig
            else self.host.visible_devices(cmd.gpus)
        )
        return _Gpus(ids, refs, cdi, nodes, visible)

    def _command(
        self,
        rt: containers.Runtime,
        cmd: AgentCommand,
        key: Key,
        account: Account,
        tmp: Path,
        spec: ContainerSpec,
        gpus: _Gpus,
        env: dict[str, str],
        fd: int,
    ) -> ContainerLaunch:
        switch = getattr(rt, "switches_user", False)
        files = bool(cmd.output or cmd.input)  # behind taskstart, whose stdin is the job's
        if switch and sandbox.switches(account):  # the runtime, as the job, reopens the file
            os.fchown(fd, account.uid, account.gid)
        name = containers.container_name(*key, owner=self.owner)
        task = containers.ContainerTask(
            name=name,
            image=spec.image,
            command=list(cmd.command),
            uid=account.uid,
            gid=account.gid,
            env_file=f"/dev/fd/{fd}" if files else "/dev/stdin",
            workdir=spec.workdir,
            mounts=(*spec.mounts, *self.host.sharing.container_mounts(len(gpus.ids), gpus.ids)),
            gpus=gpus.ids,
            devices=gpus.refs,
            # a runtime started as the job sees the task's /tmp where the bare runner puts it
            # (the agent's directory above it is not the job's to enter)
            tmp="/tmp" if switch and sandbox.switches(account) else str(tmp),
            rootless=not self.host.as_root,
            ulimits=_ulimits(),
            cdi=gpus.cdi,
            device_nodes=gpus.nodes,
            owner=self.owner,
            env_names=tuple(env),
            stdin=bool(cmd.input),
            cidfile=str(cid_path(self.host.pid_path(key))),
        )
        with contextlib.suppress(FileNotFoundError):  # a relaunch's: the runtime refuses one
            os.unlink(task.cidfile)
        argv = rt.argv(task)
        if files:
            who = None if switch or not sandbox.switches(account) else account
            argv = taskstart_argv(cmd, argv, who, (fd,))
        if switch:  # an unprivileged runtime: started as the job's account
            argv, _ = sandbox.wrap(argv, account, tmp)
        else:  # it switches to the job's uid itself; dies with the agent all the same
            argv = [*sandbox.PDEATHSIG, *argv]
        # the runtime's own process: only what it needs to find itself (the task's
        # environment is in the env file); a user-switching runtime gets the task's too
        proc_env = (
            dict(env)
            if switch
            else {"PATH": SECURE_PATH, "HOME": self.host.agent.home}
            | {k: v for k, v in os.environ.items() if k == "XDG_RUNTIME_DIR"}  # rootless podman
        )
        return ContainerLaunch(argv, proc_env, fd, name, not files)

    def image_env_names(self, rt: containers.Runtime, image: str) -> frozenset[str] | None:
        """The names the image's own environment sets (``ENV``), which the login-like base and
        the submitter's environment do not override; None when the runtime cannot say (the
        image is not on the node yet, or a runtime without an inspect). Kept a minute: a
        service's replicas start from the same image."""
        now = self.clock.now()
        hit = self._image_envs.get(image)
        if hit is not None and now - hit[1] < IMAGE_ENV_TTL_S:
            return hit[0]
        argv = rt.image_env_argv(image)
        if argv is None:
            return None
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
        except (OSError, subprocess.SubprocessError) as e:
            log.warning("could not inspect image %s: %s", image, e)
            return None
        if done.returncode != 0:
            log.info("image %s: no environment known (%s)", image, done.stderr.strip()[:200])
            return None
        names = frozenset(line.split("=", 1)[0] for line in done.stdout.splitlines() if "=" in line)
        self._image_envs[image] = (names, now)
        while len(self._image_envs) > 256:
            self._image_envs.pop(next(iter(self._image_envs)))
        return names

    def used_marker(self) -> Path:
        return self.host.data_dir / "containers.used"

    def cleanup_argv(self, name: str) -> list[str] | None:
        """What removes ``name``'s container when a SIGKILL stops the runtime's client, for
        whoever kills it (the watchdog, a restarted agent's kill_orphans)."""
        rt = self.runtime
        return rt.cleanup_argv(name) if name and rt is not None else None

    def remove(self, name: str) -> None:
        """``runtime rm -f`` in the background (reaped at a later poll): the container may
        outlive its client after a SIGKILL."""
        rm = self.cleanup_argv(name)
        if rm is None:
            return
        try:
            self.cleanups.append(
                subprocess.Popen(
                    rm,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
        except OSError as e:
            log.warning("could not remove container %s: %s", name, e)

    def reap_removals(self) -> None:
        self.cleanups = [p for p in self.cleanups if p.poll() is None]

    def sweep(self, live: set[str], timeout_s: float = 60.0) -> list[str]:
        """Remove gpufleet's containers that no live task of this agent runs (``live``: their
        names); blocking, at startup."""
        rt = self.runtime
        ls = rt.list_argv(self.owner) if rt is not None else None
        if rt is None or ls is None or not self.used_marker().exists():
            return []
        try:
            names = subprocess.run(
                ls, capture_output=True, text=True, timeout=timeout_s, check=True
            ).stdout.split()
        except (OSError, subprocess.SubprocessError) as e:
            log.warning("could not list containers: %s", e)
            return []
        removed = []
        for n in names:
            rm = rt.cleanup_argv(n)
            if n in live or rm is None:
                continue
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                subprocess.run(rm, capture_output=True, timeout=timeout_s, check=False)
                removed.append(n)
                log.warning("removed orphaned container %s", n)
        return removed


def _unlinked_file(directory: Path, data: bytes) -> int:
    """A descriptor of a file holding ``data`` that no name reaches (0600, the agent's)."""
    fd = os.open(directory, os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _ulimits() -> list[tuple[str, int, int]]:
    """The agent's own open-file and process limits, for the container: runtimes default to
    limits above what the host allows (runc then fails to set them). Each is held to the
    kernel's own ceiling (fs.nr_open, kernel.pid_max), which some kernels enforce below the
    limit a process reports."""
    out = []
    for name, which, ceiling in (
        ("nofile", resource.RLIMIT_NOFILE, "/proc/sys/fs/nr_open"),
        ("nproc", resource.RLIMIT_NPROC, "/proc/sys/kernel/pid_max"),
    ):
        soft, hard = resource.getrlimit(which)
        try:
            top = int(Path(ceiling).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            top = None
        if top is not None:
            hard = top if hard == resource.RLIM_INFINITY else min(hard, top)
            soft = hard if soft == resource.RLIM_INFINITY else min(soft, hard)
        out.append(
            (
                name,
                -1 if soft == resource.RLIM_INFINITY else soft,
                -1 if hard == resource.RLIM_INFINITY else hard,
            )
        )
    return out
