"""The NVML backend's GPU reset for the heal loop (``agent/nvml/reset.py``): NVML has no reset
call, so it runs ``nvidia-smi --gpu-reset`` (here a script of the test's own on PATH, a real
process) on every GPU by its bus id, returns the locked clocks to their defaults, and starts
NVML again; a failed or impossible reset is a ``ResetFailed`` that says why."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from test_agent_nvml import FakeNvml, h100

from gpufleet.agent.nvml import NvmlBackend
from gpufleet.agent.nvml.reset import ResetFailed


class ResettableNvml(FakeNvml):
    def __init__(self, gpus: list[dict[str, Any]]) -> None:
        super().__init__(gpus)
        self.clock_resets: list[tuple[str, int]] = []
        self.inits = 0

    def nvmlInit(self) -> None:
        self.inits += 1
        self.shut = False

    def nvmlDeviceResetGpuLockedClocks(self, h: Any) -> None:
        self.clock_resets.append(("gpu", h[1]))

    def nvmlDeviceResetMemoryLockedClocks(self, h: Any) -> None:
        self.clock_resets.append(("memory", h[1]))


def smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rc: int, said: str) -> Path:
    """An ``nvidia-smi`` on PATH that records its arguments and answers ``rc``."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    record = tmp_path / "args"
    script = bindir / "nvidia-smi"
    script.write_text(f'#!/bin/sh\necho "$@" > {record}\necho "{said}"\nexit {rc}\n')
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}/usr/bin:/bin")
    return record


def test_a_reset_runs_nvidia_smi_on_every_gpu_then_starts_nvml_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = smi(tmp_path, monkeypatch, 0, "All done.")
    nv = ResettableNvml([h100(0), h100(1)])
    b = NvmlBackend(nv, profiling=None)
    buses = [g.pci_bus_id for g in b.discover()]
    assert b.reset() == "nvidia-smi --gpu-reset of 2 GPUs"
    assert record.read_text().split() == ["--gpu-reset", "-i", ",".join(buses)]
    assert sorted(nv.clock_resets) == [("gpu", 0), ("gpu", 1), ("memory", 0), ("memory", 1)]
    assert nv.inits == 2 and not nv.shut  # shut down and started again: handles anew
    assert len(b.discover()) == 2


def test_a_failed_reset_says_what_nvidia_smi_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    smi(tmp_path, monkeypatch, 255, "Unable to reset this GPU because it's being used by 1 process")
    b = NvmlBackend(ResettableNvml([h100(0)]), profiling=None)
    with pytest.raises(ResetFailed, match="nvidia-smi --gpu-reset failed: Unable to reset"):
        b.reset()


def test_without_nvidia_smi_nvml_alone_cannot_reset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    b = NvmlBackend(ResettableNvml([h100(0)]), profiling=None)
    with pytest.raises(ResetFailed, match="NVML itself cannot reset a GPU"):
        b.reset()


def test_mig_devices_are_not_reset_under_their_instances(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = h100(0, mig=[{"name": "1g.10gb", "total": 10 << 30, "used": 0, "gi": 1}])
    b = NvmlBackend(ResettableNvml([gpu]), profiling=None)
    assert b.inv.mig  # a MIG device discovered
    with pytest.raises(ResetFailed, match="destroy their instances"):
        b.reset()
