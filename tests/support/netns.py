"""Hosts made of network namespaces on this machine: one bridge, one veth pair and one address
per namespace, loopback up. Every host shares this machine's filesystem (a shared /home, as a
cluster's NFS) and sees the others at their addresses only."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from dataclasses import dataclass, field


def _sh(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=30, check=check)


def unsupported() -> str | None:
    """Why this machine cannot make such hosts, or None."""
    if os.geteuid() != 0:
        return "needs root (ip netns add)"
    if shutil.which("ip") is None:
        return "ip (iproute2) is not installed"
    if shutil.which("iptables") is None:
        return "iptables is not installed (the cuts between hosts are its DROP rules)"
    ns = f"gfchk{os.getpid()}"
    try:
        r = _sh("ip", "netns", "add", ns, check=False)
        if r.returncode != 0:
            return f"ip netns add is not permitted here: {r.stderr.strip()}"
    finally:
        _sh("ip", "netns", "del", ns, check=False)
    return None


@dataclass
class Hosts:
    """``names`` as hosts: ``addr(name)`` is its address, ``exec(name)`` the argv prefix that
    runs a command there."""

    names: list[str]
    tag: str = field(default_factory=lambda: f"{random.randrange(16**4):04x}")
    subnet: str = field(
        default_factory=lambda: f"10.{random.randrange(200, 250)}.{random.randrange(256)}"
    )

    @property
    def bridge(self) -> str:
        return f"gfr{self.tag}"

    def ns(self, name: str) -> str:
        return f"gfs{self.tag}{self.names.index(name)}"

    def addr(self, name: str) -> str:
        return f"{self.subnet}.{self.names.index(name) + 2}"

    @property
    def here(self) -> str:
        """This machine's own address on the bridge (the hosts reach its services there)."""
        return f"{self.subnet}.1"

    def exec(self, name: str) -> list[str]:
        return ["ip", "netns", "exec", self.ns(name)]

    def up(self) -> None:
        _sh("ip", "link", "add", self.bridge, "type", "bridge")
        _sh("ip", "addr", "add", f"{self.subnet}.1/24", "dev", self.bridge)  # the test's own
        _sh("ip", "link", "set", self.bridge, "up")
        for i, name in enumerate(self.names):
            ns, host, peer = self.ns(name), f"gfq{self.tag}{i}", f"gfo{self.tag}{i}"
            _sh("ip", "netns", "add", ns)
            _sh("ip", "link", "add", host, "type", "veth", "peer", "name", peer)
            _sh("ip", "link", "set", host, "master", self.bridge, "up")
            _sh("ip", "link", "set", peer, "netns", ns)
            _sh(*self.exec(name), "ip", "addr", "add", f"{self.addr(name)}/24", "dev", peer)
            _sh(*self.exec(name), "ip", "link", "set", peer, "up")
            _sh(*self.exec(name), "ip", "link", "set", "lo", "up")

    def cut(self, name: str, peer: str, port: int | None = None) -> None:
        """A partition between host ``name`` and the address ``peer`` (only its TCP ``port``
        when given): packets either way are dropped inside ``name``'s namespace, silently,
        as a broken link drops them (TCP retransmits; nothing is refused)."""
        for chain, way, their in (("OUTPUT", "-d", "--dport"), ("INPUT", "-s", "--sport")):
            match = ["-p", "tcp", their, str(port)] if port is not None else []
            _sh(*self.exec(name), "iptables", "-w", "-A", chain, way, peer, *match, "-j", "DROP")

    def heal(self, name: str) -> None:
        """Every cut of host ``name`` undone."""
        _sh(*self.exec(name), "iptables", "-w", "-F")

    def down(self) -> None:
        for name in self.names:
            _sh("ip", "netns", "del", self.ns(name), check=False)
        _sh("ip", "link", "del", self.bridge, check=False)
