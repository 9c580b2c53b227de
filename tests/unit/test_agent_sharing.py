"""How a node shares a GPU held in fractions: time-slicing says the share is not enforced, MPS
tells each task its share of the SMs and its memory limit, and where the node's daemon is."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psutil
import pytest

from gpufleet.agent.sharing import CHECK_EVERY_S, DaemonWatch, Sharing, prepare
from gpufleet.model.container import Mount
from support.waiting import wait_for


def test_mps_tells_a_fraction_its_sms_and_its_memory_limit(tmp_path: Path) -> None:
    s = prepare("mps", tmp_path, 81_559, simulated=True)  # an H100's memory, NVML's MiB
    env = s.task_env(1, 250)
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=20389M"  # a quarter, device 0 of its own
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == str(tmp_path / "mps" / "pipe")
    assert (tmp_path / "mps" / "pipe").is_dir() and (tmp_path / "mps" / "log").is_dir()
    assert s.task_env(1, 333)["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "34"  # never under
    whole = s.task_env(2, 1000)  # whole GPUs: through the daemon, no limit
    assert set(whole) == {"CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY"}
    assert s.task_env(0, 1000) == {} and s.note(1, 250) == ""


def test_time_slicing_sets_nothing_and_says_the_share_is_not_enforced() -> None:
    s = Sharing("timeslice", 81_559)
    assert s.task_env(1, 250) == {}
    assert "250/1000 share of the GPU is not enforced" in s.note(1, 250)
    assert s.note(1, 1000) == "" and s.note(0, 0) == ""


def test_an_unknown_mode_or_mps_without_its_daemon_refuses_to_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ValueError, match="must be one of timeslice, mps"):
        prepare("mig", tmp_path, 0, simulated=True)
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-cuda-mps-control here
    with pytest.raises(ValueError, match="needs nvidia-cuda-mps-control"):
        prepare("mps", tmp_path, 81_559, simulated=False)


def test_a_container_gets_the_daemons_pipes_at_the_same_path(tmp_path: Path) -> None:
    s = prepare("mps", tmp_path, 81_559, simulated=True)
    pipe = str(tmp_path / "mps" / "pipe")
    assert s.container_mounts(1) == (Mount(pipe, pipe),)
    env = s.container_env(1, 250)
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == pipe and "CUDA_MPS_LOG_DIRECTORY" not in env
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    assert s.container_mounts(0) == () and Sharing("timeslice").container_mounts(1) == ()


# A stand-in for NVIDIA's nvidia-cuda-mps-control (no GPU here): ``-d`` starts a "daemon" (a
# sleep) whose pid it keeps in the pipe directory; a query answers while that process lives
# (a zombie, which nothing may reap in a container, is dead).
STAND_IN = """#!/bin/sh
pidf="$CUDA_MPS_PIPE_DIRECTORY/stand-in.pid"
if [ "$1" = "-d" ]; then (sleep 600 > /dev/null 2>&1 & echo $! > "$pidf"); exit 0; fi
cat > /dev/null
[ -s "$pidf" ] || exit 1
st=$(cut -d' ' -f3 "/proc/$(cat "$pidf")/stat" 2>/dev/null)
[ -n "$st" ] && [ "$st" != Z ]
"""


def test_a_control_daemon_that_died_is_started_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "nvidia-cuda-mps-control"
    exe.write_text(STAND_IN)
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    s = prepare("mps", tmp_path, 81_559, simulated=False)
    pidf = Path(s.pipe_dir) / "stand-in.pid"
    first = int(pidf.read_text())
    try:
        watch = DaemonWatch()
        assert s.daemon and watch.check(s, 100.0) == ""  # it answers
        os.kill(first, signal.SIGKILL)
        wait_for("the stand-in daemon gone", lambda: not _alive(first), 10)
        assert watch.check(s, 110.0) == ""  # not asked again before CHECK_EVERY_S
        assert watch.check(s, 100.0 + CHECK_EVERY_S) == (
            "the MPS control daemon did not answer: started again"
        )
        assert int(pidf.read_text()) != first and _alive(int(pidf.read_text()))
        simulated = prepare("mps", tmp_path / "sim", 81_559, simulated=True)
        assert DaemonWatch().check(simulated, 1e9) == ""  # no daemon to watch
    finally:
        for p in {first, int(pidf.read_text())}:
            if _alive(p):
                os.kill(p, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_mps_on_mig_devices_is_refused_at_start_and_says_what_to_use(tmp_path: Path) -> None:
    """One control daemon over MIG devices is not how NVIDIA runs MPS on MIG (a daemon per
    device): the agent refuses to start rather than tell tasks limits no server keeps."""
    with pytest.raises(ValueError, match="on MIG devices is not done") as e:
        prepare("mps", tmp_path, 18_176, simulated=True, mig=True)  # an H200's 1g.18gb
    assert "--gpu-sharing timeslice" in str(e.value) and not (tmp_path / "mps").exists()
    assert prepare("timeslice", tmp_path, 18_176, simulated=True, mig=True).mode == "timeslice"
