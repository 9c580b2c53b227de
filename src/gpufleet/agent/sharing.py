"""How a node shares one GPU between the jobs that hold fractions of it (``gpu_milli``).

``timeslice`` (the default, what CUDA does with several processes on one GPU): the driver
time-slices their kernels; nothing limits a task's memory or compute to its share, and the task
is told so. ``mps``: NVIDIA's Multi-Process Service: one MPS server per GPU runs every client's
kernels; each task is told its share as ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` (the share of the
SMs it may use) and ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` (an allocation beyond it fails: the
MPS server enforces it), and where the node's control daemon listens. The agent starts that
daemon (``nvidia-cuda-mps-control -d``) unless one answers, and never stops it: it outlives the
agent as the tasks do. One mode per node (a pool), so jobs never mix modes on one GPU; the node
says its mode as the label ``gpufleet.io/gpu-sharing``.

A task in a container gets the same variables and the daemon's pipe directory mounted at the
same path (podman and docker share the host's IPC namespace, as MPS needs). The agent asks the
daemon every ``CHECK_EVERY_S`` whether it lives and starts it again if not (``revive``).

On MIG devices, as NVIDIA runs MPS there, one control daemon per MIG device (``MpsDevice``),
each started with ``CUDA_VISIBLE_DEVICES`` set to the device's UUID and a pipe and log
directory of its own (``mps/<index>/``); a task is told the directory of the device it holds
and its share of that device's memory (ADR 0058). A node that mixes whole GPUs and MIG devices
also runs one daemon for its whole GPUs, seeing those alone (``CUDA_VISIBLE_DEVICES`` their
``GPU-…`` UUIDs, never a MIG-enabled parent, with which the MPS server would not start), in
``mps/pipe`` (ADR 0061). It has never run here on a GPU. With simulated GPUs there is no
daemon: the variables are set, nothing enforces them.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from gpufleet.model.container import Mount
from gpufleet.model.resources import MILLI

MODES = ("timeslice", "mps")
LABEL = "gpufleet.io/gpu-sharing"
MPS_CONTROL = "nvidia-cuda-mps-control"


@dataclass(frozen=True, slots=True)
class MpsDevice:
    """A MIG device's own MPS control daemon: where it listens, and the device's memory."""

    index: int  # the node's device index (a MIG device in its parent's place)
    uuid: str  # "MIG-…": the daemon's CUDA_VISIBLE_DEVICES
    memory_mib: int
    pipe_dir: str
    log_dir: str


@dataclass(frozen=True, slots=True)
class Sharing:
    mode: str = "timeslice"
    memory_mib: int = 0  # one GPU's memory (the node's GPUs are one model)
    pipe_dir: str = ""  # CUDA_MPS_PIPE_DIRECTORY: where the control daemon listens
    log_dir: str = ""
    daemon: bool = False  # the agent started (or found) a real control daemon: it watches it
    replicas: int = 0  # each GPU offered as this many time-sliced replicas (model/replicas.py)
    mig: tuple[MpsDevice, ...] = ()  # MPS on MIG: a control daemon per MIG device
    # the node's daemon's CUDA_VISIBLE_DEVICES where MIG devices are beside: its whole GPUs'
    # UUIDs ("": it sees every GPU, a node without MIG devices)
    whole: str = ""

    def _daemon(self, devices: tuple[int, ...]) -> tuple[str, str, int]:
        """The pipe and log directories and the device memory of the daemon a task on
        ``devices`` talks to: its MIG device's own (CUDA gives a process one MIG device: the
        first), else the node's one daemon."""
        for d in self.mig:
            if devices and d.index == devices[0]:
                return d.pipe_dir, d.log_dir, d.memory_mib
        return self.pipe_dir, self.log_dir, self.memory_mib

    def task_env(self, gpus: int, gpu_milli: int, devices: tuple[int, ...] = ()) -> dict[str, str]:
        """What a task with ``gpus`` devices (``devices``, the node's indices) of
        ``gpu_milli`` each is told of its share."""
        if self.mode != "mps" or gpus == 0:
            return {}
        pipe, logs, memory = self._daemon(devices)
        if not pipe:  # no daemon serves it (none is made so: a node's GPUs always have one)
            return {}
        env = {"CUDA_MPS_PIPE_DIRECTORY": pipe, "CUDA_MPS_LOG_DIRECTORY": logs}
        # a fraction is always of one device: device 0 of its own (0: a video job packed
        # beside training uses the GPU's encoders only, and is given no compute share)
        if 0 < gpu_milli < MILLI:
            env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(max(1, math.ceil(gpu_milli / 10)))
            if memory:
                env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"0={memory * gpu_milli // MILLI}M"
        return env

    def container_env(
        self, gpus: int, gpu_milli: int, devices: tuple[int, ...] = ()
    ) -> dict[str, str]:
        """``task_env`` for a task in a container: the daemon's pipes are mounted at the same
        path (``container_mounts``); its log directory is the daemon's alone."""
        env = self.task_env(gpus, gpu_milli, devices)
        env.pop("CUDA_MPS_LOG_DIRECTORY", None)
        return env

    def container_mounts(self, gpus: int, devices: tuple[int, ...] = ()) -> tuple[Mount, ...]:
        """What a container task needs of the node for its share: the MPS control daemon's
        pipe directory, at the same path (the clients talk to the server through it; the
        runtimes share the host's IPC namespace, which MPS needs too)."""
        pipe = self._daemon(devices)[0]
        if self.mode != "mps" or gpus == 0 or not pipe:
            return ()
        return (Mount(pipe, pipe),)

    def note(self, gpus: int, gpu_milli: int) -> str:
        """What a fractional task is told its share does not bound ("" when it does)."""
        if gpus == 0 or gpu_milli >= MILLI or gpu_milli == 0 or self.mode == "mps":
            return ""
        if self.replicas:
            return (
                f"GPU sharing by time-slicing with {self.replicas} replicas per GPU: this task "
                "holds one replica; its memory and compute are not bounded (as NVIDIA says of "
                "time-slicing: no memory or fault isolation between replicas)"
            )
        return (
            f"GPU sharing by time-slicing: this task's {gpu_milli}/{MILLI} share of the GPU is "
            "not enforced (its memory and compute are the whole GPU's); a node with "
            "--gpu-sharing mps enforces it"
        )


def prepare(
    mode: str,
    data: Path,
    memory_mib: int,
    *,
    simulated: bool,
    mig: tuple[tuple[int, str, int], ...] = (),
    whole: tuple[str, ...] = (),
) -> Sharing:
    """The node's sharing; for ``mps`` on real GPUs, its control daemons running: one per MIG
    device where the node's devices are MIG devices (``mig``, each one's index, UUID and
    memory), and one for its GPUs that are not (all of them without MIG devices; ``whole``,
    their UUIDs, beside MIG devices, ``memory_mib`` then theirs). ValueError (the agent
    refuses to start) when the mode is unknown or a daemon does not start."""
    if mode not in MODES:
        raise ValueError(f"--gpu-sharing must be one of {', '.join(MODES)}, got {mode!r}")
    if mode != "mps":
        return Sharing(mode, memory_mib)
    devices = tuple(
        MpsDevice(i, uuid, mem, *map(str, _dirs(data / "mps" / str(i)))) for i, uuid, mem in mig
    )
    pipe, logs = _dirs(data / "mps") if whole or not devices else ("", "")
    sharing = Sharing(
        mode,
        memory_mib,
        str(pipe),
        str(logs),
        daemon=not simulated,
        mig=devices,
        whole=",".join(whole) if devices else "",
    )
    if not simulated:
        for where in daemons(sharing):
            start_daemon(where)
    return sharing


def _dirs(base: Path) -> tuple[Path, Path]:
    pipe, logs = base / "pipe", base / "log"
    for d in (pipe, logs):
        d.mkdir(parents=True, exist_ok=True)
    pipe.chmod(0o755)  # the tasks' accounts connect to the daemon's pipes
    return pipe, logs


@dataclass(frozen=True, slots=True)
class Daemon:
    """One control daemon: its directories and, on MIG, the one device it serves."""

    pipe_dir: str
    log_dir: str
    visible: str = ""  # CUDA_VISIBLE_DEVICES: a MIG device's UUID, whole GPUs' ("": every GPU)
    whole: bool = False  # the daemon of a node's whole GPUs beside its MIG devices


def daemons(s: Sharing) -> list[Daemon]:
    """The node's control daemons: one; or one per MIG device, and one for the whole GPUs
    beside them if any."""
    if not s.mig:
        return [Daemon(s.pipe_dir, s.log_dir)]
    out = [Daemon(d.pipe_dir, d.log_dir, d.uuid) for d in s.mig]
    if s.pipe_dir:
        out.append(Daemon(s.pipe_dir, s.log_dir, s.whole, whole=True))
    return out


def _name(d: Daemon) -> str:
    if d.whole:
        return f"the MPS control daemon of the whole GPUs {d.visible}"
    return f"the MPS control daemon of {d.visible}" if d.visible else "the MPS control daemon"


CHECK_EVERY_S = 30.0  # how often the agent asks its MPS control daemon whether it lives


def revive(s: Sharing) -> str:
    """Each control daemon started again if it no longer answers: what was done, "" when all
    answered (a daemon that died would leave every new MPS client failing to start)."""
    exe = shutil.which(MPS_CONTROL)
    if not s.daemon or exe is None:
        return ""
    said = []
    for d in daemons(s):
        if _answers(exe, _env(d)):
            continue
        which = _name(d)
        try:
            start_daemon(d)
        except (ValueError, OSError, subprocess.SubprocessError) as e:
            said.append(f"{which} does not answer and did not start again: {e}")
            continue
        said.append(f"{which} did not answer: started again")
    return "; ".join(said)


@dataclass(slots=True)
class DaemonWatch:
    """When the agent next asks its MPS control daemon whether it lives."""

    next_at: float = 0.0

    def check(self, s: Sharing, now: float) -> str:
        """``revive``'s word, at most every ``CHECK_EVERY_S`` ("" otherwise)."""
        if not s.daemon or now < self.next_at:
            return ""
        self.next_at = now + CHECK_EVERY_S
        return revive(s)


def _env(d: Daemon) -> dict[str, str]:
    env = {**os.environ, "CUDA_MPS_PIPE_DIRECTORY": d.pipe_dir, "CUDA_MPS_LOG_DIRECTORY": d.log_dir}
    if d.visible:  # NVIDIA's MPS on MIG: the daemon sees its one MIG device (or whole GPUs)
        env["CUDA_VISIBLE_DEVICES"] = d.visible
    return env


def start_daemon(s: Daemon) -> None:
    """The MPS control daemon for ``s``'s pipe directory: started unless one answers."""
    exe = shutil.which(MPS_CONTROL)
    if exe is None:
        raise ValueError(
            f"--gpu-sharing mps needs {MPS_CONTROL} (the NVIDIA driver's MPS) on PATH; "
            "install the driver's utilities or use --gpu-sharing timeslice"
        )
    env = _env(s)
    if _answers(exe, env):
        return
    r = subprocess.run([exe, "-d"], env=env, capture_output=True, text=True, timeout=30)
    if r.returncode != 0 or not _answers(exe, env):
        raise ValueError(f"{MPS_CONTROL} -d did not start: {(r.stderr or r.stdout).strip()}")


def _answers(exe: str, env: dict[str, str]) -> bool:
    r = subprocess.run(
        [exe], input="get_server_list\n", env=env, capture_output=True, text=True, timeout=10
    )
    return r.returncode == 0
