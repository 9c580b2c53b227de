"""What waits to be sent to the controller: task events (a bounded in-memory queue) and logs
(tails of files on disk, so memory stays small however much a task prints).

Both are at-least-once: an item leaves only when the controller acknowledged it, and a failed
send is retried from the same place. Log offsets are those of the text the controller has
stored (its ``LogStore`` appends at the offset we name), which is why a tail counts the bytes
of what it *sent*, apart from how far it has *read* in the raw file.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from gpufleet.agent.tasks import Key
from gpufleet.api.schemas import AgentEvent, LogChunk

log = logging.getLogger(__name__)

Stream = Literal["stdout", "stderr"]
_STREAMS: tuple[Stream, Stream] = ("stdout", "stderr")
CHUNK_BYTES = 64 * 1024


class EventQueue:
    """Thread-safe FIFO; past ``limit`` the oldest events go (counted in ``dropped``)."""

    def __init__(self, limit: int = 10_000) -> None:
        self._q: deque[AgentEvent] = deque()
        self._limit = limit
        self._lock = threading.Lock()
        self.dropped = 0

    def put(self, ev: AgentEvent) -> None:
        with self._lock:
            self._q.append(ev)
            while len(self._q) > self._limit:
                lost = self._q.popleft()
                self.dropped += 1
                log.error("event queue full: dropped %s %s/%d", lost.kind, lost.job, lost.attempt)

    def peek(self, n: int) -> list[AgentEvent]:
        with self._lock:
            return [self._q[i] for i in range(min(n, len(self._q)))]

    def ack(self, events: list[AgentEvent]) -> None:
        """Remove the events just sent (still at the head unless overflow dropped them)."""
        with self._lock:
            for ev in events:
                if self._q and self._q[0] is ev:
                    self._q.popleft()

    def __len__(self) -> int:
        with self._lock:
            return len(self._q)


def utf8_cut(raw: bytes) -> int:
    """The length of ``raw`` without a trailing, incomplete UTF-8 character."""
    for back in range(1, min(4, len(raw)) + 1):
        b = raw[-back]
        if b & 0xC0 == 0x80:
            continue  # a continuation byte: keep looking for the lead
        if b < 0xC0 or b >= 0xF8:
            return len(raw)  # ASCII, or not UTF-8 at all (replaced when decoded)
        need = 2 if b < 0xE0 else 3 if b < 0xF0 else 4
        return len(raw) - back if need > back else len(raw)
    return len(raw)


@dataclass
class LogTail:
    key: Key
    stream: Stream
    path: Path
    read_pos: int = 0  # raw bytes of the file consumed
    sent: int = 0  # bytes of text the controller holds
    complete: bool = False  # the task exited: what the file holds now is all there is
    final_sent: bool = False
    # where what was acknowledged is kept (``read_pos sent``), so that the agent after us
    # resumes there, not at 0 (ADR 0031); None: not kept
    mark: Path | None = None

    @property
    def id(self) -> tuple[Key, Stream]:
        return self.key, self.stream

    def next_chunk(
        self, limit: int = CHUNK_BYTES, *, final_ok: bool = True
    ) -> tuple[LogChunk, int] | None:
        """The next chunk to send and how many raw bytes it consumes, or None (up to date).
        ``final_ok`` False: not the last one yet (its task's exit has not been sent)."""
        if self.final_sent:
            return None
        # read before the file: an exit after the read is not final
        complete = self.complete and final_ok
        try:
            with self.path.open("rb") as f:
                f.seek(self.read_pos)
                raw = f.read(limit + 1)
        except FileNotFoundError:
            raw = b""
        at_end = len(raw) <= limit
        raw = raw[:limit]
        if not (complete and at_end):
            raw = raw[: utf8_cut(raw)]  # the rest of the character comes with the next chunk
        final = complete and at_end
        if not raw and not final:
            return None
        job, attempt, rank = self.key
        chunk = LogChunk(
            job=job,
            attempt=attempt,
            rank=rank,
            stream=self.stream,
            offset=self.sent,
            data=raw.decode("utf-8", errors="replace"),
            final=final,
        )
        return chunk, len(raw)

    def ack(self, chunk: LogChunk, raw_len: int) -> None:
        self.read_pos += raw_len
        self.sent += len(chunk.data.encode())
        self.final_sent = chunk.final
        if self.mark is not None and not self.final_sent:
            with contextlib.suppress(OSError):  # a full disk: the next agent starts at 0
                self.mark.write_text(f"{self.read_pos} {self.sent}")

    def resume(self) -> None:
        """Where the agent before us had got to (the controller holds at least that)."""
        if self.mark is None:
            return
        try:
            read_pos, sent = (int(x) for x in self.mark.read_text().split())
        except (OSError, ValueError):
            return
        if min(read_pos, sent) >= 0:
            self.read_pos, self.sent = read_pos, sent


class LogTails:
    """The tails still to ship; the agent adds one pair per task, marks them complete on exit."""

    def __init__(self) -> None:
        self._tails: dict[tuple[Key, Stream], LogTail] = {}
        self._lock = threading.Lock()

    def track(self, key: Key, out: Path, err: Path, *, resume: bool = False) -> None:
        """Ship the task's two logs; ``resume``: from where a previous agent had got to (an
        adopted task's), else from the start."""
        with self._lock:
            for stream, path in zip(_STREAMS, (out, err), strict=True):
                if (key, stream) in self._tails:
                    continue
                tail = LogTail(key, stream, path, mark=path.with_name(f"{path.name}.shipped"))
                if resume:
                    tail.resume()
                self._tails[(key, stream)] = tail

    def tracked(self, key: Key) -> bool:
        with self._lock:
            return (key, _STREAMS[0]) in self._tails

    def complete(self, key: Key) -> None:
        with self._lock:
            for stream in _STREAMS:
                t = self._tails.get((key, stream))
                if t is not None:
                    t.complete = True

    def completed(self) -> set[tuple[Key, Stream]]:
        """The tails marked complete now (their tasks have exited)."""
        with self._lock:
            return {t.id for t in self._tails.values() if t.complete}

    def pending(self) -> list[LogTail]:
        with self._lock:
            return list(self._tails.values())

    def drop(self, tail: LogTail) -> None:
        with self._lock:
            self._tails.pop((tail.key, tail.stream), None)
