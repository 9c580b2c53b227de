"""The load generator (``gpufleet.ops.loadgen``) against the model stub as a real process
on 127.0.0.1, and what it counts when nothing listens; ``free_gateway_ports``' ranges."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from gpufleet.io.specs import example
from gpufleet.ops.loadgen import LoadGen, Result, summarize
from gpufleet.ops.localcluster import free_gateway_ports, free_port, release_ports, wait_until


@pytest.fixture
def stub() -> Iterator[int]:
    port = free_port()
    p = subprocess.Popen([sys.executable, str(example("model_stub.py")), "--port", str(port)])
    try:

        def up() -> bool:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True

        wait_until("the stub listening", up, 30)
        yield port
    finally:
        p.kill()
        p.wait()


def test_every_request_is_sent_and_answered_by_the_stub(stub: int) -> None:
    load = LoadGen(f"http://127.0.0.1:{stub}", 100, path="/v1/predict", seconds=1, keep_body=True)
    results = load.start().wait()
    assert len(results) == 100  # the due times of 1 s at 100/s, each sent once
    assert all(r.ok and r.status == 200 for r in results)
    answer = json.loads(results[0].body)
    assert answer["port"] == stub and 0 <= answer["score"] < 1
    s = load.summary()
    assert (s.sent, s.ok, s.failed, s.first_failure) == (100, 100, 0, None)


def test_a_closed_port_counts_as_refused_requests() -> None:
    load = LoadGen(f"http://127.0.0.1:{free_port()}", 50, seconds=0.5)
    load.start().wait()
    s = load.summary()
    assert s.sent == s.failed == 25 and s.by_kind == {"ConnectionRefusedError": 25}
    assert s.first_failure is not None and s.last_failure is not None
    assert s.first_failure < s.last_failure


def test_summary_windows_and_kinds() -> None:
    rs = [Result(float(t), 0.001, 200, "") for t in range(5)]
    rs += [Result(2.5, 0.001, 503, "http 503"), Result(3.5, 5.0, None, "timeout")]
    assert summarize(rs).by_kind == {"http 503": 1, "timeout": 1}
    late = summarize(rs, since=3.0)
    assert (late.sent, late.failed, late.first_failure) == (3, 1, 3.5)
    assert summarize(rs, until=2.5).failed == 0


def test_bad_targets_are_refused_with_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="need http://HOST:PORT"):
        LoadGen("https://example.org", 10)
    with pytest.raises(ValueError, match="rate 0"):
        LoadGen("http://127.0.0.1:1", 0)


def test_gateway_port_ranges_are_free_and_never_handed_out_twice() -> None:
    a, b = free_gateway_ports(10), free_gateway_ports(10)
    ra, rb = (range(int(x.split("-")[0]), int(x.split("-")[1]) + 1) for x in (a, b))
    assert len(ra) == len(rb) == 10 and ra.stop <= 32768
    assert not set(ra) & set(rb)
    for port in ra:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # free when it was given
    with pytest.raises(ValueError, match="need 1 to"):
        free_gateway_ports(0)
    for given in (a, b):
        release_ports(given)
