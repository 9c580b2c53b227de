"""The client's failover over several controllers (client/failover.py): a standby's 503
points at the leader, an address that refuses connections is skipped, and a write is sent
again only where it cannot have been done. Transports are stand-ins at the transport seam;
the live path is tests/chaos/test_ha_failover.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpufleet.base.settings import resolve
from gpufleet.client.failover import Failover, addresses
from gpufleet.client.transport import Response

LEADS = Response(200, {}, b"{}")


def standby(leader: str = "") -> Response:
    headers = {"x-gpufleet-role": "standby", "retry-after": "1"}
    if leader:
        headers["x-gpufleet-leader"] = leader
    return Response(503, headers, b'{"detail": "standby"}')


class At:
    """What one address answers, in order (an exception: raised)."""

    def __init__(self, log: list[str], url: str, answers: list[Any]) -> None:
        self.log, self.url, self.answers = log, url, answers

    def request(self, method: str, target: str, headers: dict[str, str], body: Any = None,
                *, timeout: float | None = None) -> Response:  # fmt: skip
        self.log.append(self.url)
        a = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(a, BaseException):
            raise a
        return a  # type: ignore[no-any-return]

    def close(self) -> None:
        pass


def failover(answers: dict[str, list[Any]]) -> tuple[Failover, list[str], list[float]]:
    log: list[str] = []
    slept: list[float] = []
    clock = [0.0]

    def sleep(s: float) -> None:
        slept.append(s)
        clock[0] += s

    f = Failover(list(answers), lambda u: At(log, u, answers[u]), patience_s=2.0,
                 sleep=sleep, now=lambda: clock[0])  # fmt: skip
    return f, log, slept


def test_a_standby_points_at_the_leader_and_later_calls_go_there() -> None:
    f, log, _ = failover({"http://a": [standby("http://b")], "http://b": [LEADS]})
    assert f.request("GET", "/x", {}).status == 200
    assert f.request("POST", "/y", {}, b"{}").status == 200
    assert log == ["http://a", "http://b", "http://b"]


def test_an_unreachable_address_is_skipped_and_a_round_without_leader_waits() -> None:
    f, log, slept = failover(
        {"http://a": [ConnectionRefusedError()], "http://b": [standby(), standby(), LEADS]}
    )
    assert f.request("POST", "/jobs", {}, b"{}").status == 200
    # the address that refused is avoided for a while: not tried again at every round
    assert log == ["http://a", "http://b", "http://b", "http://b"]
    assert slept == [0.2, 0.2]


def test_no_leader_within_the_patience_gives_the_standbys_answer() -> None:
    f, _, slept = failover({"http://a": [standby()], "http://b": [standby()]})
    assert f.request("GET", "/x", {}).status == 503
    assert sum(slept) <= 2.0


def test_a_write_cut_mid_request_is_not_sent_again_unless_keyed() -> None:
    f, log, _ = failover({"http://a": [ConnectionResetError()], "http://b": [LEADS]})
    with pytest.raises(ConnectionResetError):
        f.request("POST", "/jobs", {}, b'{"name": "x"}')
    assert log == ["http://a"]
    assert f.request("POST", "/jobs", {}, b'{"idempotency_key": "k"}').status == 200
    assert f.request("GET", "/jobs", {}).status == 200


def test_settings_take_several_addresses() -> None:
    s = resolve(server="127.0.0.1:1, http://h:2/", env={"GPUFLEET_CONFIG": "/nonexistent"})
    assert s.server == "http://127.0.0.1:1,http://h:2/"
    assert addresses(s.server) == ["http://127.0.0.1:1", "http://h:2"]


def test_the_config_file_takes_several_addresses(tmp_path: Path) -> None:
    """Issue 26: ``--controller URL,URL``, ``GPUFLEET_SERVER=URL,URL`` and the config file."""
    cfg = tmp_path / "config.yaml"
    cfg.write_text("server: http://c0:8600, http://c1:8600\n")
    s = resolve(env={"GPUFLEET_CONFIG": str(cfg), "HOME": str(tmp_path)})
    assert addresses(s.server) == ["http://c0:8600", "http://c1:8600"]


def test_an_address_that_failed_is_avoided_and_named_to_the_others() -> None:
    seen: list[dict[str, str]] = []

    class Noting(At):
        def request(self, method: str, target: str, headers: dict[str, str], body: Any = None,
                    *, timeout: float | None = None) -> Response:  # fmt: skip
            seen.append(dict(headers))
            return super().request(method, target, headers, body, timeout=timeout)

    log: list[str] = []
    clock = [0.0]
    answers: dict[str, list[Any]] = {
        "http://a": [TimeoutError()],  # the leader, cut off
        "http://b": [standby("http://a")],  # a standby that still sees it lead
    }
    f = Failover(list(answers), lambda u: Noting(log, u, answers[u]), patience_s=0.0,
                 sleep=lambda s: None, now=lambda: clock[0])  # fmt: skip
    assert f.request("POST", "/hb", {}, b"{}").status == 503
    assert log == ["http://a", "http://b"]  # its pointer back to the leader is not followed
    assert seen[1] == {"x-gpufleet-unreached": "http://a"}
    log.clear()
    assert f.request("POST", "/hb", {}, b"{}").status == 503  # the next starts elsewhere
    assert log == ["http://b"]
    clock[0] = 11.0  # the avoidance is over: the leader is tried again, unnamed
    log.clear()
    answers["http://a"][:] = [LEADS]
    assert f.request("POST", "/hb", {}, b"{}").status == 200
    assert log == ["http://a"] and "x-gpufleet-unreached" not in seen[-1]


def test_a_write_that_failed_mid_request_sends_the_next_elsewhere() -> None:
    f, log, _ = failover({"http://a": [ConnectionResetError(), LEADS], "http://b": [LEADS]})
    with pytest.raises(ConnectionResetError):
        f.request("POST", "/jobs", {}, b'{"name": "x"}')
    assert f.request("POST", "/jobs", {}, b'{"name": "y"}').status == 200
    assert log == ["http://a", "http://b"]


def test_a_request_waits_on_the_standby_while_the_leader_it_names_is_avoided() -> None:
    """The leader cut off: the standby still names it until it takes over itself; the request
    is not sent back to the timeout at every round, and goes through once the standby leads."""
    f, log, slept = failover(
        {
            "http://a": [TimeoutError()],
            "http://b": [standby("http://a"), standby("http://a"), LEADS],
        }
    )
    assert f.request("POST", "/hb", {}, b"{}").status == 200
    assert log == ["http://a", "http://b", "http://b", "http://b"] and slept == [0.2, 0.2]
