"""A Reason in the API: its estimated start as a number and as ISO 8601, and how sure it is."""

from __future__ import annotations

from gpufleet.model.reason import Reason, ReasonCode
from gpufleet.server.views import reason_out


def test_the_estimated_start_is_iso_8601_in_utc_with_its_bound() -> None:
    r = Reason(ReasonCode.RESOURCES, "…", {}, 1_796_280_000.4, "planned")
    out = reason_out(r)
    assert out is not None
    assert out.estimated_start == 1_796_280_000.4
    assert out.estimated_start_at == "2026-12-03T06:40:00Z"
    assert out.start_bound == "planned"


def test_no_estimate_is_null_in_both_forms() -> None:
    out = reason_out(Reason(ReasonCode.NEVER, "…"))
    assert out is not None
    assert out.estimated_start is None and out.estimated_start_at is None
    assert out.start_bound == ""
