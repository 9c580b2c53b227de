"""The fairness-against-entitlement figure (scheduler/entitlement.py) on small hand-made runs."""

from __future__ import annotations

import pytest

from gpufleet.scheduler.entitlement import Span, entitlement_fairness, water_fill

H = 3600.0


def test_water_fill_gives_a_small_queue_what_it_asks_and_splits_the_rest_by_weight() -> None:
    fair = water_fill(8, {"a": 1.0, "b": 10.0, "c": 10.0}, {"b": 1.0, "c": 3.0})
    assert fair == pytest.approx({"a": 1.0, "b": 7 / 4, "c": 21 / 4})
    assert water_fill(8, {"a": 2.0, "b": 3.0}, {}) == {"a": 2.0, "b": 3.0}


def test_each_queue_getting_its_entitlement_is_one() -> None:
    # two queues both asking for the whole 8-GPU cluster for an hour, each holding half
    spans = [
        Span("a", 8, 0.0, H, ((0.0, H),)),
        Span("a", 8, 0.0, 2 * H, ()),  # wants, never runs: demand beyond the share
        Span("b", 4, 0.0, H, ((0.0, H),)),
        Span("b", 8, 0.0, 2 * H, ()),
    ]
    # a holds 8, b 4 in a cluster of 12: entitled 6 each
    f = entitlement_fairness(spans, 12, {}, until=H)
    x_a, x_b = 8 / 6, 4 / 6
    assert f.windows == 1
    assert f.jain == pytest.approx((x_a + x_b) ** 2 / (2 * (x_a**2 + x_b**2)))
    assert f.ratio == pytest.approx({"a": x_a, "b": x_b})
    fair = [
        Span("a", 6, 0.0, H, ((0.0, H),)),
        Span("a", 6, 0.0, H, ()),
        Span("b", 6, 0.0, H, ((0.0, H),)),
        Span("b", 6, 0.0, H, ()),
    ]
    assert entitlement_fairness(fair, 12, {}, until=H).jain == pytest.approx(1.0)


def test_weights_set_the_entitlement_and_a_lone_queue_counts_no_window() -> None:
    spans = [
        Span("a", 9, 0.0, H, ((0.0, H),)),
        Span("a", 12, 0.0, H, ()),
        Span("b", 3, 0.0, H, ((0.0, H),)),
        Span("b", 12, 0.0, H, ()),
        Span("a", 1, H, 2 * H, ((H, 2 * H),)),  # the second hour: only a wants anything
    ]
    f = entitlement_fairness(spans, 12, {"a": 3.0, "b": 1.0}, until=2 * H)
    assert f.windows == 1
    assert f.jain == pytest.approx(1.0)
    assert f.ratio == pytest.approx({"a": 1.0, "b": 1.0})


def test_a_window_is_cut_by_time_not_by_job() -> None:
    # b's job runs the second half hour only: it got half its entitlement in that hour
    spans = [
        Span("a", 4, 0.0, H, ((0.0, H),)),
        Span("b", 4, 0.0, H, ((H / 2, H),)),
    ]
    f = entitlement_fairness(spans, 8, {}, until=H)
    assert f.ratio == pytest.approx({"a": 1.0, "b": 0.5})
    assert f.jain == pytest.approx(1.5**2 / (2 * 1.25))


def test_nothing_to_measure() -> None:
    assert entitlement_fairness([], 8, {}, until=H).jain is None
    assert entitlement_fairness([Span("a", 1, 0.0, H, ((0.0, H),))], 8, {}, until=0.0).windows == 0
