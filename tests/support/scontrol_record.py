"""What a real Slurm 22.05 printed for ``scontrol show node`` and ``show partition``
(``shared/tools/slurm_local.sh``: nodes n1..n4 of 8 CPUs, 16000 MB and 4 GPUs in partitions
gpu (Default) and debug, with ``EXTRA_CONF`` beside them), and how a record is made comparable
with gpufleet's scontrol (``normalized``).

Recorded with::

    scontrol update nodename=n4 state=drain reason="bad gpu"
    sbatch -o /dev/null -w n2 -n1 --mem=1000 --gres=gpu:1 --wrap "sleep 600"
    sbatch -o /dev/null -w n3 --exclusive --wrap "sleep 600"
    scontrol show node n2; scontrol show node n3; scontrol show node n4; scontrol show node v2
    scontrol show node v3; scontrol -o show node n2; scontrol show partition gpu (empty, ...)
    scontrol update nodename=v1 state=down reason=gone; scontrol show node v1
    scontrol update nodename=n2 state=drain reason=draining; scontrol show node n2
    scontrol show node nosuch; scontrol show partition nosuch   (each: exit 1)
"""

from __future__ import annotations

import re

EXTRA_CONF = """\
NodeName=v1 NodeHostName=nohost NodeAddr=127.0.0.2 Port=24899 CPUs=8 RealMemory=16000 \
Gres=gpu:4 State=UNKNOWN
NodeName=v2 NodeHostName=nohost2 NodeAddr=127.0.0.3 CPUs=8 RealMemory=16384 Gres=gpu:a100:2 \
Feature=fast,big State=UNKNOWN
NodeName=v3 NodeHostName=nohost3 NodeAddr=127.0.0.4 CPUs=4 RealMemory=1000 State=UNKNOWN
PartitionName=virt Nodes=v1,v2 MaxTime=INFINITE State=UP
PartitionName=empty MaxTime=60 State=UP
"""

# a node whose slurmd answers, one of its jobs holding a CPU, 1000M and a GPU
N2_MIXED = """\
NodeName=n2 Arch=x86_64 CoresPerSocket=8 
   CPUAlloc=1 CPUEfctv=8 CPUTot=8 CPULoad=1.66
   AvailableFeatures=(null)
   ActiveFeatures=(null)
   Gres=gpu:4
   NodeAddr=127.0.0.1 NodeHostName=vm Port=24802 Version=22.05.8
   OS=Linux 6.18.44-fc-v1300 #1 SMP PREEMPT_DYNAMIC @0 
   RealMemory=16000 AllocMem=1000 FreeMem=16115 Sockets=1 Boards=1
   State=MIXED ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Partitions=gpu,debug 
   BootTime=2026-12-07T16:28:01 SlurmdStartTime=2026-12-07T17:16:49
   LastBusyTime=2026-12-07T17:16:49
   CfgTRES=cpu=8,mem=16000M,billing=8
   AllocTRES=cpu=1,mem=1000M
   CapWatts=n/a
   CurrentWatts=0 AveWatts=0
   ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s

"""  # noqa: W291 (Slurm's trailing blanks)
N2_ONELINE = (
    "NodeName=n2 Arch=x86_64 CoresPerSocket=8  CPUAlloc=1 CPUEfctv=8 CPUTot=8 CPULoad=1.66 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:4 NodeAddr=127.0.0.1 "
    "NodeHostName=vm Port=24802 Version=22.05.8 OS=Linux 6.18.44-fc-v1300 #1 SMP "
    "PREEMPT_DYNAMIC @0  RealMemory=16000 AllocMem=1000 FreeMem=16115 Sockets=1 Boards=1 "
    "State=MIXED ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A "
    "Partitions=gpu,debug  BootTime=2026-12-07T16:28:01 SlurmdStartTime=2026-12-07T17:16:49 "
    "LastBusyTime=2026-12-07T17:16:49 CfgTRES=cpu=8,mem=16000M,billing=8 "
    "AllocTRES=cpu=1,mem=1000M CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s "
    "ExtSensorsWatts=0 ExtSensorsTemp=n/s\n"
)
# every CPU and all the memory held (--exclusive)
N3_ALLOCATED = (
    N2_MIXED.replace("n2", "n3")
    .replace("24802", "24803")
    .replace("CPUAlloc=1", "CPUAlloc=8")
    .replace("AllocMem=1000", "AllocMem=16000")
    .replace("State=MIXED", "State=ALLOCATED")
    .replace("AllocTRES=cpu=1,mem=1000M", "AllocTRES=cpu=8,mem=16000M")
)
N4_DRAINED = """\
NodeName=n4 Arch=x86_64 CoresPerSocket=8 
   CPUAlloc=0 CPUEfctv=8 CPUTot=8 CPULoad=1.66
   AvailableFeatures=(null)
   ActiveFeatures=(null)
   Gres=gpu:4
   NodeAddr=127.0.0.1 NodeHostName=vm Port=24804 Version=22.05.8
   OS=Linux 6.18.44-fc-v1300 #1 SMP PREEMPT_DYNAMIC @0 
   RealMemory=16000 AllocMem=0 FreeMem=16113 Sockets=1 Boards=1
   State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Partitions=gpu,debug 
   BootTime=2026-12-07T16:28:01 SlurmdStartTime=2026-12-07T17:16:49
   LastBusyTime=2026-12-07T17:16:49
   CfgTRES=cpu=8,mem=16000M,billing=8
   AllocTRES=
   CapWatts=n/a
   CurrentWatts=0 AveWatts=0
   ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s
   Reason=bad gpu [root@2026-12-07T17:16:56]

"""  # noqa: W291
# no slurmd ever answered for these: what Slurm prints of a node it knows nothing of
V1_DOWN = """\
NodeName=v1 CoresPerSocket=1 
   CPUAlloc=0 CPUEfctv=8 CPUTot=8 CPULoad=N/A
   AvailableFeatures=(null)
   ActiveFeatures=(null)
   Gres=gpu:4
   NodeAddr=127.0.0.2 NodeHostName=nohost Port=24899 
   RealMemory=16000 AllocMem=0 FreeMem=N/A Sockets=8 Boards=1
   State=DOWN+NOT_RESPONDING ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Partitions=virt 
   BootTime=None SlurmdStartTime=None
   LastBusyTime=Unknown
   CfgTRES=cpu=8,mem=16000M,billing=8
   AllocTRES=
   CapWatts=n/a
   CurrentWatts=0 AveWatts=0
   ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s
   Reason=gone [root@2026-12-07T17:17:08]

"""  # noqa: W291
V2_UNKNOWN = """\
NodeName=v2 CoresPerSocket=1 
   CPUAlloc=0 CPUEfctv=8 CPUTot=8 CPULoad=N/A
   AvailableFeatures=fast,big
   ActiveFeatures=fast,big
   Gres=gpu:a100:2
   NodeAddr=127.0.0.3 NodeHostName=nohost2 
   RealMemory=16384 AllocMem=0 FreeMem=N/A Sockets=8 Boards=1
   State=UNKNOWN+NOT_RESPONDING ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Partitions=virt 
   BootTime=None SlurmdStartTime=None
   LastBusyTime=Unknown
   CfgTRES=cpu=8,mem=16G,billing=8
   AllocTRES=
   CapWatts=n/a
   CurrentWatts=0 AveWatts=0
   ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s

"""  # noqa: W291
# in no partition: no Partitions= line; no GPUs: Gres=(null)
V3_NO_PARTITION = """\
NodeName=v3 CoresPerSocket=1 
   CPUAlloc=0 CPUEfctv=4 CPUTot=4 CPULoad=N/A
   AvailableFeatures=(null)
   ActiveFeatures=(null)
   Gres=(null)
   NodeAddr=127.0.0.4 NodeHostName=nohost3 
   RealMemory=1000 AllocMem=0 FreeMem=N/A Sockets=4 Boards=1
   State=UNKNOWN+NOT_RESPONDING ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   BootTime=None SlurmdStartTime=None
   LastBusyTime=Unknown
   CfgTRES=cpu=4,mem=1000M,billing=4
   AllocTRES=
   CapWatts=n/a
   CurrentWatts=0 AveWatts=0
   ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s

"""  # noqa: W291
# the other words of State= seen: a node drained with a job on it, one set down, one failed
STATES = {
    "n2 drained": "State=MIXED+DRAIN",
    "n1 down": "State=DOWN",
    "n1 fail": "State=IDLE+FAIL",
    "n1 reserved": "State=IDLE+RESERVED",
    "n4 maint": "State=IDLE+MAINTENANCE+RESERVED",
}
PARTITION_GPU = """\
PartitionName=gpu
   AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL
   AllocNodes=ALL Default=YES QoS=N/A
   DefaultTime=NONE DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO
   MaxNodes=UNLIMITED MaxTime=UNLIMITED MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED
   Nodes=n[1-4]
   PriorityJobFactor=1 PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=NO
   OverTimeLimit=NONE PreemptMode=OFF
   State=UP TotalCPUs=32 TotalNodes=4 SelectTypeParameters=NONE
   JobDefaults=(null)
   DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED
   TRES=cpu=32,mem=62.50G,node=4,billing=32

"""
PARTITION_GPU_ONELINE = " ".join(x.strip() for x in PARTITION_GPU.splitlines() if x.strip()) + "\n"
PARTITION_VIRT = (
    PARTITION_GPU.replace("=gpu", "=virt")
    .replace("Default=YES", "Default=NO")
    .replace("Nodes=n[1-4]", "Nodes=v[1-2]")
    .replace("TotalCPUs=32 TotalNodes=4", "TotalCPUs=16 TotalNodes=2")
    .replace("TRES=cpu=32,mem=62.50G,node=4,billing=32", "TRES=cpu=16,mem=32384M,node=2,billing=16")
)
PARTITION_EMPTY = (
    PARTITION_GPU.replace("=gpu", "=empty")
    .replace("Default=YES", "Default=NO")
    .replace("MaxTime=UNLIMITED", "MaxTime=01:00:00")
    .replace("Nodes=n[1-4]", "Nodes=(null)")
    .replace("TotalCPUs=32 TotalNodes=4", "TotalCPUs=0 TotalNodes=0")
    .replace("TRES=cpu=32,mem=62.50G,node=4,billing=32", "TRES=(null)")
)
TOO_MANY = "too many arguments for keyword:show\n"  # `show node n1 n2`: stderr, exit 1
ERRORS = {
    ("node", "nosuch"): "Node nosuch not found\n",
    ("partition", "nosuch"): "Partition nosuch not found\n",
}  # on stdout (not stderr), exit status 1; `show node n1,nosuch`: n1, then the error, exit 1


def normalized(record: str, gpus: dict[str, int] | None = None) -> str:
    """One node's record as Slurm prints a node whose slurmd never answered, which is what
    gpufleet has: its ``Arch=``, ``Version=``, ``OS=`` line, ``Port=``, boot and busy times,
    load and free memory dropped or as Slurm prints them unknown
    (``CoresPerSocket=1 Sockets=CPUs``);
    ``NodeHostName=`` the node's name (gpufleet's nodes have one name); a ``Reason=``'s
    ``[user@time]`` dropped (gpufleet keeps neither). ``gpus``: the GPUs of each node's jobs,
    counted in its TRES as a Slurm with ``AccountingStorageTRES=gres/gpu`` counts them (this
    one could not: that takes slurmdbd), as ``scontrol show job``'s TRES in gpufleet."""
    out = []
    for line in record.splitlines(keepends=True):
        if line.lstrip().startswith("OS="):
            continue
        out.append(line)
    text = "".join(out)
    text = re.sub(r" Arch=\S+", "", text)
    cores = re.findall(r"CPUTot=(\d+)", text)
    text = re.sub(r"CoresPerSocket=\d+", "CoresPerSocket=1", text)
    for n in cores:
        text = re.sub(r"Sockets=\d+ Boards", f"Sockets={n} Boards", text, count=1)
    text = re.sub(r"CPULoad=\S+", "CPULoad=N/A", text)
    text = re.sub(r"FreeMem=\S+", "FreeMem=N/A", text)
    text = re.sub(r"(NodeHostName=)\S+( Port=\d+)?( Version=\S+)? ?", r"\1@ ", text)
    text = re.sub(r"NodeName=(\S+)(.*?)NodeHostName=@", r"NodeName=\1\2NodeHostName=\1", text,
                  flags=re.S)  # fmt: skip
    text = re.sub(r"BootTime=\S+ SlurmdStartTime=\S+", "BootTime=None SlurmdStartTime=None", text)
    text = re.sub(r"LastBusyTime=\S+", "LastBusyTime=Unknown", text)
    text = re.sub(r"(Reason=.*?) \[\S+@\S+\]", r"\1", text)
    for name, n in (gpus or {}).items():
        text = _gpus(text, name, n)
    return _cfg_gpus(text)


def _cfg_gpus(text: str) -> str:
    """CfgTRES and a partition's TRES with the GPUs of its Gres/nodes (``gres/gpu=4``)."""

    def node(m: re.Match[str]) -> str:
        gres = re.search(r"Gres=gpu:(?:\w+:)?(\d+)", m.group(0))
        if not gres:
            return m.group(0)
        return re.sub(r"(CfgTRES=\S+)", rf"\1,gres/gpu={gres.group(1)}", m.group(0))

    return re.sub(r"NodeName=.*?(?=\nNodeName=|\Z)", node, text, flags=re.S)


def _gpus(text: str, name: str, gpus: int) -> str:
    def add(m: re.Match[str]) -> str:
        return re.sub(r"(AllocTRES=\S+)", rf"\1,gres/gpu={gpus}", m.group(0))

    return re.sub(rf"NodeName={name} .*?(?=\nNodeName=|\Z)", add, text, flags=re.S)
