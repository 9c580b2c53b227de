"""Known failure signatures in a job's logs, each with its likely cause and what to change: the
seeds' "任务失败: 显存不足、依赖缺失 → 查看日志，核对镜像与配额" row, made precise.

``match(text)`` returns a finding per signature that occurs, most specific first, with the line
that gave it away; generic ones (any NCCL error, any Python traceback) only when nothing more
specific explains the failure."""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpufleet.ops.doctor.finding import Finding, Severity

_F = re.MULTILINE


@dataclass(frozen=True, slots=True)
class Signature:
    code: str
    check: str
    pattern: re.Pattern[str]
    cause: str
    next_step: str
    severity: Severity = Severity.ERROR
    generic: bool = False  # reported only when no specific signature matched
    family: str = ""  # a generic signature is hidden by a specific one of its family


def _sig(
    code: str, check: str, pattern: str, cause: str, next_step: str, **kw: object
) -> Signature:
    return Signature(code, check, re.compile(pattern, _F | re.IGNORECASE), cause, next_step, **kw)  # type: ignore[arg-type]


SIGNATURES: tuple[Signature, ...] = (
    _sig(
        "cuda_oom",
        "CUDA out of memory",
        r"CUDA out of memory|OutOfMemoryError|CUDA_ERROR_OUT_OF_MEMORY|cudaErrorMemoryAllocation"
        r"|CUBLAS_STATUS_ALLOC_FAILED",
        "the model, activations and optimizer state need more GPU memory than the GPU has{detail}",
        "lower the per-GPU batch size (keep the global batch with gradient accumulation), use "
        "bf16 mixed precision and activation checkpointing, shard with FSDP/ZeRO, or ask for "
        "GPUs with more memory (gpu_models: [H200]); PYTORCH_CUDA_ALLOC_CONF="
        "expandable_segments:True helps when the memory is fragmented",
    ),
    _sig(
        "nccl_timeout",
        "NCCL timeout",
        r"Watchdog caught collective operation timeout|collective operation timeout"
        r"|NCCL.{0,120}(?:timed out|timeout)|ProcessGroupNCCL.{0,160}Timeout",
        "a collective waited past its timeout: one rank stopped taking part (it crashed, hung, "
        "or is far slower), or the network between the nodes dropped",
        "find the rank that failed first (gpufleet logs JOB --rank N --stderr) and fix that; "
        "rerun with NCCL_DEBUG=INFO; check the links (gpufleet validate --layers network) and "
        "raise the process-group timeout only if a step is legitimately that long",
        family="nccl",
    ),
    _sig(
        "nccl_system_error",
        "NCCL unhandled system error",
        r"unhandled system error|ncclSystemError",
        "a system call inside NCCL failed: usually the wrong network interface, RDMA devices "
        "missing in the job's environment, too little /dev/shm, or a low memlock limit",
        "rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET; set NCCL_SOCKET_IFNAME to the "
        "fabric interface; check /dev/infiniband, the /dev/shm size and ulimit -l (unlimited)",
        family="nccl",
    ),
    _sig(
        "nccl_connection",
        "NCCL connection refused",
        r"ncclRemoteError|remote process exited or there was a network error"
        r"|NCCL.{0,200}Connection (?:refused|reset)|socketStartConnect|NET/Socket.{0,100}refused",
        "a peer could not be reached or its process died: a firewall between the nodes, NCCL "
        "picked an interface the other node cannot reach, or the peer rank crashed first",
        "check that every rank started and which one exited first; open the ports between the "
        "nodes; set NCCL_SOCKET_IFNAME (and NCCL_IB_HCA) to the fabric; gpufleet doctor node N",
        family="nccl",
    ),
    _sig(
        "rendezvous",
        "rendezvous with rank 0",
        r"DistNetworkError|DistStoreError|The client socket has (?:timed out|failed to connect)"
        r"|RendezvousTimeoutError|RendezvousConnectionError",
        "a rank could not reach rank 0's store at MASTER_ADDR:MASTER_PORT: rank 0 died early, "
        "its port is blocked, or MASTER_ADDR is an address other nodes cannot reach",
        "read rank 0's log first; check that the nodes reach each other on the MASTER_PORT "
        "range (29500-31499); use the default env:// init with gpufleet's MASTER_ADDR",
    ),
    _sig(
        "missing_module",
        "missing Python module",
        r"ModuleNotFoundError: No module named '(?P<module>[^']+)'"
        r"|ImportError: No module named (?P<module2>\S+)",
        "the job's Python environment has no module '{module}'",
        "install it where the job runs (pip install {package} in the job's environment, or add "
        "it to the image); make 'command' use the interpreter that has it; make sure every "
        "node has the same environment",
    ),
    _sig(
        "import_name",
        "import of a name",
        r"ImportError: cannot import name '(?P<name>[^']+)'",
        "a package is installed in a version without '{name}' (version skew between what the "
        "code expects and the environment)",
        "pin the versions the code was written for (requirements.txt / the image) and install "
        "them on every node",
    ),
    _sig(
        "shared_library",
        "missing shared library",
        r"(?P<lib>lib[\w.+-]+\.so[\w.]*): cannot open shared object file",
        "{lib} is not installed or not on the library path of the job",
        "install the package that provides {lib} (the CUDA or NCCL runtime?) or add its "
        "directory to LD_LIBRARY_PATH in the job's env",
    ),
    _sig(
        "cuda_driver",
        "CUDA and the driver",
        r"CUDA driver version is insufficient|no CUDA-capable device is detected"
        r"|Found no NVIDIA driver|NVIDIA driver on your system is too old|cudaErrorNoDevice"
        r"|cudaErrorInsufficientDriver|CUDA initialization: .{0,200}",
        "CUDA could not use the GPUs: no driver in the job's environment, no device visible to "
        "it, or a CUDA runtime newer than the driver supports",
        "gpufleet doctor node N for the node's driver; match the CUDA runtime (torch+cuNNN) to "
        "the driver's CUDA version (nvidia-smi), or upgrade the driver",
    ),
    _sig(
        "gpu_hardware",
        "GPU hardware error",
        r"uncorrectable ECC error encountered|GPU is lost|fallen off the bus"
        r"|Xid.{0,20}(?:79|48|94|95)",
        "the GPU failed under the job (an uncorrectable ECC error or the GPU fell off the bus)",
        "drain the node (gpufleet drain N -r 'GPU fault') and resubmit; gpufleet doctor node N",
    ),
    _sig(
        "cuda_kernel_fault",
        "CUDA kernel fault",
        r"an illegal memory access was encountered|device-side assert triggered"
        r"|unspecified launch failure",
        "a CUDA kernel of the program faulted (an out-of-range index, a bad custom kernel, or a "
        "library bug); after it the CUDA context is unusable",
        "rerun with CUDA_LAUNCH_BLOCKING=1 to see the failing operation; check label ranges "
        "and index tensors; if it moves between runs and nodes, suspect the hardware",
    ),
    _sig(
        "host_oom",
        "host memory",
        r"Out of memory: Killed process|oom-kill|\bMemoryError\b|Cannot allocate memory"
        r"|std::bad_alloc",
        "the processes ran out of host memory",
        "ask for more memory (memory_gib), use fewer data-loader workers or smaller prefetch, "
        "and avoid loading the whole dataset into RAM",
    ),
    _sig(
        "disk_full",
        "disk space",
        r"No space left on device|Disk quota exceeded",
        "a file system the job writes to is full (or over quota)",
        "free space or write checkpoints and logs to the shared storage with room; keep fewer "
        "checkpoints",
    ),
    _sig(
        "not_executable",
        "the command",
        r"gpufleet-agent: cannot start '(?P<prog>[^']+)': (?P<err>.+)|: command not found$",
        "the job's command could not be started on the node{detail}",
        "use an absolute path to a program that exists on every node (or the right "
        "interpreter), and check it is executable",
    ),
    _sig(
        "nccl_error",
        "NCCL error",
        r"ncclInternalError|ncclInvalidUsage|ncclUnhandledCudaError|NCCL error",
        "NCCL failed",
        "rerun with NCCL_DEBUG=INFO and read the first NCCL WARN line of the failing rank",
        generic=True,
        family="nccl",
    ),
    _sig(
        "python_exception",
        "Python exception",
        r"^Traceback \(most recent call last\):",
        "the program raised {exc}",
        "read the traceback (gpufleet logs JOB --rank N --stderr) and fix the program or its input",
        generic=True,
    ),
)

_EXC = re.compile(r"^(?P<exc>[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning)\b.*)$", _F)
_OOM_DETAIL = re.compile(r"Tried to allocate (?P<want>[\d.]+ [KMGT]iB)")
_OOM_TOTAL = re.compile(r"(?P<total>[\d.]+ [KMGT]iB) total capacity")


def _line(text: str, start: int, end: int) -> str:
    a = text.rfind("\n", 0, start) + 1
    b = text.find("\n", end)
    return text[a : b if b >= 0 else len(text)].strip()[:300]


def _values(sig: Signature, m: re.Match[str], text: str) -> dict[str, str]:
    g = {k: v for k, v in m.groupdict().items() if v}
    v = {"detail": ""}
    if sig.code == "missing_module":
        module = g.get("module") or g.get("module2", "?")
        v["module"] = module
        v["package"] = module.split(".")[0]
    elif sig.code == "cuda_oom":
        want, total = _OOM_DETAIL.search(text), _OOM_TOTAL.search(text)
        if want:
            v["detail"] = f" (it tried to allocate {want.group('want')}"
            v["detail"] += f" of {total.group('total')})" if total else ")"
    elif sig.code == "not_executable" and g.get("prog"):
        v["detail"] = f": {g['prog']}: {g.get('err', '')}"
    elif sig.code == "python_exception":
        last = list(_EXC.finditer(text, m.end()))
        v["exc"] = last[-1].group("exc")[:200] if last else "an exception"
    return {**g, **v}


def match(text: str, *, target: str = "") -> list[Finding]:
    """Every signature found in ``text`` (a rank's stdout and stderr), specific ones first."""
    found: list[tuple[Signature, Finding]] = []
    for sig in SIGNATURES:
        m = sig.pattern.search(text)
        if m is None:
            continue
        if sig.generic and any(
            not s.generic and (not sig.family or s.family == sig.family) for s, _ in found
        ):
            continue
        v = _values(sig, m, text)
        seen = _line(text, m.start(), m.end())
        if sig.code == "python_exception":
            seen = v["exc"]
        found.append(
            (
                sig,
                Finding(
                    sig.check,
                    seen,
                    sig.cause.format_map(_Default(v)),
                    sig.next_step.format_map(_Default(v)),
                    sig.severity,
                    target,
                    sig.code,
                ),
            )
        )
    return [f for _, f in found]


class _Default(dict[str, str]):
    def __missing__(self, key: str) -> str:
        return "?"
