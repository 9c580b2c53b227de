"""HTTP/1.1 message framing for the built-in proxy: heads, bodies, short answers."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

HEAD_LIMIT = 64 * 1024
CHUNK = 64 * 1024


class BadRequest(Exception):
    pass


@dataclass
class Head:
    first: bytes
    headers: list[tuple[bytes, bytes]]

    def get(self, name: bytes) -> bytes | None:
        for k, v in self.headers:
            if k.lower() == name:
                return v
        return None

    def tokens(self, name: bytes) -> set[bytes]:
        out: set[bytes] = set()
        for k, v in self.headers:
            if k.lower() == name:
                out |= {t.strip().lower() for t in v.split(b",")}
        return out


async def read_head(reader: asyncio.StreamReader) -> Head | None:
    """The next message head, or None at a clean EOF before any byte."""
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as e:
        if not e.partial:
            return None
        raise BadRequest("connection closed inside a message head") from e
    except asyncio.LimitOverrunError as e:
        raise BadRequest("message head too large") from e
    lines = raw[:-4].split(b"\r\n")
    headers = []
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not name or name != name.strip():
            raise BadRequest(f"bad header line {line[:80]!r}")
        headers.append((name, value.strip()))
    return Head(lines[0], headers)


async def copy_body(
    head: Head, src: asyncio.StreamReader, dst: asyncio.StreamWriter, until_close: bool
) -> None:
    """Copy one message body as framed by ``head`` (chunked, Content-Length, or to EOF)."""
    if b"chunked" in head.tokens(b"transfer-encoding"):
        while True:
            line = await src.readuntil(b"\r\n")
            dst.write(line)
            size = int(line.split(b";")[0].strip(), 16)
            if size == 0:
                while (trailer := await src.readuntil(b"\r\n")) != b"\r\n":
                    dst.write(trailer)
                dst.write(b"\r\n")
                break
            await copy_n(src, dst, size + 2)
        await dst.drain()
    elif (length := head.get(b"content-length")) is not None:
        await copy_n(src, dst, int(length))
    elif until_close:
        while data := await src.read(CHUNK):
            dst.write(data)
            await dst.drain()


async def copy_n(src: asyncio.StreamReader, dst: asyncio.StreamWriter, n: int) -> None:
    while n > 0:
        data = await src.read(min(n, CHUNK))
        if not data:
            raise asyncio.IncompleteReadError(b"", n)
        dst.write(data)
        n -= len(data)
        await dst.drain()


def has_body(head: Head) -> bool:
    return head.get(b"content-length") not in (None, b"0") or bool(
        head.tokens(b"transfer-encoding")
    )


def simple(status: int, reason: str, extra: str = "") -> bytes:
    body = f"{reason.lower()}\n".encode()
    return (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: text/plain\r\n{extra}"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    ).encode() + body
