"""The door of a desktop session on its node: the only socket of the session that listens
beyond the node's loopback (``$PORT``). A connection whose first request does not carry the
replica's key (``X-Gpufleet-Desktop-Key``, which the service gateway adds: ADR 0047) is
answered 403 and closed; one that does is spliced, the key taken out of its first request,
to websockify on 127.0.0.1. The rest of that connection goes through unread: it came from
the gateway, which checked each of its client's requests against the owner's tokens.

``GET /.gpufleet/ready`` is answered 200 without a key (the replica's readiness probe, from
its agent, which has no key; it says only that the session listens).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import threading

from gpufleet.base.aiotasks import end_other_tasks

KEY_HEADER = b"x-gpufleet-desktop-key"  # gateway.routes.KEY_HEADER, lowercased
READY = b"/.gpufleet/ready"
HEAD_MAX = 16384  # the first request's head (noVNC's are well under 2 KiB)
HEAD_S = 10.0  # a connection that sends no whole head in this long is closed
CHUNK = 65536


def _answer(status: str, body: bytes) -> bytes:
    return (
        f"HTTP/1.1 {status}\r\ncontent-type: text/plain\r\ncontent-length: {len(body)}\r\n"
        "cache-control: no-store\r\nconnection: close\r\n\r\n"
    ).encode() + body


REFUSED = _answer("403 Forbidden", b"this desktop opens only through the gpufleet gateway\n")
READY_ANSWER = _answer("200 OK", b"ready\n")


def checked(head: bytes, key: bytes) -> bytes | None:
    """The first request's head without its key line, when it carried ``key``; else None.
    A head with two key lines is refused (which one the session saw would be ambiguous)."""
    lines = head.split(b"\r\n")
    keep, given = [], []
    for line in lines:
        name, sep, value = line.partition(b":")
        if sep and name.strip().lower() == KEY_HEADER:
            given.append(value.strip())
        else:
            keep.append(line)
    if len(given) != 1 or not hmac.compare_digest(given[0], key):
        return None
    return b"\r\n".join(keep)


def is_ready_probe(head: bytes) -> bool:
    parts = head.split(b"\r\n", 1)[0].split(b" ")
    return len(parts) == 3 and parts[0] in (b"GET", b"HEAD") and parts[1] == READY


class Door:
    """An asyncio server on its own thread: ``start()`` listens (and returns once it does),
    ``stop()`` closes it."""

    def __init__(self, listen: str, port: int, target: int, key: str) -> None:
        self.listen, self.port, self.target = listen, port, target
        self.key = key.encode()
        self.refused = 0  # connections refused for a missing or wrong key
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None

    def start(self) -> None:
        self._thread.start()
        fut = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, self.listen, self.port, limit=HEAD_MAX),
            self._loop,
        )
        self._server = fut.result(10)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Close the listener, end the connections being served, then the loop and its
        thread: a connection left pending would be ended by the garbage collector later, its
        ``finally`` closing a writer on a closed loop."""
        if not self._thread.is_alive():
            return
        ended = asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop)
        with contextlib.suppress(Exception):
            ended.result(timeout_s)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout_s)

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        await end_other_tasks()  # the connections being served

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_S)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
                return
            if is_ready_probe(head):
                writer.write(READY_ANSWER)
                await writer.drain()
                return
            passed = checked(head, self.key)
            if passed is None:
                self.refused += 1
                writer.write(REFUSED)
                await writer.drain()
                return
            br, bw = await asyncio.open_connection("127.0.0.1", self.target)
            bw.write(passed)
            await _splice(reader, writer, br, bw)
        except OSError:
            pass
        finally:
            writer.close()


async def _splice(
    cr: asyncio.StreamReader,
    cw: asyncio.StreamWriter,
    br: asyncio.StreamReader,
    bw: asyncio.StreamWriter,
) -> None:
    async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await src.read(CHUNK):
                dst.write(data)
                await dst.drain()
        with contextlib.suppress(OSError):
            if dst.can_write_eof():
                dst.write_eof()

    try:
        await asyncio.gather(pipe(cr, bw), pipe(br, cw))
    finally:
        bw.close()
