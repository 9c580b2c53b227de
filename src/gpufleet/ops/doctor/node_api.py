"""``gpufleet doctor node``'s findings from the API alone: the node's state and health
complaint, its heartbeat's age, the GPUs it registered, its driver against the other nodes'."""

from __future__ import annotations

from collections import Counter

from gpufleet.api.schemas import NodeOut
from gpufleet.ops.doctor.finding import Finding, Severity, ok

E, W, INFO = Severity.ERROR, Severity.WARNING, Severity.INFO
LOCAL_HINT = "run 'gpufleet doctor node {n} --local' on the node itself"


def health_cause(why: str) -> tuple[str, str]:
    """The likely cause and next step of an agent's health complaint."""
    if "missing" in why or "fell off" in why or "expected GPUs" in why:
        return (
            "a GPU is not recognized: it fell off the PCIe bus (XID 79) or the driver lost it",
            "on the node: dmesg | grep -i -e xid -e nvrm; nvidia-smi; lspci | grep -i nvidia; "
            "reset the GPU (nvidia-smi -r) or reboot; reseat or replace it if it recurs",
        )
    if "XID" in why:
        return (
            "the driver logged a critical XID: the GPU needs a reset or has failed",
            "drain it, reset the GPU (nvidia-smi -r -i N) or reboot; look the XID up in "
            "NVIDIA's XID catalog; replace the GPU if it recurs",
        )
    if "ECC" in why:
        return (
            "uncorrectable memory errors on a GPU",
            "reset the GPU to apply the row remap; replace it if remapping fails",
        )
    if "°C" in why:
        return (
            "a GPU runs too hot",
            "check the fans, airflow and inlet temperature; clean filters",
        )
    if "NVLink" in why:
        return (
            "NVLinks are down",
            "check nv-fabricmanager (NVSwitch systems), nvidia-smi nvlink -s; reset the GPUs",
        )
    return ("the agent's health checks fail", "read the agent's log on the node")


def api_findings(n: NodeOut, nodes: list[NodeOut], now: float, max_age_s: float) -> list[Finding]:
    """What the controller knows of ``n``: its state, its heartbeat, its GPUs, its driver."""
    if n.state == "lost":
        return [
            Finding(
                "heartbeat",
                f"lost: {n.why}",
                "the agent stopped reporting: it crashed or was "
                "stopped, the node went down, or the network to the controller is cut",
                "on the node: systemctl status gpufleet-agent and its log; ping the controller "
                f"from it; {LOCAL_HINT.format(n=n.name)}",
                E,
                n.name,
                "node_lost",
            )
        ]
    return [
        _state_finding(n),
        *_heartbeat_findings(n, now, max_age_s),
        *_inventory_findings(n),
        *_driver_findings(n, nodes),
    ]


def _state_finding(n: NodeOut) -> Finding:
    t = n.name
    if n.state == "unhealthy" or (n.state == "drained" and "health checks" in n.why):
        cause, step = health_cause(n.why)
        return Finding(
            "health checks", n.why, cause, f"{step}; {LOCAL_HINT.format(n=t)}", E, t, "unhealthy"
        )
    if n.state == "drained":
        return Finding(
            "state",
            f"drained: {n.why}",
            "an admin drained it",
            "gpufleet resume " + t,
            INFO,
            t,
            "drained",
        )
    return ok("state", n.state, t, "state")


def _heartbeat_findings(n: NodeOut, now: float, max_age_s: float) -> list[Finding]:
    if n.last_heartbeat is None or now - n.last_heartbeat <= max_age_s:
        return []
    return [
        Finding(
            "heartbeat",
            f"last {now - n.last_heartbeat:.0f} s ago",
            "the agent reports late or not at all",
            "check the agent and its network",
            W,
            n.name,
            "heartbeat_late",
        )
    ]


def _inventory_findings(n: NodeOut) -> list[Finding]:
    indices = sorted(g.index for g in n.gpu_info)
    missing = sorted(set(range(max(indices) + 1)) - set(indices)) if indices else []
    if not missing:
        return []
    return [
        Finding(
            "gpu inventory",
            f"registered GPUs {indices}: {missing} absent",
            "the GPUs were not all recognized when the agent started",
            health_cause("missing")[1],
            E,
            n.name,
            "gpu_missing",
        )
    ]


def _driver_findings(n: NodeOut, nodes: list[NodeOut]) -> list[Finding]:
    drivers = Counter(p.driver_version for p in nodes if p.driver_version and p.state != "lost")
    if not n.driver_version or len(drivers) <= 1:
        return []
    major = drivers.most_common(1)[0][0]
    if major == n.driver_version:
        return []
    return [
        Finding(
            "driver version",
            f"{n.driver_version} here, {major} on most nodes",
            "the node was not upgraded with the others",
            f"install driver {major} and reboot",
            W,
            n.name,
            "driver_mismatch",
        )
    ]
