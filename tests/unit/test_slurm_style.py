"""squeue's state codes and time format, as squeue prints and reads them."""

from __future__ import annotations

import pytest

from gpufleet.client.lean import Row
from gpufleet.io.slurm_style import (
    CODES,
    one_line_arrays,
    render,
    slurm_order,
    slurm_time,
    states,
)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0:00"), (65, "1:05"), (3725, "1:02:05"), (90061, "1-01:01:01"), (None, "UNLIMITED")],
)
def test_times_as_squeue_prints_them(seconds: float | None, text: str) -> None:
    assert slurm_time(seconds) == text


def test_states_by_code_or_name_any_case_and_all() -> None:
    assert states("pd,R") == {"PENDING", "RUNNING"}
    assert states("COMPLETED,timeout,nf,PR,CA,F,CF") == {
        "SUCCEEDED",
        "TIMED_OUT",
        "NODE_LOST",
        "PREEMPTED",
        "CANCELLED",
        "FAILED",
        "STARTING",
    }
    assert states("all") is None
    assert set(CODES) == {
        "PENDING", "STARTING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT",
        "PREEMPTED", "NODE_LOST",
    }  # fmt: skip


def test_an_unknown_state_is_named_with_what_is_known() -> None:
    with pytest.raises(ValueError, match="invalid job state 'WAITING, X': one of PD/PENDING"):
        states("waiting,R,x")


def test_reservation_reasons_in_slurms_words() -> None:
    from gpufleet.io.slurm_style import slurm_reason
    from gpufleet.model.reason import ReasonCode

    assert slurm_reason(ReasonCode.RESV_MAINT) == "ReqNodeNotAvail, Reserved for maintenance"
    assert slurm_reason(ReasonCode.RESV_WAIT) == "Reservation"
    assert slurm_reason(ReasonCode.RESOURCES) == "Resources"  # the others as they are


def test_sinfo_shows_nodes_in_an_open_window_as_slurm_does() -> None:
    from gpufleet.shims.sinfo import STATES, state

    node = {"state": "mixed", "reservation": "maint", "maint": True}
    assert state(node) == "maint" and STATES["maint"][0] == "maint"
    assert state({**node, "maint": False}) == "mixed"  # in use: its own state
    assert state({**node, "maint": False, "state": "idle"}) == "reserved"
    assert STATES["reserved"][0] == "resv"
    assert state({**node, "state": "drained"}) == "drained"  # a drain says more
    assert state({"state": "idle", "reservation": ""}) == "idle"


def _job(jid: str, state: str, *, array: str | None = None, index: int | None = None,
         queue: str = "gpu", priority: int = 0) -> Row:  # fmt: skip
    return Row(id=jid, name=f"arr_{index}" if index else "job", user="u", queue=queue,
               state=state, submit_time=0.0, start_time=None, end_time=None, gpus=1.0,
               workers=1, spec=Row(priority=priority), placement=[], reason=None,
               array_id=array, array_index=index)  # fmt: skip


def test_an_arrays_pending_tasks_are_one_line_unless_r() -> None:
    """As Slurm 22.05's squeue: ``6_[2-3,5]`` where the first of them is, ``6_1`` for one
    that runs, the array's name (gpufleet names each task NAME_N), %A the array's id."""
    tasks = [_job(str(5 + i), "PENDING", array="6", index=i) for i in (2, 3, 5)]
    rows = [_job("6", "RUNNING", array="6", index=1), _job("9", "PENDING"), *tasks]
    lines = one_line_arrays(rows)
    assert render("%i|%A|%j|%K", lines, header=False, now=0.0) == (
        "6_1|6|arr|1\n9|9|job|N/A\n6_[2-3,5]|6|arr|2-3,5\n"
    )
    assert render("%i|%A", rows[2:3], header=False, now=0.0) == "6_2|7\n"  # alone: its own


def test_squeues_order_is_partition_state_name_then_priority() -> None:
    """``-S P,t,-p``: CANCELLED < COMPLETED < FAILED < PENDING < RUNNING < TIMEOUT (the names),
    the higher priority first, then the one submitted first."""
    rows = [
        _job("1", "TIMED_OUT"), _job("2", "RUNNING"), _job("3", "PENDING"),
        _job("4", "PENDING", priority=5), _job("5", "SUCCEEDED"), _job("6", "CANCELLED"),
        _job("7", "FAILED"), _job("10", "PENDING"), _job("8", "RUNNING", queue="a"),
    ]  # fmt: skip
    assert [j.id for j in slurm_order(rows)] == ["8", "6", "5", "7", "4", "3", "10", "2", "1"]


def test_trailing_blanks_are_kept_as_squeue_prints_them() -> None:
    # squeue -O pads its last field too
    assert render("%6i%6T", [_job("1", "PENDING")], header=True, now=0.0) == (
        "JOBID STATE \n1     PENDIN\n"
    )


def test_squeue_j_of_an_arrays_id_or_one_task_as_slurm() -> None:
    """``-j 6``: every task of the array; ``-j 6_2``: that task; the ids of none named."""
    from gpufleet.io.squeue_command import asked

    rows = [_job("6", "RUNNING", array="6", index=1), _job("7", "PENDING", array="6", index=2),
            _job("9", "PENDING")]  # fmt: skip
    assert [j.id for j in asked(rows, ["6"])[0]] == ["6", "7"]
    assert [j.id for j in asked(rows, ["6_2", "9"])[0]] == ["7", "9"]
    assert asked(rows, ["9_1", "7", "99"]) == ([rows[1]], ["9_1", "99"])
