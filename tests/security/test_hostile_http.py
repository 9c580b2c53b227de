"""What a hostile client sends below the API, against a real controller process (the CLI's
``gpufleet controller``, as deployed): each is refused with a 4xx in the one error shape, the
controller keeps answering, and it holds no more than its limits."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gpufleet.api.schemas import TokenCreate
from gpufleet.ops.localcluster import LocalCluster
from gpufleet.server.headlimit import MAX_HEAD_BYTES

HEAD_TIMEOUT_S = 1


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    # a short head timeout, so that a slowloris test need not wait the default 30 s
    c = LocalCluster(
        Path(tmp_path_factory.mktemp("hostile")),
        agents=0,
        controller_args=["--head-timeout-s", str(HEAD_TIMEOUT_S)],
    )
    c.start()
    try:
        yield c
    finally:
        c.stop()


def _connect(c: LocalCluster) -> socket.socket:
    return socket.create_connection(("127.0.0.1", c.port), timeout=30)


def _answer(s: socket.socket) -> bytes:
    got = b""
    while chunk := s.recv(65536):
        got += chunk
    return got


def test_a_header_that_never_ends_is_refused_before_it_is_all_sent(cluster: LocalCluster) -> None:
    sent = 0
    with _connect(cluster) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-big: ")
        try:
            for _ in range(256):  # 256 MiB, if the controller took it all
                s.sendall(b"a" * (1 << 20))
                sent += 1
        except OSError:
            pass  # the controller closed the connection: refused
    assert sent < 256
    with cluster.client() as c:  # still answering
        assert c.health()["ok"]


def test_a_head_over_the_limit_in_one_read_is_a_431_in_the_error_shape(
    cluster: LocalCluster,
) -> None:
    for headers in (
        b"x-big: " + b"a" * (MAX_HEAD_BYTES + 1) + b"\r\n",  # one header too large
        b"".join(b"x-h%d: %s\r\n" % (i, b"a" * 60) for i in range(MAX_HEAD_BYTES // 60)),  # many
    ):
        with _connect(cluster) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n" + headers + b"\r\n")
            got = _answer(s)
        head, _, body = got.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 431 "), got[:300]
        err = json.loads(body)
        assert "request head" in err["detail"] and str(MAX_HEAD_BYTES) in err["detail"]
        assert err["errors"] == [{"field": "headers", "message": err["detail"]}]


def test_a_head_trickled_a_byte_at_a_time_is_a_408_and_closed_before_it_is_all_sent(
    cluster: LocalCluster,
) -> None:
    # slowloris: each byte is in time for any idle timeout, the head as a whole never is. The
    # trickle is paced by the controller's answer (a 408, then the close), not by a clock: a
    # byte every 0.5 s would take 30 s for this head, unless the controller ends it.
    head = b"GET /healthz HTTP/1.1\r\nhost: x\r\n" + b"x-slow: " + b"a" * 40 + b"\r\n\r\n"
    sent = 0
    with _connect(cluster) as s:
        s.settimeout(0.5)
        got = b""
        for byte in head:
            try:
                s.sendall(bytes([byte]))
                sent += 1
                chunk = s.recv(65536)  # waits 0.5 s for an answer
            except TimeoutError:
                continue
            except OSError:
                break  # the controller closed it
            if not chunk:
                break
            got += chunk
        s.settimeout(30)
        got += _answer(s)
    assert sent < len(head), "the whole head was taken, a byte at a time"
    status, _, body = got.partition(b"\r\n\r\n")
    assert status.startswith(b"HTTP/1.1 408 "), got[:300]
    err = json.loads(body)
    assert err["detail"] == f"request head: not all sent within {HEAD_TIMEOUT_S} s"
    assert err["errors"] == [{"field": "headers", "message": err["detail"]}]
    with cluster.client() as c:  # a request sent at once is served
        assert c.health()["ok"]


def test_a_connection_that_sends_nothing_is_a_408_and_closed(cluster: LocalCluster) -> None:
    with _connect(cluster) as s:
        got = _answer(s)  # the controller's answer and close end this, not the client
    assert got.startswith(b"HTTP/1.1 408 "), got[:300]


def test_heads_within_the_limit_and_large_bodies_are_served(cluster: LocalCluster) -> None:
    with httpx.Client(base_url=cluster.url, timeout=30) as h:
        r = h.get("/healthz", headers={"x-big": "a" * (MAX_HEAD_BYTES // 2)})
        assert r.status_code == 200, r.text
        auth = {"authorization": f"Bearer {cluster.admin_token}"}
        # a body far larger than the head limit, sent with its head in one write: the body's
        # bytes are not the head's
        big = {"spec": {"name": "x", "command": ["true"], "env": {"X": "x" * 60_000}}}
        for _ in range(3):  # and again on the same connection (the head counted anew)
            r = h.post("/api/v1/jobs", json=big, headers=auth)
            assert r.status_code == 201, r.text


def test_sbatch_of_a_script_over_the_body_limit_says_so_not_that_the_controller_is_down(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    # the controller answers 413 by the Content-Length and closes while the shim still sends
    script = tmp_path / "big.sh"
    script.write_text("#!/bin/sh\n" + ("# " + "x" * 98 + "\n") * 200_000 + "true\n")  # 20 MB
    with cluster.admin() as a:
        token = a.create_token(TokenCreate(name="big-script", role="user", user="big")).token
    env = {**os.environ, "GPUFLEET_SERVER": cluster.url, "GPUFLEET_TOKEN": token or ""}
    r = subprocess.run(
        [sys.executable, "-m", "gpufleet.shims.sbatch", str(script)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 1, r
    assert "over the limit" in r.stderr and "--max-body-bytes" in r.stderr, r.stderr
    assert "(413)" in r.stderr and "cannot reach" not in r.stderr, r.stderr
    with cluster.admin() as a:
        assert a.jobs(user="big", all_states=True) == []


def test_squeue_formats_that_would_print_gigabytes_are_refused_and_the_controller_answers(
    cluster: LocalCluster,
) -> None:
    with cluster.admin() as a:
        token = a.create_token(TokenCreate(name="wide", role="user", user="wide")).token
    auth = {"authorization": f"Bearer {token}"}
    with httpx.Client(base_url=f"{cluster.url}/api/v1", headers=auth, timeout=60) as h:
        # one field a gigabyte wide: refused as the command line is read
        r = h.post("/squeue", json={"argv": ["-o", "%999999999j"]})
        assert r.status_code == 400, r.text
        assert "a field's size is at most 4096" in r.json()["detail"]
        # fields of a size allowed, 10,000 of them: 41 MB for the header line alone
        r = h.post("/squeue", json={"argv": ["-o", "%4096j" * 10_000]})
        assert r.status_code == 200, r.text[:300]
        answer = r.json()
        assert answer["code"] == 1 and answer["out"] == "", str(answer)[:300]
        assert "characters: fewer or narrower fields" in answer["errors"][-1]
        r = h.post("/squeue", json={"argv": ["-o", "%.20j %i"]})  # a plain one still prints
        assert r.status_code == 200 and r.json()["code"] == 0, r.text
        assert r.json()["out"].split() == ["NAME", "JOBID"]
    with cluster.client() as c:
        assert c.health()["ok"]


def _trickle(s: socket.socket, data: bytes) -> tuple[int, bytes]:
    """Send ``data`` a byte at a time, each after 0.5 s without an answer; (bytes sent, the
    answer). Paced by the controller's answer and close, not by a clock."""
    sent = 0
    got = b""
    s.settimeout(0.5)
    for byte in data:
        try:
            s.sendall(bytes([byte]))
            sent += 1
            chunk = s.recv(65536)
        except TimeoutError:
            continue
        except OSError:
            break
        if not chunk:
            break
        got += chunk
    s.settimeout(30)
    with contextlib.suppress(OSError):
        got += _answer(s)
    return sent, got


def test_a_body_trickled_a_byte_at_a_time_is_a_408_and_nothing_is_stored(
    cluster: LocalCluster,
) -> None:
    # the head comes at once, the body a byte every 0.5 s: 40 s for this one, unless ended
    body = json.dumps({"spec": {"name": "trickled", "command": ["true"], "env": {"X": "x" * 40}}})
    for framing in (f"content-length: {len(body)}", "transfer-encoding: chunked"):
        data = body.encode()
        if "chunked" in framing:
            data = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in (data[:10], data[10:]))
            data += b"0\r\n\r\n"
        with _connect(cluster) as s:
            s.sendall(
                b"POST /api/v1/jobs HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                + f"authorization: Bearer {cluster.admin_token}\r\n{framing}\r\n\r\n".encode()
            )
            sent, got = _trickle(s, data)
        assert sent < len(data), "the whole body was taken, a byte at a time"
        status, _, answer = got.partition(b"\r\n\r\n")
        assert status.startswith(b"HTTP/1.1 408 "), got[:300]
        err = json.loads(answer)
        assert err["detail"].startswith(f"request body: not all sent within {HEAD_TIMEOUT_S}")
        assert "--head-timeout-s" in err["detail"], err
        assert err["errors"] == [{"field": "body", "message": err["detail"]}]
    with cluster.admin() as a:
        assert [j for j in a.jobs(all_states=True) if j.spec["name"] == "trickled"] == []


def test_a_large_body_sent_in_pieces_at_a_normal_speed_is_served(cluster: LocalCluster) -> None:
    # 240 KB in 64 KiB writes, chunked and by its length: each piece extends the body's time
    auth = {"authorization": f"Bearer {cluster.admin_token}"}
    spec = {
        "name": "big-body",
        "command": ["true"],
        "env": {f"X{i}": "x" * 60_000 for i in range(4)},
    }
    data = json.dumps({"spec": spec}).encode()
    pieces = [data[i : i + 65536] for i in range(0, len(data), 65536)]
    with httpx.Client(base_url=cluster.url, timeout=30) as h:
        for headers in ({}, {"content-length": str(len(data))}):
            r = h.post(
                "/api/v1/jobs",
                content=iter(pieces),
                headers={**auth, **headers, "content-type": "application/json"},
            )
            assert r.status_code == 201, r.text


def test_a_key_given_twice_in_a_json_body_is_a_422_naming_it_and_nothing_is_done(
    cluster: LocalCluster,
) -> None:
    # json.loads keeps the last of two: one reader would see alice's job, another bob's
    auth = {"authorization": f"Bearer {cluster.admin_token}"}
    spec = '{"name": "twice", "command": ["true"], "user": "alice", "hold": true, "user": "bob"}'
    bodies = {
        "/api/v1/jobs": '{"spec": ' + spec + ', "probe": false, "probe": true}',
        "/api/v1/queues/twice": '{"weight": 2, "cohort": "a", "weight": 3, "cohort": "b"}',
    }
    with httpx.Client(base_url=cluster.url, headers=auth, timeout=30) as h:
        for path, body in bodies.items():
            method = "POST" if path.endswith("jobs") else "PUT"
            for ctype, content in (
                ({"content-type": "application/json"}, body.encode()),
                ({"content-type": "application/merge-patch+json; charset=utf-8"}, body.encode()),
                (
                    {"content-type": "application/json"},
                    iter([body[:20].encode(), body[20:].encode()]),
                ),
            ):
                r = h.request(method, path, content=content, headers=ctype)
                assert r.status_code == 422, r.text
                err = r.json()
                named = '"user", "probe"' if path.endswith("jobs") else '"weight", "cohort"'
                assert f"a key given twice in one object ({named})" in err["detail"], err
                assert err["errors"] == [{"field": "body", "message": err["detail"][6:]}]
        # the same bodies with each key once are taken
        r = h.post(
            "/api/v1/jobs",
            content=b'{"spec": {"name": "once", "command": ["true"]}}',
            headers={"content-type": "application/json"},
        )
        assert r.status_code == 201, r.text
    with cluster.admin() as a:
        assert [j for j in a.jobs(all_states=True) if j.spec["name"] == "twice"] == []
        assert "twice" not in [q.name for q in a.queues()]


def test_a_query_parameter_given_twice_is_a_422_naming_it(cluster: LocalCluster) -> None:
    # FastAPI keeps the last of two; a proxy or a log may read the first
    auth = {"authorization": f"Bearer {cluster.admin_token}"}
    with httpx.Client(base_url=f"{cluster.url}/api/v1", headers=auth, timeout=30) as h:
        r = h.get("/jobs", params=[("user", "alice"), ("limit", "5"), ("user", "bob")])
        assert r.status_code == 422, r.text
        err = r.json()
        assert err["errors"] == [
            {"field": "query.user", "message": "given 2 times; it takes one value"}
        ], err
        r = h.get("/jobs", params=[("user", "alice"), ("limit", "5")])  # each once: served
        assert r.status_code == 200, r.text


def test_a_request_that_is_not_http_is_a_400_in_the_error_shape(cluster: LocalCluster) -> None:
    for request in (
        b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-nul: a\x00b\r\n\r\n",  # a NUL in a header
        b"GET /healthz HTTP/1.1\r\nho st: x\r\n\r\n",  # a space in a header's name
        b"POST /api/v1/jobs HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
    ):
        with _connect(cluster) as s:
            s.sendall(request)
            got = _answer(s)
        head, _, body = got.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400 "), got[:300]
        err = json.loads(body)
        assert err["detail"].startswith("request: not valid HTTP/1.1"), err
        assert err["errors"] == [{"field": "headers", "message": err["detail"]}]
    with cluster.client() as c:
        assert c.health()["ok"]


def test_a_number_of_more_digits_than_python_reads_is_told_as_such(cluster: LocalCluster) -> None:
    # json.loads refuses an integer of more than 4300 digits (CPython's limit on converting
    # one, against quadratic time); the answer said "not UTF-8 encoded JSON"
    auth = {"authorization": f"Bearer {cluster.admin_token}", "content-type": "application/json"}
    body = '{"spec": {"name": "digits", "command": ["true"], "workers": ' + "9" * 5000 + "}}"
    with httpx.Client(base_url=cluster.url, headers=auth, timeout=30) as h:
        r = h.post("/api/v1/jobs", content=body.encode())
    assert r.status_code == 422, r.text
    msg = f"cannot be read: a whole number of more than {sys.get_int_max_str_digits()} digits"
    assert r.json()["errors"] == [{"field": "body", "message": msg}], r.text
