"""``place/fgd-strand`` through the state index (``scheduler/state_index.py``) chooses what scoring
every feasible node chooses: the same node and devices, through assignments, releases, copies,
holds, fences, filters, datasets and leaf and pod domains."""

from __future__ import annotations

from dataclasses import replace
from random import Random

from builders import node
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.model.resources import MILLI
from gpufleet.scheduler.cycle import run_cycle
from gpufleet.scheduler.plugins.place_fgd_strand import Plugin
from gpufleet.scheduler.request import Select, WorkerRequest
from gpufleet.scheduler.state_index import StateIndex
from gpufleet.scheduler.workspace import ANYWHERE, Domain, Workspace
from gpufleet.sim import placement_bench as pb

GIB = 1024
REQS = st.builds(
    WorkerRequest,
    st.sampled_from((1, 1, 2, 4, 8)),
    st.sampled_from((MILLI, MILLI, 500, 250)),
    st.sampled_from((2000, 8000, 12_000, 40_000)),
    st.sampled_from((8 * GIB, 64 * GIB)),
    st.sampled_from(((), (), ("A100",))),
    st.sampled_from(("", "", "imagenet")),
    st.sampled_from((None, None, Select(exclusive=True), Select(exclude=("n01",)))),
)


def fix(req: WorkerRequest) -> WorkerRequest:
    """A fraction is one device."""
    return req if req.whole else replace(req, gpus=1)


def same_index(idx: StateIndex, ws: Workspace) -> None:
    fresh = StateIndex(ws)
    assert {k: set(b) for k, b in idx.nodes.items()} == {k: set(b) for k, b in fresh.nodes.items()}
    assert {k: set(b) for k, b in idx.leaf_nodes.items()} == {
        k: set(b) for k, b in fresh.leaf_nodes.items()
    }
    for key, b in idx.nodes.items():
        assert idx.low(key) == min(b)
    # one key object per state (what keeps the garbage collector's count low)
    assert idx.canon.keys() == idx.nodes.keys()
    for k in idx.key_of:
        assert k is None or k is idx.canon[k]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(REQS, min_size=1, max_size=40), st.integers(0, 10_000))
def test_the_index_chooses_as_the_scan(reqs: list[WorkerRequest], seed: int) -> None:
    rng = Random(seed)
    views = [
        node(
            f"n{i:02d}",
            rng.choice((2, 4, 8)),
            model=rng.choice(("H100", "A100")),
            leaf=f"leaf-{rng.randrange(3)}",
            pod=f"pod-{rng.randrange(2)}",
            cpus=rng.choice((64, 112)),
            datasets=("imagenet",) if rng.random() < 0.3 else (),
        )
        for i in range(12)
    ]
    ws = Workspace(views)
    plugin = Plugin()
    placed = []
    for req in map(fix, reqs):
        what = rng.random()
        if what < 0.1 and placed:
            i, p = placed.pop(rng.randrange(len(placed)))
            ws.release(i, p)
        elif what < 0.15:
            ws = ws.copy()
        elif what < 0.2:
            ws.hold(rng.randrange(ws.n))
        ws.fence = rng.random() < 0.3
        ws.reserved = {rng.randrange(ws.n): 2} if ws.fence else {}
        domain = rng.choice(
            (
                ANYWHERE,
                ANYWHERE,
                Domain("leaf", rng.randrange(len(ws.leaf_names))),
                Domain("pod", rng.randrange(len(ws.pod_names))),
            )
        )
        got = plugin.choose(req, ws, domain, rng)
        want = plugin._scan(req, ws, domain)
        assert got == want
        same_index(plugin._index(ws), ws)
        if got.node >= 0:
            placed.append((got.node, ws.assign(got.node, got.devices, req)))


def test_a_cycle_places_as_the_scan_does() -> None:
    """The benchmark's cycle (fairshare, EASY backfill, gangs in leaves and pods): the same
    starts and reservation with the index as with a scan of every node."""

    class Scan(Plugin):
        def choose(self, req, ws, domain, rng):  # type: ignore[no-untyped-def]
            if self.scorer is None:
                return super().choose(req, ws, domain, rng)
            return self._scan(req, ws, domain)

    for busy, seed in ((0.0, 0), (0.5, 1), (0.7, 3)):
        w = pb.build(nodes=60, jobs=150, gangs=30, leaves=4, busy=busy, seed=seed)
        runs = []
        for cls in (Plugin, Scan):
            prof = replace(pb.profile(seed, "fgd-strand"), place=cls())
            r = run_cycle(w.snapshot, prof)
            runs.append(([(s.job_id, s.allocation) for s in r.starts], r.reservation))
        assert runs[0] == runs[1]
