"""What every rank of a batch job needs to serve and use ``srun``: where each node slot's
step daemon listens (``GPUFLEET_STEP_HOSTS``, worker order), the rank's own slot, and the
job attempt's step key (``GPUFLEET_STEP_KEY``: an HMAC of the controller's step secret over
the job id and attempt, made at launch, never stored in the spec nor shown by the API)."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

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
) -> list[dict[str, str]]:
    """One dict per rank. Slots that share a node take the next ports: the job's number's
    (``step_port``), shifted by this cluster's secret, so that two clusters on the same hosts
    (two controllers on one test machine, two gpufleets sharing nodes) rarely give their job N
    the same ports; the secret is kept (``step.key``), so a restarted controller gives the same."""
    base = step_port(seq + _shift(secret), attempt)
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
