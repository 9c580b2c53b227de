"""The heal loop's policy: how a node the controller drained for a GPU fault is repaired and
proven before it serves again, and when it is given up as hardware (ADR 0042).

Read from the ``heal:`` section of the cluster YAML or from the file given to the controller's
``--heal-policy``; absent, the live controller heals with the defaults below. ``heal: false``
(or ``enabled: false``, or the controller's ``--no-heal``) turns the loop off: a node then
returns as soon as its checks pass."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpufleet.model.validate import MAX_ITEMS, Fields

REMEDIES = ("reset", "command", "none")
BURN_IN_SLACK_S = 60.0  # a step's bound beyond the stress: the probes' start, DCGM's diag


@dataclass(frozen=True, slots=True)
class HealPolicy:
    enabled: bool = True  # False: no heal loop (``heal: false``)
    # "reset": the GPU backend resets the node's GPUs (NVML nodes: nvidia-smi --gpu-reset);
    # "command": the site's ``command`` runs on the node through its agent; "none": burn-in only
    remedy: str = "reset"
    command: tuple[str, ...] = ()
    burn_in_s: float = 60.0  # the stress test's length on every GPU of the node
    network: bool = True  # the network layer against a healthy peer, when one is up
    # the link to the peer must do at least this (validate's min_net_gbps, where the NIC's
    # speed is unknown; 80 % of a physical NIC's speed otherwise) and answer within this
    network_min_gbps: float = 1.0
    network_max_rtt_ms: float = 2.0
    max_failures: int = 3  # this many failures within ``window_s``: left drained (RMA)
    window_s: float = 86_400.0
    step_timeout_s: float = 900.0  # a remediation or burn-in unanswered this long failed

    def __post_init__(self) -> None:
        if self.remedy not in REMEDIES:
            raise ValueError(f"heal remedy {self.remedy!r}: one of {', '.join(REMEDIES)}")
        if (self.remedy == "command") != bool(self.command):
            raise ValueError("heal: a command is given with remedy 'command', and only there")

    @staticmethod
    def from_dict(data: Any, *, source: str = "<heal>", path: str = "heal") -> HealPolicy:
        """The policy; a SpecError naming the field at fault (``every_problem`` finds them
        all)."""
        return _read(data, source, path)


def _read(data: Any, source: str, path: str) -> HealPolicy:
    if data is False:  # ``heal: false`` (YAML's ``off`` reads the same)
        return HealPolicy(enabled=False)
    f = Fields(data, source=source, path=path)
    enabled = f.flag("enabled", True)
    remedy = f.text("remedy", "reset")
    if remedy not in REMEDIES:
        raise f.error("remedy", f"must be one of {', '.join(REMEDIES)}, got {remedy!r}")
    raw = f.raw("command")
    command: tuple[str, ...] = ()
    if raw is not None:
        if isinstance(raw, str):
            raw = ["/bin/sh", "-c", raw]
        if not isinstance(raw, list) or not raw or not all(isinstance(a, str) for a in raw):
            raise f.error("command", "must be a shell line or a list of arguments")
        if len(raw) > MAX_ITEMS:
            raise f.error("command", f"must have at most {MAX_ITEMS} arguments")
        command = tuple(f.checked(f"command[{i}]", a) for i, a in enumerate(raw))
    if (remedy == "command") != bool(command):
        raise f.error("command", "is given with remedy: command, and only there")
    policy = HealPolicy(
        enabled=enabled,
        remedy=remedy,
        command=command,
        burn_in_s=f.number("burn_in_s", 60.0, minimum=0.0, maximum=86_400.0),
        network=f.flag("network", True),
        network_min_gbps=f.number("network_min_gbps", 1.0, minimum=0.0),
        network_max_rtt_ms=f.number("network_max_rtt_ms", 2.0, minimum=0.0),
        max_failures=f.integer("max_failures", 3, minimum=1, maximum=1000),
        window_s=f.number("window_s", 86_400.0, minimum=1.0, maximum=365 * 86_400.0),
        step_timeout_s=f.number("step_timeout_s", 900.0, minimum=1.0, maximum=86_400.0),
    )
    if policy.step_timeout_s < policy.burn_in_s + BURN_IN_SLACK_S:
        raise f.error(
            "step_timeout_s",
            f"must be at least burn_in_s + {BURN_IN_SLACK_S:g} s "
            f"({policy.burn_in_s + BURN_IN_SLACK_S:g}), got {policy.step_timeout_s:g}: "
            "every burn-in would run past it and fail",
        )
    f.finish()
    return policy
