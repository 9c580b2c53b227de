"""`make demo`'s service part (``gpufleet.cli.demo_service``) on a real cluster with the
built-in proxy (what a machine with only Python gets): it answers through the endpoint from
both replicas, keeps answering while one is SIGKILLed, and removes the service."""

from __future__ import annotations

import io
from collections.abc import Callable

import pytest
from rich.console import Console

from gpufleet.cli import demo_service
from gpufleet.ops.localcluster import LocalCluster

pytestmark = pytest.mark.e2e


def test_the_demo_service_answers_through_its_endpoint_while_a_replica_is_killed(
    new_cluster: Callable[..., LocalCluster],
) -> None:
    c = new_cluster(agents=2, gateway="builtin")
    ana = c.user("ana")
    out = io.StringIO()
    ok = demo_service.run(c, ana, Console(file=out, width=200), requests=10)
    text = out.getvalue()
    print(text)
    assert ok, text
    answered = {line.split("→ ")[1].split()[0] for line in text.splitlines() if "→ " in line}
    assert answered == {"demo-model.1", "demo-model.2"}  # both replicas answered
    assert "SIGKILLed demo-model.1" in text and "back to 2 ready replicas" in text
    # the lines after the kill report what the controller knows: the first one already has
    # the killed replica out, never "2/2" of a service that has lost one
    lines = text.split("SIGKILLed demo-model.1")[1].splitlines()
    first = next(x for x in lines if "ready replicas" in x)
    assert "ready replicas 2/2" not in first and "out of the routes" in first, first
    assert not ana.services()
    states = {j.id: j.state for j in ana.jobs(all_states=True)}
    assert states.pop("demo-model.1") == "FAILED"  # the one killed
    assert len(states) >= 2 and set(states.values()) == {"CANCELLED"}  # the rest, on removal
