"""Each failure signature on the log text real programs print, and ``doctor job``'s analysis of
job states, events and exit statuses."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.api.schemas import EventOut, JobOut, ReasonOut
from gpufleet.ops.doctor.finding import Severity
from gpufleet.ops.doctor.job import analyse
from gpufleet.ops.doctor.signatures import SIGNATURES, match

TRACEBACK = 'Traceback (most recent call last):\n  File "train.py", line 3, in <module>\n'

SAMPLES: dict[str, str] = {
    "cuda_oom": TRACEBACK
    + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
    "total capacity of 79.19 GiB of which 1.06 GiB is free. 78.13 GiB total capacity",
    "nccl_timeout": "[rank3]:[E ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum=1207, OpType=ALLREDUCE, NumelIn=262144) ran for "
    "600030 milliseconds before timing out.",
    "nccl_system_error": "torch.distributed.DistBackendError: NCCL error in: "
    "../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error (run "
    "with NCCL_DEBUG=INFO for details), NCCL version 2.20.5",
    "nccl_connection": "node-1:1234:1300 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: "
    "Connect to 10.0.0.2<43615> failed : Connection refused",
    "rendezvous": "torch.distributed.DistNetworkError: The client socket has failed to connect "
    "to [node-0]:29500 (errno: 111 - Connection refused).",
    "missing_module": TRACEBACK + "ModuleNotFoundError: No module named 'transformers.models'",
    "import_name": TRACEBACK + "ImportError: cannot import name 'LlamaForCausalLM' from "
    "'transformers'",
    "shared_library": "python: error while loading shared libraries: libcudart.so.12: cannot "
    "open shared object file: No such file or directory",
    "cuda_driver": "RuntimeError: The NVIDIA driver on your system is too old (found version "
    "11040).",
    "gpu_hardware": "RuntimeError: CUDA error: uncorrectable ECC error encountered",
    "cuda_kernel_fault": "RuntimeError: CUDA error: an illegal memory access was encountered",
    "host_oom": TRACEBACK + "MemoryError",
    "disk_full": "OSError: [Errno 28] No space left on device: '/ckpt/step_1000.pt'",
    "not_executable": "gpufleet-agent: cannot start 'trian.py': No such file or directory",
    "nccl_error": "RuntimeError: NCCL error: ncclInternalError: Internal check failed.",
    "python_exception": TRACEBACK + "  raise ValueError('bad label 7')\nValueError: bad label 7",
}


def test_every_signature_has_a_sample() -> None:
    assert {s.code for s in SIGNATURES} == set(SAMPLES)


@pytest.mark.parametrize("code", sorted(SAMPLES))
def test_each_signature_is_recognized_first(code: str) -> None:
    found = match(SAMPLES[code], target="7 rank 0")
    assert found, f"nothing matched the {code} sample"
    f = found[0]
    assert f.code == code
    assert f.check and f.seen and f.cause and f.next_step and f.target == "7 rank 0"
    assert "{" not in f.cause + f.next_step  # every placeholder was filled


def test_details_are_taken_from_the_log() -> None:
    (oom,) = match(SAMPLES["cuda_oom"])
    assert "2.00 GiB of 78.13 GiB" in oom.cause and "batch size" in oom.next_step
    (mod,) = match(SAMPLES["missing_module"])
    assert "'transformers.models'" in mod.cause and "pip install transformers" in mod.next_step
    (lib,) = match(SAMPLES["shared_library"])
    assert "libcudart.so.12" in lib.cause
    (exc,) = match(SAMPLES["python_exception"])
    assert exc.seen == "ValueError: bad label 7"


def test_generic_signatures_give_way_to_specific_ones() -> None:
    codes = [f.code for f in match(SAMPLES["nccl_system_error"] + "\nncclInternalError")]
    assert codes == ["nccl_system_error"]  # not also the generic NCCL error
    assert [f.code for f in match(SAMPLES["missing_module"])] == ["missing_module"]
    assert match("all good\nstep 10 loss 0.1") == []


def job(state: str, **kw: Any) -> JobOut:
    base: dict[str, Any] = {
        "id": "42",
        "name": "train",
        "user": "ana",
        "queue": "default",
        "state": state,
        "attempt": 1,
        "retries_used": 0,
        "submit_time": 0.0,
        "start_time": 1.0,
        "gpus": 8.0,
        "workers": 2,
        "spec": {"time_limit_s": 3600, "memory_mib": 16384},
        "events": [],
    }
    base.update(kw)
    return JobOut.model_validate(base)


def ev(state: str, why: str = "", attempt: int = 1) -> EventOut:
    return EventOut(time=1.0, attempt=attempt, state=state, why=why)


def test_missing_module_on_one_rank_is_the_finding() -> None:
    j = job("FAILED", events=[ev("RUNNING"), ev("FAILED", "exited with code 1")])
    logs = {0: ("", "gang member failed"), 1: ("", SAMPLES["missing_module"])}
    (f,) = [f for f in analyse(j, logs) if f.severity is Severity.ERROR]
    assert f.code == "missing_module" and f.target == "job 42 rank 1"


def test_the_same_signature_on_several_ranks_is_one_finding() -> None:
    j = job("FAILED", events=[ev("FAILED", "exited with code 1")])
    logs = {0: ("", SAMPLES["nccl_timeout"]), 1: ("", SAMPLES["nccl_timeout"])}
    found = [f for f in analyse(j, logs) if f.code == "nccl_timeout"]
    assert len(found) == 1 and found[0].target == "job 42 ranks 0, 1"


def test_time_limit() -> None:
    j = job("TIMED_OUT", events=[ev("RUNNING"), ev("TIMED_OUT", "time limit 3600 s reached")])
    (f,) = analyse(j, {0: ("epoch 3", ""), 1: ("", "")})
    assert f.code == "time_limit" and "3600 s" in f.cause and "time_limit_s" in f.next_step


def test_sigkill_without_a_reason_points_at_the_oom_killer() -> None:
    j = job("FAILED", events=[ev("RUNNING"), ev("FAILED", "killed by SIGKILL")])
    (f,) = [f for f in analyse(j, {0: ("", ""), 1: ("", "")}) if f.severity is Severity.ERROR]
    assert f.code == "oom_killer" and "16 GiB" in f.cause and "memory_gib" in f.next_step
    j = job("FAILED", events=[ev("FAILED", "exited with code 137")])
    assert any(f.code == "oom_killer" for f in analyse(j, {}))


def test_a_lost_node_and_a_pending_reason() -> None:
    j = job(
        "PENDING",
        events=[
            ev("RUNNING"),
            ev("NODE_LOST", "node node-3 lost: no heartbeat for 12 s"),
            ev("PENDING"),
        ],
        reason=ReasonOut(code="Resources", message="needs 2 nodes × 8 GPUs; 1 free"),
    )
    found = {f.code: f for f in analyse(j, {})}
    assert "gpufleet doctor node node-3" in found["node_lost"].next_step
    assert found["pending"].seen.startswith("Resources:")
    never = job("PENDING", reason=ReasonOut(code="NeverSchedulable", message="64 GPUs per worker"))
    assert analyse(never, {})[0].severity is Severity.ERROR


def test_a_moving_gang_and_a_warned_idle_job_say_so() -> None:
    moving = job(
        "PENDING",
        reason=ReasonOut(
            code="Defragmenting", message="moving 2 jobs to free 2 nodes under leaf-1"
        ),
    )
    (f,) = [f for f in analyse(moving, {}) if f.code == "pending"]
    assert f.seen.startswith("Defragmenting: moving 2 jobs") and "moved off one leaf" in f.next_step
    idle = job("RUNNING", reason=ReasonOut(code="IdleGpus", message="warning 1: GPUs idle"))
    (g,) = [f for f in analyse(idle, {}) if f.code == "idle_gpus"]
    assert g.severity is Severity.WARNING and "idle_exempt_s" in g.next_step


def test_a_failure_without_a_signature_says_where_to_look() -> None:
    j = job("FAILED", events=[ev("FAILED", "exited with code 3")])
    (f,) = analyse(j, {0: ("", "something odd happened\n"), 1: ("", "")})
    assert f.code == "unknown" and "something odd happened" in f.seen


def test_a_refused_launch_is_said_once_as_the_cause_not_as_an_unknown_failure() -> None:
    """A job whose user has no account on the node (issue 23): the agent's refusal is the cause
    and its fix the next step; no "no known failure signature" after it."""
    why = (
        "refused: user 'ana' has no Unix account on this node; create it (useradd ana) or "
        "start the controller with --fallback-account ACCOUNT"
    )
    j = job("FAILED", workers=1, events=[ev("FAILED", why)])
    (f,) = analyse(j, {0: ("", why + "\n")})
    assert f.code == "launch_refused" and f.severity is Severity.ERROR
    assert (
        f.cause == "the node's agent refused to start the task: user 'ana' has no Unix "
        "account on this node"
    )
    assert f.next_step.startswith("create it (useradd ana)")
    assert "no known failure signature" not in f"{f.seen} {f.cause} {f.next_step}"
