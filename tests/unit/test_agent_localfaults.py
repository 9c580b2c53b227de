"""A node's own faults are a health Reason that spares its jobs (ADR 0031); a GPU's fault
keeps stopping the jobs on that GPU."""

from __future__ import annotations

import subprocess
from pathlib import Path

from gpufleet.agent.localfaults import disk_fault, with_local_faults
from gpufleet.api.schemas import Health
from realparts import missing


def test_a_writable_data_dir_with_room_is_no_fault(tmp_path: Path) -> None:
    assert disk_fault(tmp_path) == ""
    assert with_local_faults(Health(), tmp_path) == Health()


def test_a_data_dir_that_is_gone_is_a_fault_naming_it(tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    assert disk_fault(gone).startswith(f"cannot read the filesystem of {gone}")


def test_a_local_fault_alone_drains_and_spares_the_jobs(tmp_path: Path) -> None:
    why = f"cannot write the lease file {tmp_path}/lease.json: No space left on device"
    h = with_local_faults(Health(), tmp_path, why, "", why)
    assert h == Health(healthy=False, why=why, jobs_unaffected=True)  # each reason once


def test_a_gpu_fault_stays_one_that_stops_its_jobs(tmp_path: Path) -> None:
    gpu = Health(healthy=False, why="XID 79 on GPU 3", bad_gpus=[3])
    h = with_local_faults(gpu, tmp_path, "disk full on /var/lib/gpufleet")
    assert not h.healthy and not h.jobs_unaffected and h.bad_gpus == [3]
    assert h.why == "XID 79 on GPU 3; disk full on /var/lib/gpufleet"


def test_a_read_only_data_dir_is_a_fault_naming_it(tmp_path: Path) -> None:
    """A real read-only filesystem (a tmpfs mounted ro; the tests run as root)."""
    ro = tmp_path / "ro"
    ro.mkdir()
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(ro)],
        capture_output=True,
        text=True,
    )
    if res.returncode != 0:
        missing(f"cannot mount a tmpfs: {res.stderr.strip()}")
    try:
        assert disk_fault(ro) == f"read-only filesystem on {ro}"
        h = with_local_faults(Health(), ro)
        assert h == Health(healthy=False, why=f"read-only filesystem on {ro}", jobs_unaffected=True)
    finally:
        subprocess.run(["umount", "-l", str(ro)], check=False)
