"""The framework: plugins by name, profiles that fail at start-up, gangs all or nothing, and a
cycle that reads its snapshot without changing it."""

from __future__ import annotations

from random import Random
from types import SimpleNamespace

import pytest
from builders import cluster, cycle, job, node, running, snapshot, start_of

from gpufleet.model.reason import ReasonCode
from gpufleet.scheduler.cycle import run_cycle
from gpufleet.scheduler.framework import (
    ADMITTED,
    Admission,
    Code,
    Profile,
    ProfileError,
    available,
    make,
    registry,
)
from gpufleet.scheduler.request import WorkerRequest
from gpufleet.scheduler.usage import QueueUsage
from gpufleet.scheduler.workspace import ANYWHERE, Workspace

EXPECTED = {
    "order": {"fifo", "priority", "fairshare", "las", "sjf"},
    "admit": {"quota", "none"},
    "place": {"bestfit", "packing", "topology", "fgd", "random", "dotprod"},
    "backfill": {"easy", "none", "greedy"},
    "preempt": {"reclaim", "priority", "order", "defrag"},
}


def test_every_policy_of_the_issue_is_a_registered_plugin() -> None:
    for point, names in EXPECTED.items():
        assert names <= set(available(point)), point
    for full, mod in registry().items():
        assert full == mod.NAME and hasattr(mod, "Plugin")


def test_every_registered_plugin_has_the_members_of_its_points_protocol() -> None:
    """The cycle reads optional capabilities directly (no getattr): every plugin declares them
    (through its point's base), and each extension point's call answers a status."""
    for full in registry():
        point = full.split("/", 1)[0]
        make(point, full)  # refuses a plugin that lacks a member of its point's protocol


def test_a_plugin_that_lacks_a_member_of_its_point_fails_when_the_profile_is_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Bare:  # an admit plugin of a site's own that says nothing of admits_unlimited
        def admit(self, job: object, usage: object) -> Admission:
            return ADMITTED

    monkeypatch.setitem(registry(), "admit/bare", SimpleNamespace(NAME="admit/bare", Plugin=Bare))
    with pytest.raises(ProfileError, match="plugin admit/bare lacks members of AdmitPlugin"):
        Profile.build(admit="bare")


def test_each_extension_point_answers_a_status() -> None:
    """place: a Choice, backfill: a Status per job that would pass the blocked head, preempt:
    Victims, each UNSCHEDULABLE with nothing when it cannot help."""
    nodes = cluster(1, 8)
    snap = snapshot(nodes, running=[running("r", ("n00", range(8)), priority=0)])
    ws = Workspace(snap.nodes)
    req = WorkerRequest.of(job("p", gpus=2).spec)
    for name in available("place"):
        choice = make("place", name).choose(req, ws, ANYWHERE, Random(0))
        assert choice.status.code is Code.UNSCHEDULABLE and choice.node == -1, name
    free = Workspace(cluster(1, 8))
    choice = make("place", "bestfit").choose(req, free, ANYWHERE, Random(0))
    assert choice.status.ok and choice.node == 0 and choice.devices == (0, 1)
    head, later = job("head", gpus=16), job("later", gpus=1)
    assert make("backfill", "easy").backfill(later, head).ok
    held = make("backfill", "none").backfill(later, head)
    assert held.code is Code.UNSCHEDULABLE and held.reason is not None
    assert held.reason.code is ReasonCode.HELD and held.reason.data == {"blocked_by": "head"}
    usage = QueueUsage.of(snap)
    high, low = job("high", gpus=8, priority=1), job("low", gpus=8, priority=0)
    prio, order = make("preempt", "priority"), make("order", "priority")
    found = prio.victims(high, ADMITTED, snap, usage, order)
    assert found.status.ok and [v.id for v in found.jobs] == ["r"]
    none = prio.victims(low, ADMITTED, snap, usage, order)
    assert none.status.code is Code.UNSCHEDULABLE and list(none.jobs) == []


def test_an_unknown_plugin_name_fails_when_the_profile_is_built() -> None:
    with pytest.raises(
        ProfileError, match=r"unknown place plugin 'place/bestfir' \(available: bestfit, "
    ):
        Profile.build(place="bestfir")
    with pytest.raises(ProfileError, match="unknown preempt plugin 'preempt/nice'"):
        Profile.build(preempt=("priority", "nice"))
    with pytest.raises(ProfileError, match="unknown order plugin 'place/bestfit'"):
        make("order", "place/bestfit")  # a plugin of another point


def test_bad_or_stray_options_fail_when_the_profile_is_built() -> None:
    with pytest.raises(ProfileError, match="bad options"):
        Profile.build(order="fairshare", options={"order/fairshare": {"halflife": 3}})
    with pytest.raises(ProfileError, match="not in the profile: order/las"):
        Profile.build(order="fifo", options={"order/las": {"thresholds_gpu_s": [1.0]}})
    p = Profile.build(order="fairshare", options={"order/fairshare": {"half_life_s": 60.0}})
    assert p.order.half_life_s == 60.0  # type: ignore[attr-defined]


def test_describe_names_the_plugins() -> None:
    p = Profile.build(order="las", place="topology", preempt=("reclaim", "priority"))
    assert p.describe() == (
        "order=las admit=quota place=topology backfill=easy preempt=reclaim,priority"
    )
    assert Profile.build().describe().endswith("preempt=none")


def test_a_gang_is_all_or_nothing_and_a_failed_try_leaves_nothing_behind() -> None:
    """3 × 8 does not fit two free nodes; nothing of it is held, so the 8-GPU job behind it
    still gets a node (greedy, so that no reservation fences it)."""
    nodes = cluster(3, 8)
    busy = [running("r", ("n02", range(8)))]
    pending = [job("gang", gpus=8, workers=3), job("one", gpus=8, submit=1)]
    res = cycle(nodes, pending, busy, backfill="greedy")
    assert start_of(res, "gang") is None
    assert [p.node for p in start_of(res, "one")] == ["n00"]


def test_a_gang_spreads_over_nodes_with_one_placement_per_worker() -> None:
    res = cycle(cluster(4, 8), [job("g", gpus=8, workers=4)])
    alloc = start_of(res, "g")
    assert alloc is not None and len(alloc) == 4
    assert sorted(p.node for p in alloc) == ["n00", "n01", "n02", "n03"]


def test_cpu_only_jobs_need_no_gpu() -> None:
    nodes = [node("gpu0"), node("cpu0", gpus=0, cpus=64)]
    busy = [running("r", ("gpu0", range(8)))]
    res = cycle(nodes, [job("etl", gpus=0, cpus=32)], busy)
    (p,) = start_of(res, "etl")
    assert p.gpus == () and p.cpu_milli == 32_000


def test_the_cycle_does_not_change_its_snapshot() -> None:
    nodes = cluster(4, 8, leaves=2)
    busy = [running("r", ("n00", range(4)), limit=10.0)]
    pending = [job(f"j{i}", gpus=1 + i, workers=1 + i % 3, submit=i) for i in range(8)]
    snap = snapshot(nodes, pending, busy)
    before = (tuple(snap.nodes), tuple(snap.running), tuple(snap.pending), dict(snap.queues))
    profile = Profile.build(place="topology", preempt=("priority",))
    run_cycle(snap, profile)
    assert (tuple(snap.nodes), tuple(snap.running), tuple(snap.pending), dict(snap.queues)) == (
        before
    )


def test_an_empty_snapshot() -> None:
    res = cycle([])
    assert res.starts == [] and res.reasons == {} and res.reservation is None
    res = cycle([], [job("j")])
    assert res.reasons["j"].code.value == "NeverSchedulable"
