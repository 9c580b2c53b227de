"""How a node shares a GPU held in fractions: time-slicing says the share is not enforced, MPS
tells each task its share of the SMs and its memory limit, and where the node's daemon is."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psutil
import pytest

from gpufleet.agent.sharing import CHECK_EVERY_S, DaemonWatch, Sharing, daemons, prepare
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
if [ "$1" = "-d" ]; then
  echo "$CUDA_VISIBLE_DEVICES" > "$CUDA_MPS_PIPE_DIRECTORY/visible"
  (sleep 600 > /dev/null 2>&1 & echo $! > "$pidf"); exit 0
fi
cat > /dev/null
[ -s "$pidf" ] || exit 1
st=$(cut -d' ' -f3 "/proc/$(cat "$pidf")/stat" 2>/dev/null)
[ -n "$st" ] && [ "$st" != Z ]
"""


def _stand_in_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """STAND_IN as ``nvidia-cuda-mps-control``, first on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "nvidia-cuda-mps-control"
    exe.write_text(STAND_IN)
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


def test_a_control_daemon_that_died_is_started_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _stand_in_on_path(tmp_path, monkeypatch)
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


MIG = ((0, "MIG-aaaa", 18_432), (1, "MIG-bbbb", 18_432))  # two H200 1g.18gb devices


def test_mps_on_mig_has_a_daemon_per_device_and_a_task_talks_to_its_own(tmp_path: Path) -> None:
    """NVIDIA's MPS on MIG: a control daemon per MIG device, seeing that device alone, with
    pipe and log directories of its own; a share is of its device's memory (ADR 0058)."""
    s = prepare("mps", tmp_path, 18_432, simulated=True, mig=MIG)
    one = tmp_path / "mps" / "1"
    env = s.task_env(1, 250, (1,))
    assert env == {
        "CUDA_MPS_PIPE_DIRECTORY": str(one / "pipe"),
        "CUDA_MPS_LOG_DIRECTORY": str(one / "log"),
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=4608M",  # a quarter of the 18 GiB device
    }
    assert (one / "pipe").is_dir() and not (tmp_path / "mps" / "pipe").exists()
    assert s.task_env(1, 1000, (0,))["CUDA_MPS_PIPE_DIRECTORY"] == str(tmp_path / "mps/0/pipe")
    assert s.container_mounts(1, (1,)) == (Mount(str(one / "pipe"), str(one / "pipe")),)
    assert "CUDA_MPS_LOG_DIRECTORY" not in s.container_env(1, 250, (1,))
    assert [(d.pipe_dir, d.visible) for d in daemons(s)] == [
        (str(tmp_path / "mps/0/pipe"), "MIG-aaaa"),
        (str(one / "pipe"), "MIG-bbbb"),
    ]
    assert prepare("timeslice", tmp_path / "ts", 18_432, simulated=True, mig=MIG).mig == ()


def test_an_agent_on_simulated_mig_devices_starts_with_mps(tmp_path: Path) -> None:
    """Refused at start before: the agent now equips its runner with a daemon per device."""
    from types import SimpleNamespace

    from gpufleet.agent.main import _equip
    from gpufleet.agent.simgpu import SimulatedGpus

    gpus = SimulatedGpus.from_spec("2xH200-1g.18gb", "n0")
    infos = gpus.discover()
    assert [g.mig_profile for g in infos] == ["1g.18gb"] * 2
    agent = SimpleNamespace(gpus=infos, runner=SimpleNamespace(step_bin="", sharing=None))
    _equip(agent, tmp_path, "mps", 0, simulated=True)  # type: ignore[arg-type]
    s = agent.runner.sharing
    assert [d.uuid for d in s.mig] == [g.uuid for g in infos]
    assert all(g.uuid.startswith("MIG-") for g in infos)
    assert gpus.visible_devices([1]) == infos[1].uuid  # CUDA sees a MIG device by its UUID
    assert s.task_env(1, 500, (1,))["CUDA_MPS_PIPE_DIRECTORY"] == str(tmp_path / "mps/1/pipe")


def test_each_mig_devices_daemon_sees_its_device_and_is_started_again_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _stand_in_on_path(tmp_path, monkeypatch)
    s = prepare("mps", tmp_path, 18_432, simulated=False, mig=MIG)
    pidfs = [Path(d.pipe_dir) / "stand-in.pid" for d in s.mig]
    first = [int(p.read_text()) for p in pidfs]
    try:
        seen = [(Path(d.pipe_dir) / "visible").read_text().strip() for d in s.mig]
        assert seen == ["MIG-aaaa", "MIG-bbbb"]  # CUDA_VISIBLE_DEVICES: its one MIG device
        os.kill(first[1], signal.SIGKILL)
        wait_for("device 1's stand-in daemon gone", lambda: not _alive(first[1]), 10)
        assert DaemonWatch().check(s, 1.0) == (
            "the MPS control daemon of MIG-bbbb did not answer: started again"
        )
        now = [int(p.read_text()) for p in pidfs]
        assert now[0] == first[0] and now[1] != first[1] and _alive(now[1])
    finally:
        for p in {*first, *(int(f.read_text()) for f in pidfs)}:
            if _alive(p):
                os.kill(p, signal.SIGKILL)


WHOLE = ("GPU-cccc", "GPU-dddd")  # two whole H100s beside MIG (a mixed node: ADR 0061)


def test_a_mixed_nodes_whole_gpus_have_a_daemon_of_their_own(tmp_path: Path) -> None:
    """MIG devices keep theirs; the whole GPUs (indices 2 and 3) are served by the node's
    daemon, seeing those GPUs alone, a share being of a whole GPU's memory."""
    s = prepare("mps", tmp_path, 81_559, simulated=True, mig=MIG, whole=WHOLE)
    node = tmp_path / "mps"
    env = s.task_env(1, 250, (3,))
    assert env == {
        "CUDA_MPS_PIPE_DIRECTORY": str(node / "pipe"),
        "CUDA_MPS_LOG_DIRECTORY": str(node / "log"),
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=20389M",  # a quarter of an H100, not of 18 GiB
    }
    assert s.task_env(1, 250, (1,))["CUDA_MPS_PIPE_DIRECTORY"] == str(node / "1" / "pipe")
    assert s.task_env(1, 250, (1,))["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=4608M"
    assert s.container_mounts(1, (2,)) == (Mount(str(node / "pipe"), str(node / "pipe")),)
    assert [(d.pipe_dir, d.visible) for d in daemons(s)] == [
        (str(node / "0" / "pipe"), "MIG-aaaa"),
        (str(node / "1" / "pipe"), "MIG-bbbb"),
        (str(node / "pipe"), "GPU-cccc,GPU-dddd"),  # never a MIG-enabled parent
    ]
    assert [d.visible for d in daemons(prepare("mps", tmp_path / "w", 81_559, simulated=True))] == [
        ""  # a node without MIG devices: its one daemon sees every GPU, as before
    ]


def test_an_agent_on_a_mixed_node_equips_a_daemon_for_its_whole_gpus(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from gpufleet.agent.main import _equip
    from gpufleet.agent.simgpu import SimulatedGpus

    mig = SimulatedGpus.from_spec("2xH100-1g.10gb", "n0").discover()
    h100s = SimulatedGpus.from_spec("2xH100", "n1").discover()
    whole = [g.model_copy(update={"index": 2 + g.index}) for g in h100s]
    agent = SimpleNamespace(gpus=[*mig, *whole], runner=SimpleNamespace(step_bin="", sharing=None))
    _equip(agent, tmp_path, "mps", 0, simulated=True)  # type: ignore[arg-type]
    s = agent.runner.sharing
    assert [d.uuid for d in s.mig] == [g.uuid for g in mig]
    assert s.whole == ",".join(g.uuid for g in whole) and s.memory_mib == whole[0].memory_mib
    half = s.task_env(1, 500, (2,))
    assert half["CUDA_MPS_PIPE_DIRECTORY"] == str(tmp_path / "mps" / "pipe")
    assert half["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={whole[0].memory_mib // 2}M"
    assert s.task_env(1, 500, (0,))["CUDA_MPS_PIPE_DIRECTORY"] == str(tmp_path / "mps/0/pipe")


def test_a_mixed_nodes_whole_gpu_daemon_sees_them_and_is_started_again_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _stand_in_on_path(tmp_path, monkeypatch)
    s = prepare("mps", tmp_path, 81_559, simulated=False, mig=MIG, whole=WHOLE)
    pidfs = [Path(d.pipe_dir) / "stand-in.pid" for d in daemons(s)]
    first = [int(p.read_text()) for p in pidfs]
    try:
        seen = [(Path(d.pipe_dir) / "visible").read_text().strip() for d in daemons(s)]
        assert seen == ["MIG-aaaa", "MIG-bbbb", "GPU-cccc,GPU-dddd"]
        os.kill(first[2], signal.SIGKILL)
        wait_for("the whole GPUs' stand-in daemon gone", lambda: not _alive(first[2]), 10)
        assert DaemonWatch().check(s, 1.0) == (
            "the MPS control daemon of the whole GPUs GPU-cccc,GPU-dddd did not answer: "
            "started again"
        )
        now = [int(p.read_text()) for p in pidfs]
        assert now[:2] == first[:2] and now[2] != first[2] and _alive(now[2])
    finally:
        for p in {*first, *(int(f.read_text()) for f in pidfs)}:
            if _alive(p):
                os.kill(p, signal.SIGKILL)
