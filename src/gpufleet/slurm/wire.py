"""What srun and a step daemon say to each other: length-prefixed JSON messages (never pickle),
each at most ``MAX_MESSAGE`` bytes, after a mutual HMAC challenge–response on the job's step
key. Both sides prove they hold the key before anything else is read or sent: the launch
carries the job's environment, which may hold secrets."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import socket
import struct
from typing import Any

MAX_MESSAGE = 8 << 20  # a launch: the step's environment once, each task's own values
AUTH_MESSAGE = 4096  # before both sides proved they hold the key: a challenge, an answer
_LEN = struct.Struct("!I")
NONCE_BYTES = 32
AUTH_TIMEOUT_S = 10.0


class WireError(Exception):
    """The peer broke the protocol: a message too long, not JSON, or not what was due."""


def step_key() -> bytes:
    """The job's step key from the environment (hex, as the controller gives it)."""
    text = os.environ.get("GPUFLEET_STEP_KEY", "")
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) < 16:
        raise WireError("GPUFLEET_STEP_KEY is missing or not a hex key of 16 bytes or more")
    return key


def parse_hosts(text: str) -> list[tuple[str, int]]:
    """``GPUFLEET_STEP_HOSTS``: ``addr:port`` per node slot, comma-separated, worker order (an
    IPv6 address in brackets)."""
    out: list[tuple[str, int]] = []
    bad: list[str] = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        host, sep, port = item.rpartition(":")
        host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            bad.append(item)
        else:
            out.append((host, int(port)))
    if bad or not out:
        raise WireError(f"GPUFLEET_STEP_HOSTS: bad entries {bad or [text]} (want addr:port,...)")
    return out


def mac(key: bytes, role: str, nonce: bytes) -> str:
    # the role in the message: a stepd's answer can never be replayed as srun's, or back
    return hmac.new(key, role.encode() + b"\0" + nonce, hashlib.sha256).hexdigest()


def nonce() -> bytes:
    return secrets.token_bytes(NONCE_BYTES)


def send(sock: socket.socket, msg: dict[str, Any]) -> None:
    data = json.dumps(msg, separators=(",", ":")).encode()
    if len(data) > MAX_MESSAGE:
        raise WireError(f"message of {len(data)} bytes over the limit of {MAX_MESSAGE}")
    sock.sendall(_LEN.pack(len(data)) + data)


def _exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 16))
        if not chunk:
            raise ConnectionError("the peer closed the connection")
        buf += chunk
    return bytes(buf)


def recv(sock: socket.socket, limit: int = MAX_MESSAGE) -> dict[str, Any]:
    (n,) = _LEN.unpack(_exactly(sock, _LEN.size))
    if n > limit:
        raise WireError(f"message of {n} bytes over the limit of {limit}")
    try:
        msg = json.loads(_exactly(sock, n))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise WireError(f"not JSON: {e}") from None
    if not isinstance(msg, dict):
        raise WireError("a message must be a JSON object")
    return msg


def _hex(msg: dict[str, Any], field: str) -> bytes:
    v = msg.get(field)
    try:
        b = bytes.fromhex(v) if isinstance(v, str) else b""
    except ValueError:
        b = b""
    if len(b) != NONCE_BYTES:
        raise WireError(f"bad or missing {field!r}")
    return b


def serve_auth(sock: socket.socket, key: bytes) -> None:
    """The step daemon's side: challenge, check srun's answer, answer srun's challenge."""
    ours = nonce()
    send(sock, {"v": 1, "challenge": ours.hex()})
    msg = recv(sock, AUTH_MESSAGE)
    theirs = _hex(msg, "challenge")
    answer = msg.get("mac")
    if not isinstance(answer, str) or not hmac.compare_digest(answer, mac(key, "srun", ours)):
        send(sock, {"error": "authentication failed"})
        raise WireError("authentication failed")
    send(sock, {"mac": mac(key, "stepd", theirs)})


def client_auth(sock: socket.socket, key: bytes) -> None:
    """srun's side: answer the challenge and check that the daemon holds the key too."""
    msg = recv(sock, AUTH_MESSAGE)
    if msg.get("v") != 1:
        raise WireError(f"not a gpufleet step daemon (protocol {msg.get('v')!r})")
    theirs = _hex(msg, "challenge")
    ours = nonce()
    send(sock, {"mac": mac(key, "srun", theirs), "challenge": ours.hex()})
    reply = recv(sock, AUTH_MESSAGE)
    if "error" in reply:
        raise WireError(f"the step daemon refused: {reply['error']}")
    answer = reply.get("mac")
    if not isinstance(answer, str) or not hmac.compare_digest(answer, mac(key, "stepd", ours)):
        raise WireError("the step daemon did not prove it holds the job's step key")
