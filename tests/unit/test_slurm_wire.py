"""srun's and the step daemon's handshake over a real socket pair: both must prove the key."""

from __future__ import annotations

import socket
import threading

import pytest

from gpufleet.slurm import wire

KEY = b"k" * 32


def handshake(server_key: bytes, client_key: bytes) -> tuple[Exception | None, Exception | None]:
    a, b = socket.socketpair()
    errors: list[Exception | None] = [None]

    def serve() -> None:
        try:
            wire.serve_auth(a, server_key)
        except Exception as e:
            errors[0] = e
        finally:
            a.close()

    t = threading.Thread(target=serve)
    t.start()
    client: Exception | None = None
    try:
        wire.client_auth(b, client_key)
    except Exception as e:
        client = e
    finally:
        b.close()
    t.join(10)
    return errors[0], client


def test_the_same_key_on_both_sides() -> None:
    assert handshake(KEY, KEY) == (None, None)


def test_a_wrong_key_is_refused_either_way() -> None:
    server, client = handshake(KEY, b"x" * 32)
    assert isinstance(server, wire.WireError) and "authentication failed" in str(server)
    assert isinstance(client, wire.WireError) and "refused" in str(client)


def test_a_message_over_the_limit_is_refused_before_it_is_read() -> None:
    a, b = socket.socketpair()
    with a, b:
        a.sendall((wire.AUTH_MESSAGE + 1).to_bytes(4, "big"))
        with pytest.raises(wire.WireError, match="over the limit"):
            wire.recv(b, wire.AUTH_MESSAGE)


def test_hosts_and_key_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert wire.parse_hosts("10.0.0.1:27501,[fe80::1]:27502") == [
        ("10.0.0.1", 27501),
        ("fe80::1", 27502),
    ]
    with pytest.raises(wire.WireError, match=r"bad entries \['nope', 'h:0'\]"):
        wire.parse_hosts("nope,h:0,h:1")
    monkeypatch.setenv("GPUFLEET_STEP_KEY", "abcd")
    with pytest.raises(wire.WireError, match="16 bytes or more"):
        wire.step_key()
