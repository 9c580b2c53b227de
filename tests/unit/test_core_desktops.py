"""Desktop sessions in the pure core: a desktop unused (no request, no open connection) for
its idle limit is scaled to 0 (suspended, its replica stopped, its GPU freed); an open
connection (a WebSocket: one long request) keeps it; scaling it up again resumes it and its
idle time starts over. The spec's ``desktop`` part is read and written back whole."""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_core_services import Svc, events, kills, service

from gpufleet.core.events import ServiceLoad, ServiceScaled
from gpufleet.gateway import viewers as v
from gpufleet.model.errors import SpecError
from gpufleet.model.service import Desktop, ServiceSpec


def desktop(idle_s: float = 60.0) -> ServiceSpec:
    return replace(service(1, readiness=None), desktop=Desktop(idle_s, "1024x768"))


def test_an_unused_desktop_is_suspended_after_its_idle_limit() -> None:
    s = Svc(desktop(60.0))
    s.up()
    assert s.replicas() == ["web.1"]
    s.do(ServiceLoad("web", 0.0, 30.0, 0), at=30.0)
    out = s.do(ServiceLoad("web", 0.0, 59.0, 0), at=59.0)
    assert not events(out, "suspended") and s.svc.desired == 1
    out = s.do(ServiceLoad("web", 0.0, 60.0, 0), at=60.0)
    (ev,) = events(out, "suspended")
    assert "idle 60 s (limit 60 s)" in ev.why
    assert s.svc.desired == 0 and [k.job_id for k in kills(out)] == ["web.1"]
    assert s.svc.spec.replicas == 0  # a restart keeps it suspended


def test_an_open_connection_or_a_request_keeps_it() -> None:
    s = Svc(desktop(60.0))
    s.up()
    for t in (50.0, 100.0, 150.0):  # a WebSocket held open: no new request, one connection
        s.do(ServiceLoad("web", 0.0, t, 1), at=t)
    s.do(ServiceLoad("web", 0.5, 200.0, 0), at=200.0)  # a request
    out = s.do(ServiceLoad("web", 0.0, 259.0, 0), at=259.0)
    assert not events(out, "suspended") and s.svc.desired == 1
    out = s.do(ServiceLoad("web", 0.0, 260.0, 0), at=260.0)
    assert events(out, "suspended")


def test_a_resumed_desktop_starts_its_idle_time_again() -> None:
    s = Svc(desktop(60.0))
    s.up()
    s.do(ServiceLoad("web", 0.0, 60.0, 0), at=60.0)
    out = s.do(ServiceScaled("web", 1), at=500.0)
    assert events(out, "resumed") and s.svc.desired == 1
    s.up()
    out = s.do(ServiceLoad("web", 0.0, 550.0, 0), at=550.0)
    assert not events(out, "suspended")
    assert events(s.do(ServiceLoad("web", 0.0, 560.0, 0), at=560.0), "suspended")


def test_an_ordinary_service_is_never_suspended() -> None:
    s = Svc(service(1, readiness=None))
    s.up()
    out = s.do(ServiceLoad("web", 0.0, 1e6, 0), at=1e6)
    assert not events(out, "suspended") and s.svc.desired == 1


def test_the_desktop_part_round_trips_and_is_checked() -> None:
    spec = desktop(90.0)
    again = ServiceSpec.from_dict(spec.to_dict())
    assert again.desktop == Desktop(90.0, "1024x768") and again == spec
    raw = spec.to_dict()
    raw["desktop"] = {"idle_suspend_s": 0, "geometry": "big", "colour": 1}
    with pytest.raises(SpecError) as e:
        ServiceSpec.from_dict(raw)
    said = str(e.value)
    assert "desktop.idle_suspend_s" in said and "WIDTHxHEIGHT" in said and "colour" in said
    raw = spec.to_dict() | {"replicas": 2}
    with pytest.raises(SpecError, match="a desktop is one replica"):
        ServiceSpec.from_dict(raw)


def test_the_viewers_helpers() -> None:
    assert v.cookie_token(b"a=1; gpufleet_desktop=tok; b=2") == b"tok"
    assert v.cookie_token(b"a=1") is None
    assert v.without_cookie(b"a=1; gpufleet_desktop=tok; b=2") == b"a=1; b=2"
    assert v.without_cookie(b"gpufleet_desktop=tok") is None
    assert v.bearer(b"Bearer  abc ") == b"abc" and v.bearer(b"Basic abc") is None
    assert v.form_token(b"token=a%2Bb&x=1") == "a+b"
    assert v.digest("x") == "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"
    page = v.login_page("<desk>", "no <b>")
    assert b"&lt;desk&gt;" in page and b"no &lt;b&gt;" in page


def test_a_desktops_viewers_reach_a_gateway_process() -> None:
    from gpufleet.gateway import Backend, ServiceRoute
    from gpufleet.server.remote_gateway import Published, routes_json

    desk = ServiceRoute("desk", 31501, "t" * 20, (Backend("10.0.0.5", 8000),), (v.digest("a"),))
    web = ServiceRoute("web", 31500, "t" * 20, (Backend("10.0.0.5", 8001),))
    doc = routes_json(Published("i", 1, (desk, web)))
    assert doc["routes"][0]["viewers"] == [v.digest("a")]
    assert "viewers" not in doc["routes"][1]  # an ordinary service's route is as it was


def test_a_desktop_slow_to_start_is_not_suspended_before_it_is_up() -> None:
    s = Svc(desktop(60.0))
    out = s.do(ServiceLoad("web", 0.0, 100.0, 0), at=100.0)  # still starting at 100 s
    assert not events(out, "suspended")
    s.up()
    assert not events(s.do(ServiceLoad("web", 0.0, 159.0, 0), at=159.0), "suspended")
    assert events(s.do(ServiceLoad("web", 0.0, 160.0, 0), at=160.0), "suspended")


def test_the_cli_makes_a_spec_the_server_reads() -> None:
    from gpufleet.cli.desktop import seconds, spec_of

    raw = spec_of(
        "studio", gpus=1, share=250, graphics=True, idle_s=seconds("30m"), geometry="1920x1080",
        program="xterm", python="python3", queue=None,
    )  # fmt: skip
    raw["replica"]["user"] = "alice"
    spec = ServiceSpec.from_dict(raw)
    assert spec.desktop == Desktop(1800.0, "1920x1080") and spec.replicas == 1
    r = spec.replica
    assert (r.gpus_per_worker, r.gpu_milli, dict(r.gpu_engines)) == (1, 250, {"graphics": 1})
    assert r.command[:3] == ("python3", "-m", "gpufleet.ops.desktop") and "xterm" in r.command
    assert ServiceSpec.from_dict(spec.to_dict()) == spec  # the engines kept in the round trip
