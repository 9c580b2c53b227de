"""squeue's state codes and time format, as squeue prints and reads them."""

from __future__ import annotations

import pytest

from gpufleet.cli.slurm_style import CODES, slurm_time, states


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
