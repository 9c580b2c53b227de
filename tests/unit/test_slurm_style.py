"""squeue's state codes and time format, as squeue prints and reads them."""

from __future__ import annotations

import pytest

from gpufleet.io.slurm_style import CODES, slurm_time, states


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
