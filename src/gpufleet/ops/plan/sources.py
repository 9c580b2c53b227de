"""Where the planner's rules of thumb come from, cited by what they say: a warning's reason
names the guideline it applies (``PlanWarning.reason``), so an operator can look it up rather
than take "a rule" on trust. The guides are the GPU-cluster deployment articles this project
was specified from (in Chinese; quoted, with what they say in English)."""

from __future__ import annotations

# the guides, by title
DEPLOYMENT = "《深度学习GPU集群部署全流程解析》 (a deep-learning GPU-cluster deployment guide)"
SERVER_CLUSTER = "《GPU服务器机群：构建高性能计算核心基础设施》 (a GPU server-cluster guide)"

HOST_MEMORY = (
    f"source: {DEPLOYMENT}, hardware selection: host memory 512 GB-1 TB DDR5 ECC, "
    "“确保与GPU显存总量匹配”, matched to the GPUs' total memory"
)
GPU_UNDER_60C = (
    f"source: {SERVER_CLUSTER}, cooling: liquid or efficient air cooling, "
    "“确保GPU运行温度控制在60℃以下”, GPUs kept under 60 °C"
)
NETWORK_REDUNDANCY = (
    f"source: {DEPLOYMENT}, cabling: redundant network devices, "
    "“确保单点故障不会影响整个集群的运行”, no single point of failure stops the cluster"
)
NODE_DISKS = (
    f"source: {DEPLOYMENT}, hardware selection: system disks 2 × 480 GB NVMe, cache disks "
    "4 × 3.84 TB NVMe U.2"
)
NODE_CPUS = (
    f"source: {DEPLOYMENT}, hardware selection: dual Intel Xeon Platinum 8480+ or AMD EPYC "
    "9654, 32 cores or more"
)
