"""The systemd units of the controller and the agent (why each setting: ADR 0035).

The controller is a network service that only needs its data directory: it runs as its own
account with the system read-only, a private /tmp, no new privileges and no capabilities. The
agent is the parent of every job on its node, and whatever confines it confines them: it keeps
the system's /usr, /boot and /etc read-only (no job of a user may write them either) and
nothing that would break a job (devices, setuid helpers such as nvidia-modprobe and
apptainer's starter, its own namespaces, cgroups, locked memory for RDMA). Its tasks belong to
the node (ADR 0031): ``KillMode=process`` leaves the watchdog and the tasks' keepers running
when the agent stops, and ``KillSignal=SIGHUP`` makes the agent hand them to the next one."""

from __future__ import annotations

from pathlib import Path

CONTROLLER = "gpufleet-controller.service"
AGENT = "gpufleet-agent.service"


def _header(unit: str) -> str:
    return (
        "# written by `gpufleet setup`, which rewrites it: put changes in a drop-in\n"
        f"# (`systemctl edit {unit}`)\n"
    )


STATE = Path("/var/lib")


def controller_unit(gpufleet: Path, config: Path, data_dir: Path, user: str) -> str:
    """The controller's unit: ``gpufleet controller --config FILE`` as ``user``."""
    if data_dir.parent == STATE:  # systemd makes it, owned by the user, before each start
        state = f"StateDirectory={data_dir.name}\nStateDirectoryMode=0700\n"
    else:
        state = f"ReadWritePaths={data_dir}\n"
    return f"""{_header(CONTROLLER)}[Unit]
Description=gpufleet controller (REST API, scheduler, store)
After=network-online.target
Wants=network-online.target

[Service]
Type=exec
User={user}
ExecStart={gpufleet} controller --config {config}
# a bad configuration exits 2: starting again would change nothing
Restart=on-failure
RestartSec=2s
RestartPreventExitStatus=2
UMask=0077
{state}ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
PrivateDevices=yes
NoNewPrivileges=yes
CapabilityBoundingSet=
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
RestrictSUIDSGID=yes
RestrictRealtime=yes
RestrictNamespaces=yes
LockPersonality=yes
SystemCallArchitectures=native
LimitNOFILE=65536

[Install]
WantedBy=multi-user.target
"""


def agent_unit(gpufleet: Path, config: Path) -> str:
    """The agent's unit: ``gpufleet agent --config FILE`` as root (it starts tasks as their
    owners); a stop or restart leaves the tasks running (ADR 0031, ADR 0035)."""
    return f"""{_header(AGENT)}[Unit]
Description=gpufleet node agent (runs the jobs placed on this node)
After=network-online.target
Wants=network-online.target

[Service]
Type=exec
ExecStart={gpufleet} agent --config {config}
# the tasks belong to the node, not to this process: a stop or restart signals the agent
# alone (SIGHUP: it exits and leaves them to its watchdog and the next agent, which adopts
# them); to stop them too, drain the node first (`gpufleet drain NODE`), as for slurmd
KillMode=process
KillSignal=SIGHUP
Restart=on-failure
RestartSec=2s
RestartPreventExitStatus=2
# what confines the agent confines its jobs: only what no job may do anyway
ProtectSystem=full
# jobs inherit these limits (NCCL and RDMA pin memory; many files, many threads)
LimitMEMLOCK=infinity
LimitSTACK=infinity
LimitNOFILE=131072
TasksMax=infinity

[Install]
WantedBy=multi-user.target
"""
