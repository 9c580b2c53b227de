"""The step's commit leaves out what the turn's intake stored already: a job whose only
transition in the step is its "submitted" one (issue 27: one fsync a turn under a burst of
submissions, not two). A job that moved on in the same step is written whole."""

from __future__ import annotations

from gpufleet.core.commands import Transition
from gpufleet.model.job import JobState as S
from gpufleet.server.journal import _not_stored_yet


def test_only_submitted_jobs_need_no_second_write() -> None:
    fresh = Transition("1", 0, None, S.PENDING, 10.0, "submitted")
    cancelled = [
        Transition("2", 0, None, S.PENDING, 10.0, "submitted"),
        Transition("2", 0, S.PENDING, S.CANCELLED, 10.0, "dependency failed"),
    ]
    started = Transition("3", 1, S.PENDING, S.STARTING, 10.0, "placed")
    assert _not_stored_yet([fresh, *cancelled, started]) == [*cancelled, started]
    assert _not_stored_yet([fresh]) == []
