"""The gateway executor never makes the controller's loop wait on the proxy: applies and
counters run on the proxy's own thread (a fake gateway here, whose calls block until the test
lets them go), the newest of the queued applies wins, a leaving replica's Kill waits for the
apply that took it out and then the drain, and every other command goes out at once."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from gatewayfakes import Agents, Link
from gpufleet.core.commands import Kill, RouteBackend, Routes, ServiceRecord
from gpufleet.core.events import ServiceLoad
from gpufleet.core.services import RestoredService
from gpufleet.gateway import ConfigError, Gateway, ServiceRoute, ServiceStats
from gpufleet.server.endpoints import EndpointBook
from gpufleet.server.gateway_executor import ServiceGateway, WithGateway

WAIT_S = 30.0  # generous: a busy CI box


class Blocking(Gateway):
    """Records each call; ``apply`` and ``stats`` wait for ``release`` while ``hold`` is set."""

    kind = "fake"

    def __init__(self) -> None:
        super().__init__()
        self.hold = threading.Event()
        self.release = threading.Event()
        self.inside = threading.Event()  # a blocking call has begun
        self.applied: list[list[ServiceRoute]] = []
        self.calls: list[str] = []
        self.threads: set[str] = set()
        self.fail = False
        self.counters: dict[str, ServiceStats] = {}

    def _enter(self, what: str) -> None:
        self.calls.append(what)
        self.threads.add(threading.current_thread().name)
        if self.hold.is_set():
            self.inside.set()
            assert self.release.wait(WAIT_S), "the test never released the gateway"

    def start(self) -> None:
        self._enter("start")

    def apply(self, services: list[ServiceRoute]) -> None:
        self._enter("apply")
        if self.fail:
            raise ConfigError("refused")
        self.applied.append(services)

    def stats(self) -> dict[str, ServiceStats]:
        self._enter("stats")
        return dict(self.counters)

    def stop(self) -> None:
        self.calls.append("stop")


@pytest.fixture
def fake() -> Blocking:
    return Blocking()


@pytest.fixture
def gw(fake: Blocking, tmp_path: Path) -> ServiceGateway:
    links = {"n1": Link("10.0.0.1"), "n2": Link("10.0.0.2")}
    return ServiceGateway(fake, EndpointBook(tmp_path / "ep.json", 40000, 10), links)


ONE, TWO = RouteBackend("llm.1", "n1", 20000), RouteBackend("llm.2", "n2", 20000)


def test_the_loop_runs_on_while_an_apply_blocks(fake: Blocking, gw: ServiceGateway) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        ex = WithGateway(Agents(), gw, loop.call_later, loop.call_soon_threadsafe)
        fake.hold.set()
        ex.apply([Routes("llm", (ONE,))])  # returns at once: the proxy's thread does it
        assert await asyncio.to_thread(fake.inside.wait, WAIT_S)
        ran = asyncio.Event()
        loop.call_soon(ran.set)  # another callback of the loop, while the apply blocks
        await asyncio.wait_for(ran.wait(), WAIT_S)
        assert not gw.applied.done() and fake.applied == []
        fake.release.set()
        await asyncio.wait_for(asyncio.wrap_future(gw.applied), WAIT_S)
        assert [r.backends[0].address for (r,) in fake.applied] == ["10.0.0.1:20000"]
        assert gw.started and threading.current_thread().name not in fake.threads
        await asyncio.to_thread(gw.stop)
        assert fake.calls == ["start", "apply", "stop"] and not gw.started

    asyncio.run(main())


def test_the_newest_of_the_queued_applies_wins(fake: Blocking, gw: ServiceGateway) -> None:
    fake.hold.set()
    gw.on_routes(Routes("llm", (ONE,)))
    first = gw.applied
    assert fake.inside.wait(WAIT_S)  # the proxy's thread is in start(): the rest queue
    gw.on_routes(Routes("llm", (ONE, TWO)))
    middle = gw.applied
    gw.on_routes(Routes("llm", (TWO,)))
    newest = gw.applied
    fake.release.set()
    for fut in (first, middle, newest):
        assert fut.result(WAIT_S) is None
    # the first, then only the newest: each replaces the whole set
    assert [[b.address for b in r.backends] for (r,) in fake.applied] == [
        ["10.0.0.1:20000"],
        ["10.0.0.2:20000"],
    ]
    assert gw.worker.applies == 2
    gw.stop()


def test_a_leaving_replicas_kill_waits_for_the_apply_and_then_the_drain(
    fake: Blocking, gw: ServiceGateway
) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        agents = Agents()
        later: list[tuple[float, Callable[[], None]]] = []
        ex = WithGateway(agents, gw, lambda d, f: later.append((d, f)), loop.call_soon_threadsafe)
        ex.apply([Routes("llm", (ONE, TWO))])
        await asyncio.wrap_future(gw.applied)

        fake.hold.set()
        other = Kill("batch-7", 1, (0,), "cancelled")  # not a replica: goes out at once
        gone = Kill("llm.2", 1, (0,), "scaled down")
        launch_kill = Kill("llm.9", 1, (0,), "stopped")  # a replica still routed: at once
        ex.apply([Routes("llm", (ONE,)), gone, other, launch_kill])
        assert agents.sent == [other, launch_kill]  # in their order
        assert await asyncio.to_thread(fake.inside.wait, WAIT_S)
        for _ in range(10):
            await asyncio.sleep(0)
        assert later == []  # the proxy may still route to llm.2: no drain yet
        fake.release.set()
        await asyncio.wait_for(asyncio.wrap_future(gw.applied), WAIT_S)
        while not later:  # the done apply comes back onto the loop
            await asyncio.sleep(0.01)
        ((delay, kill),) = later
        assert delay == gw.drain_s == 2.0 and agents.sent == [other, launch_kill]
        kill()  # the drain is over
        assert agents.sent == [other, launch_kill, gone]
        await asyncio.to_thread(gw.stop)

    asyncio.run(main())


def test_a_failed_apply_still_kills_after_the_drain(fake: Blocking, gw: ServiceGateway) -> None:
    agents = Agents()
    later: list[tuple[float, Callable[[], None]]] = []
    hops: list[Callable[[], None]] = []
    ex = WithGateway(agents, gw, lambda d, f: later.append((d, f)), hops.append)
    ex.apply([Routes("llm", (ONE, TWO))])
    gw.applied.result(WAIT_S)
    fake.fail = True
    ex.apply([Routes("llm", (ONE,)), Kill("llm.2", 1, (0,), "scaled down")])
    with pytest.raises(ConfigError):
        gw.applied.result(WAIT_S)
    gw.worker.stop(WAIT_S)  # the done callbacks have run once the thread ended
    (hop,) = hops
    hop()
    ((delay, kill),) = later
    assert delay == gw.drain_s
    kill()
    assert [c.job_id for c in agents.sent if isinstance(c, Kill)] == ["llm.2"]
    assert gw.errors == 1


def test_a_new_service_opens_its_endpoint_with_no_backend(
    fake: Blocking, gw: ServiceGateway
) -> None:
    ex = WithGateway(Agents(), gw, lambda d, f: None, lambda f: None)
    record = RestoredService((), 1, 1)
    ex.apply([ServiceRecord("new", record)])
    gw.applied.result(WAIT_S)
    ((route,),) = fake.applied
    assert (route.name, route.backends) == ("new", ())
    e = gw.endpoint("new")
    assert e is not None and route.listen_port == e.port and route.token == e.token
    ex.apply([ServiceRecord("new", record)])  # a record of a known service changes nothing
    gw.open(["new"])
    assert gw.worker.applies == 1
    ex.apply([ServiceRecord("new", None)])  # gone: the endpoint closes
    gw.applied.result(WAIT_S)
    assert fake.applied[-1] == [] and gw.endpoint("new") is None
    gw.stop()


def test_counters_are_read_off_the_loop_and_refused_requests_are_no_load(
    fake: Blocking, gw: ServiceGateway
) -> None:
    async def main() -> None:
        gw.open(["llm"])
        await asyncio.wrap_future(gw.applied)
        fake.counters = {"llm": ServiceStats(100, 40, 0, 40)}
        assert await gw.sample(10.0) == []  # the first: nothing to compare with
        fake.hold.set()
        fake.release.clear()
        fake.inside.clear()
        fake.counters = {"llm": ServiceStats(150, 70, 0, 60)}  # 50 more, 20 of them refused
        sampling = asyncio.create_task(gw.sample(12.0))
        assert await asyncio.to_thread(fake.inside.wait, WAIT_S)
        ran = asyncio.Event()
        asyncio.get_running_loop().call_soon(ran.set)
        await asyncio.wait_for(ran.wait(), WAIT_S)  # the loop runs while stats() blocks
        assert not sampling.done()
        fake.release.set()
        assert await asyncio.wait_for(sampling, WAIT_S) == [ServiceLoad("llm", 15.0, 12.0)]
        fake.hold.clear()
        fake.counters = {"llm": ServiceStats(4, 0, 0, 1)}  # a restarted proxy: from 0
        assert await gw.sample(13.0) == [ServiceLoad("llm", 3.0, 13.0)]
        await asyncio.to_thread(gw.stop)
        assert await gw.sample(14.0) == []  # no proxy: no counters

    asyncio.run(main())


def test_a_caller_that_gives_up_does_not_stop_the_worker(
    fake: Blocking, gw: ServiceGateway
) -> None:
    fake.hold.set()
    gw.open(["llm"])
    assert fake.inside.wait(WAIT_S)
    gw.open(["other"])  # queued behind the blocked start
    queued = gw.applied
    counters = gw.worker.stats()
    assert queued.cancel() and counters.cancel()  # as a cancelled sampler's wrapped future
    fake.release.set()
    gw.open(["third"])
    gw.applied.result(WAIT_S)
    assert [r.name for r in fake.applied[-1]] == ["llm", "other", "third"]
    fake.hold.clear()
    assert gw.worker.stats().result(WAIT_S) == {}
    gw.stop()


def test_serving_follows_the_applies_that_succeeded(fake: Blocking, gw: ServiceGateway) -> None:
    fake.hold.set()
    gw.on_routes(Routes("llm", (ONE, TWO)))
    assert fake.inside.wait(WAIT_S)
    assert gw.serving == {}  # routed by the core, not yet by the proxy
    fake.release.set()
    gw.applied.result(WAIT_S)
    gw.worker.stop(WAIT_S)  # its done callbacks have run
    assert gw.serving == {"llm": {"llm.1", "llm.2"}}
    fake.fail = True
    gw.on_routes(Routes("llm", (ONE,)))
    with pytest.raises(ConfigError):
        gw.applied.result(WAIT_S)
    gw.worker.stop(WAIT_S)
    assert gw.serving == {"llm": {"llm.1", "llm.2"}}  # the old config serves on
    fake.fail = False
    gw.on_routes(Routes("llm", (RouteBackend("llm.3", "gone", 20001), ONE)))
    gw.applied.result(WAIT_S)
    gw.worker.stop(WAIT_S)
    assert gw.serving == {"llm": {"llm.1"}}  # a node without an address is not served
