"""``scontrol show node[s] [NAME]`` and ``scontrol show partition[s] [NAME]`` over the API, in
Slurm 22.05's layout (``-o``/``--oneliner``: one line each), from ``GET /nodes`` and
``GET /queues``: every queue is a partition of the nodes in its node set (every node when it
has none), ``default`` the Default one, as sinfo's shim shows them.

Every line as a real Slurm 22.05 printed it (tests/e2e/test_scontrol_nodes_vs_slurm.py holds
the record). What gpufleet has no value for is printed as Slurm prints it for a node whose
slurmd never answered (no ``Arch=``, ``Version=``, ``OS=`` line; ``CPULoad=N/A``,
``FreeMem=N/A``, ``BootTime=None``; ``CoresPerSocket=1 Sockets=CPUs``); TRES count
``gres/gpu`` as a Slurm with ``AccountingStorageTRES=gres/gpu`` does (``show job``'s too).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import Any

from gpufleet.client.lean import rows as lean_rows
from gpufleet.model.hostlist import compress, expand
from gpufleet.shims import sinfo
from gpufleet.shims.common import connect, run, tres_mem

NODE_WORDS = ("node", "nodes")
PARTITION_WORDS = ("part", "partition", "partitions")
WORDS = NODE_WORDS + PARTITION_WORDS
# gpufleet's states that Slurm shows whatever the node's use (sinfo.STATES' long names)
FIXED = {
    "lost": "DOWN+NOT_RESPONDING",
    "suspect": "UNKNOWN+NOT_RESPONDING",
    "powered_down": "IDLE+POWERED_DOWN",
    "powering_up": "IDLE+POWERING_UP",
    "powering_down": "IDLE+POWERING_DOWN",
    "power_failed": "DOWN+POWERED_DOWN",
}
FLAG = {"drained": "+DRAIN", "unhealthy": "+FAIL"}  # on the node's use: MIXED+DRAIN


def _used(n: Any) -> tuple[int, int, int]:
    """CPUs, MiB and GPUs the node's jobs hold (a share of a CPU or GPU counts as one)."""
    cpus = math.ceil(float(n["cpu_cores"]) - float(n["cpu_free"]) - 1e-9)
    mib = round((float(n["memory_gib"]) - float(n["memory_free_gib"])) * 1024)
    gpus = math.ceil(float(n["gpus"]) - float(n["gpus_free"]) - 1e-9)
    return max(0, cpus), max(0, mib), max(0, gpus)


def node_state(n: Any) -> str:
    """``State=`` as Slurm's: its use (IDLE, MIXED: some CPUs or GPUs held, ALLOCATED: every
    CPU), then its flags (``+DRAIN``, ``+FAIL``, ``+MAINTENANCE+RESERVED`` in an open
    maintenance window, ``+RESERVED`` in another reservation)."""
    s = str(n["state"])
    if s in FIXED:
        return FIXED[s]
    cpus, _, gpus = _used(n)
    use = "IDLE" if not (cpus or gpus) else "ALLOCATED" if n["cpu_free"] <= 0 else "MIXED"
    if s in FLAG:
        return use + FLAG[s]
    if n.get("reservation"):
        return use + ("+MAINTENANCE+RESERVED" if n.get("maint") else "+RESERVED")
    return use


def _tres(cpus: int, mib: int, gpus: int, *, nodes: int | None = None, billing: bool) -> str:
    parts = [f"cpu={cpus}"] if cpus else []
    parts += [f"mem={tres_mem(mib)}"] if mib else []
    parts += [f"node={nodes}"] if nodes else []
    parts += [f"billing={cpus}"] if billing and cpus else []
    parts += [f"gres/gpu={gpus}"] if gpus else []
    return ",".join(parts)


def node_lines(n: Any, partitions: Sequence[str]) -> list[str]:
    """One node's ``key=value`` lines in Slurm 22.05's order."""
    cpus = math.ceil(float(n["cpu_cores"]))
    mib = round(float(n["memory_gib"]) * 1024)
    used_cpus, used_mib, used_gpus = _used(n)
    features = ",".join(n.get("features") or []) or "(null)"
    name = n["name"]
    lines = [
        f"NodeName={name} CoresPerSocket=1 ",
        f"CPUAlloc={used_cpus} CPUEfctv={cpus} CPUTot={cpus} CPULoad=N/A",
        f"AvailableFeatures={features}",
        f"ActiveFeatures={features}",
        f"Gres={sinfo._gres(n).replace('gpu::', 'gpu:')}",  # of no type: gpu:4
        f"NodeAddr={n.get('address') or name} NodeHostName={name} ",
        f"RealMemory={mib} AllocMem={used_mib} FreeMem=N/A Sockets={cpus} Boards=1",
        f"State={node_state(n)} ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A",
        *([f"Partitions={','.join(partitions)} "] if partitions else []),
        "BootTime=None SlurmdStartTime=None",
        "LastBusyTime=Unknown",
        f"CfgTRES={_tres(cpus, mib, int(n['gpus']), billing=True)}",
        f"AllocTRES={_tres(used_cpus, used_mib, used_gpus, billing=False)}",
        "CapWatts=n/a",
        "CurrentWatts=0 AveWatts=0",
        "ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s",
    ]
    if n.get("why") and str(n["state"]) not in ("idle", "mixed", "allocated"):
        lines.append(f"Reason={n['why']}")  # no [user@time]: gpufleet keeps neither here
    return lines


def partition_lines(name: str, default: bool, nodes: Sequence[Any]) -> list[str]:
    """One queue's ``key=value`` lines as Slurm 22.05's partition (``nodes``: its node set)."""
    cpus = sum(math.ceil(float(n["cpu_cores"])) for n in nodes)
    mib = sum(round(float(n["memory_gib"]) * 1024) for n in nodes)
    gpus = sum(int(n["gpus"]) for n in nodes)
    names = compress(sorted(n["name"] for n in nodes)) if nodes else "(null)"
    return [
        f"PartitionName={name}",
        "AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL",
        f"AllocNodes=ALL Default={'YES' if default else 'NO'} QoS=N/A",
        "DefaultTime=NONE DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO",
        "MaxNodes=UNLIMITED MaxTime=UNLIMITED MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED",
        f"Nodes={names}",
        "PriorityJobFactor=1 PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=NO",
        "OverTimeLimit=NONE PreemptMode=OFF",
        f"State=UP TotalCPUs={cpus} TotalNodes={len(nodes)} SelectTypeParameters=NONE",
        "JobDefaults=(null)",
        "DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED",
        f"TRES={_tres(cpus, mib, gpus, nodes=len(nodes), billing=True) or '(null)'}",
    ]


def text(lines: Sequence[str], one_line: bool) -> str:
    """A record as scontrol prints it: indented lines and an empty one after; with ``-o`` on
    one line (the lines' own trailing blanks kept, as Slurm's)."""
    if one_line:
        return " ".join(lines) + "\n"
    return lines[0] + "\n" + "".join(f"   {x}\n" for x in lines[1:]) + "\n"


def _hosts(text: str) -> list[str]:
    try:
        return expand(text)
    except ValueError:
        return [text]  # not a hostlist: not found, as any other unknown name


def show(kind: str, names: Sequence[str], one_line: bool) -> int:
    """Print the named nodes (a hostlist: ``n[1-2],n4``) or partition, or all of them;
    ``Node X not found`` / ``Partition X not found`` for each unknown one in its place, on
    stdout as Slurm 22.05's scontrol prints it, exit 1."""
    with connect("scontrol") as c:
        nodes = sorted(lean_rows(c.nodes()), key=lambda n: n["name"])
        parts = sinfo.queues_of(lean_rows(c.queues()), nodes)
    code, out = 0, list[str]()
    if kind in NODE_WORDS:
        by_name = {n["name"]: n for n in nodes}
        for w in [h for x in names for h in _hosts(x)] if names else list(by_name):
            if w not in by_name:
                out.append(f"Node {w} not found\n")
                code = 1
                continue
            of = [q for q, members in parts.items() if any(m["name"] == w for m in members)]
            out.append(text(node_lines(by_name[w], of), one_line))
    else:
        for w in names or list(parts):
            if w not in parts:
                out.append(f"Partition {w} not found\n")
                code = 1
                continue
            out.append(text(partition_lines(w, w == sinfo.DEFAULT_QUEUE, parts[w]), one_line))
    sys.stdout.write("".join(out))
    return code


def main(args: Sequence[str]) -> int:
    """``args``: scontrol's, ``show`` and ``node``/``partition`` among them."""
    words = [a for a in args if not a.startswith("-")]
    if len(words) > 3:
        sys.stderr.write("too many arguments for keyword:show\n")  # as Slurm 22.05
        return 1
    one_line = any(a in ("-o", "--oneliner") for a in args)
    run("scontrol", lambda: show(words[1].lower(), words[2:], one_line))
