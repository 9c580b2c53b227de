"""Port blocks claimed across processes (ops/portblocks.py): two processes never hold one
block; a block whose claimer died is free again; a release gives it back."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.ops import portblocks

POOL = range(40000, 40080)  # two blocks of 40


def test_blocks_are_unique_across_processes_and_free_again_when_their_claimer_dies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(portblocks, "CLAIMS", tmp_path)
    other = subprocess.run(  # another process claims one block, then exits
        [sys.executable, "-c",
         "import sys; from pathlib import Path; from gpufleet.ops import portblocks as p;"
         f"p.CLAIMS = Path({str(tmp_path)!r}); b = p.claim_block(range(40000, 40080), 40);"
         "print(b.start)"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    theirs = int(other.stdout)
    # its claim outlived it in the file, but its pid is gone: claimable again
    (tmp_path / str(theirs)).write_text(str(os.getpid()))  # now held by a live process: me
    mine = portblocks.claim_block(POOL, 40)
    assert mine.start != theirs and len(mine) == 40
    with pytest.raises(RuntimeError, match="no free block of 40 ports"):
        portblocks.claim_block(POOL, 40)
    portblocks.release(mine)
    assert portblocks.claim_block(POOL, 40) == mine  # released: claimable again
    (tmp_path / str(theirs)).write_text("999999999")  # a claimer that no longer exists
    assert portblocks.claim_block(POOL, 40).start == theirs


def test_a_block_with_a_port_in_use_is_passed_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(portblocks, "CLAIMS", tmp_path)
    got = portblocks.claim_block(POOL, 40, usable=lambda p: p >= 40040)
    assert got == range(40040, 40080)
    assert not (tmp_path / "40000").exists()  # the unusable block's claim was not kept


def test_a_controllers_port_is_claimed_below_the_kernels_ephemeral_ports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a port of the ephemeral range can be taken by any outgoing connection while a test's
    # controller is down, and its restart then fails to bind it ("address already in use")
    from gpufleet.ops import localcluster

    monkeypatch.setattr(portblocks, "CLAIMS", tmp_path)
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = {localcluster.free_port() for _ in range(20)}
    assert len(ports) == 20  # never handed twice while this process holds them
    assert all(p in localcluster.CONTROLLER_PORTS and p < low for p in ports)
    assert all((tmp_path / str(p)).read_text() == str(os.getpid()) for p in ports)
