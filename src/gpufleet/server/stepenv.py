"""What every rank of a batch job needs to serve and use ``srun``: where each node slot's
step daemon listens (``GPUFLEET_STEP_HOSTS``, worker order), the rank's own slot, and the
job attempt's step key (``GPUFLEET_STEP_KEY``: an HMAC of the controller's step secret over
the job id and attempt, made at launch, never stored in the spec nor shown by the API)."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from gpufleet.base.portrange import port_range
from gpufleet.base.secretfile import SecretFileError, read_secret, write_secret
from gpufleet.core.launch_env import step_port
from gpufleet.model.allocation import Allocation
from gpufleet.model.job import JobSpec

SECRET_FILE = "step.key"


class _Link(Protocol):
    address: str


def load_secret(data_dir: Path) -> bytes:
    """The controller's step secret: ``data_dir/step.key`` (0600), made on first start."""
    path = data_dir / SECRET_FILE
    if not path.exists():
        write_secret(path, secrets.token_hex(32))
    text = read_secret(path, "step key")
    try:
        key = bytes.fromhex(text)
    except ValueError:
        raise SecretFileError(f"step key file {path}: not hex") from None
    if len(key) < 16:
        raise SecretFileError(f"step key file {path}: shorter than 16 bytes")
    return key


# slots of one job on one node take the ports after its base: up to this many more
SLOTS_ON_A_NODE = 8
JOB_PORTS_MIN = 32


@dataclass(frozen=True)
class JobPorts:
    """A block of ports of the controller's own (``--job-ports FIRST-LAST``) for what a job's
    number decides: MASTER_PORT from its first half, the step daemons' from the second. Two
    controllers on one host (parallel test clusters) given two blocks never give their job N
    the same ports; without one, both draw from the fixed ranges (core/launch_env.py)."""

    master: range
    step: range  # the bases: a job's slots on one node take its base and the next ports

    @classmethod
    def parse(cls, text: str, option: str = "--job-ports") -> JobPorts:
        first, count = port_range(text, option)
        if count < JOB_PORTS_MIN:
            raise ValueError(f"{option} {text!r}: need at least {JOB_PORTS_MIN} ports")
        half = first + count // 2
        return cls(range(first, half), range(half, first + count - SLOTS_ON_A_NODE))

    def master_port(self, seq: int, attempt: int) -> int:
        return self.master.start + (seq * 7 + attempt) % len(self.master)


def serves_steps(spec: JobSpec) -> bool:
    """Whether a job's ranks get the step environment: a batch job's, whose script may run
    ``srun`` (its other ranks are the step daemons it reaches)."""
    return spec.batch


def _shift(secret: bytes) -> int:
    return int.from_bytes(hashlib.sha256(b"step-port\0" + secret).digest()[:4], "big")


def step_key(secret: bytes, job_id: str, attempt: int) -> str:
    return hmac.new(secret, f"{job_id}\0{attempt}".encode(), hashlib.sha256).hexdigest()


def desktop_key(secret: bytes, job_id: str) -> str:
    """A desktop replica's key (``GPUFLEET_DESKTOP_KEY``; the gateway presents it to the
    session): an HMAC of the controllers' shared desktop secret over the replica's job id,
    which no other service, nor this one made again under its name, ever has."""
    return hmac.new(secret, f"desktop\0{job_id}".encode(), hashlib.sha256).hexdigest()


def step_env(
    job_id: str,
    seq: int,
    attempt: int,
    allocation: Allocation,
    links: Mapping[str, _Link],
    secret: bytes,
    ports: JobPorts | None = None,
) -> list[dict[str, str]]:
    """One dict per rank. Slots that share a node take the next ports: the job's number's
    (``step_port``), shifted by this cluster's secret, so that two clusters on the same hosts
    (two controllers on one test machine, two gpufleets sharing nodes) rarely give their job N
    the same ports; the secret is kept (``step.key``), so a restarted controller gives the same.
    ``ports``: the controller's own block (``JobPorts``), where the base is drawn from instead."""
    if ports is None:
        base = step_port(seq + _shift(secret), attempt)
    else:
        base = ports.step.start + ((seq + _shift(secret)) * 7 + attempt) % len(ports.step)
    on_node: dict[str, int] = {}
    hosts = []
    for p in allocation:
        n = on_node.get(p.node, 0)
        on_node[p.node] = n + 1
        link = links.get(p.node)
        addr = link.address if link is not None and link.address else p.node
        hosts.append(f"[{addr}]:{base + n}" if ":" in addr else f"{addr}:{base + n}")
    shared = {
        "GPUFLEET_STEP_HOSTS": ",".join(hosts),
        "GPUFLEET_STEP_KEY": step_key(secret, job_id, attempt),
    }
    return [{**shared, "GPUFLEET_STEP_SLOT": str(rank)} for rank in range(len(allocation))]
