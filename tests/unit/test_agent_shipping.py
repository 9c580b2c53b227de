"""Event queue bounds and log tails: offsets of the text sent, UTF-8 never split, one final."""

from __future__ import annotations

from pathlib import Path

from gpufleet.agent.shipping import EventQueue, LogTail, LogTails, utf8_cut
from gpufleet.api.schemas import AgentEvent


def ev(n: int) -> AgentEvent:
    return AgentEvent(kind="started", job=f"j{n}", attempt=0, rank=0)


def test_event_queue_is_fifo_acks_what_was_sent_and_drops_the_oldest_past_its_bound() -> None:
    q = EventQueue(limit=3)
    for n in range(5):
        q.put(ev(n))
    assert q.dropped == 2
    batch = q.peek(2)
    assert [e.job for e in batch] == ["j2", "j3"]
    q.put(ev(5))  # arrives while the batch is in flight
    q.ack(batch)
    assert [e.job for e in q.peek(10)] == ["j4", "j5"]


def test_utf8_cut() -> None:
    s = "añ€😀".encode()
    assert utf8_cut(s) == len(s)
    assert utf8_cut(s[:-1]) == len(s) - 4  # half an emoji is held back
    assert utf8_cut(s[:2]) == 1  # half an ñ
    assert utf8_cut(b"") == 0
    assert utf8_cut(b"\xff\xfe") == 2  # not UTF-8 at all: sent as is (replaced on decode)


def drain(t: LogTail, limit: int) -> list[tuple[int, str, bool]]:
    out = []
    for _ in range(100):
        nxt = t.next_chunk(limit)
        if nxt is None:
            break
        chunk, raw = nxt
        t.ack(chunk, raw)
        out.append((chunk.offset, chunk.data, chunk.final))
    return out


def test_log_tail_ships_growing_file_without_splitting_characters(tmp_path: Path) -> None:
    p = tmp_path / "rank0.out"
    t = LogTail(("j", 0, 0), "stdout", p)
    assert t.next_chunk() is None  # no file yet, task still running
    p.write_bytes("héllo €".encode())
    chunks = drain(t, limit=7)
    assert "".join(c[1] for c in chunks) == "héllo €"
    assert all(not final for _, _, final in chunks)
    with p.open("ab") as f:
        f.write(b"\nbye")
    t.complete = True
    more = drain(t, limit=64)
    assert more == [(len("héllo €".encode()), "\nbye", True)]
    assert t.next_chunk() is None  # after the final, nothing


def test_offsets_count_the_text_sent_not_the_raw_bytes(tmp_path: Path) -> None:
    p = tmp_path / "rank0.err"
    p.write_bytes(b"\xffab")  # an invalid byte becomes U+FFFD: 3 bytes on the controller
    t = LogTail(("j", 0, 0), "stderr", p, complete=True)
    [(off, data, final)] = drain(t, 64)
    assert (off, data, final) == (0, "\ufffdab", True)
    assert t.sent == 5 and t.read_pos == 3


def test_an_empty_log_of_a_finished_task_still_sends_its_final(tmp_path: Path) -> None:
    t = LogTail(("j", 0, 0), "stdout", tmp_path / "never-written", complete=True)
    assert drain(t, 64) == [(0, "", True)]


def test_the_next_agent_ships_an_adopted_log_on_from_where_the_last_one_got_to(
    tmp_path: Path,
) -> None:
    out, err = tmp_path / "rank0.out", tmp_path / "rank0.err"
    out.write_bytes("été\n".encode())
    err.write_bytes(b"")
    first = LogTails()
    first.track(("j", 1, 0), out, err)
    tail = next(t for t in first.pending() if t.stream == "stdout")
    got = tail.next_chunk()
    assert got is not None
    tail.ack(*got)  # the controller holds it; then this agent dies
    with out.open("ab") as f:
        f.write(b"more\n")
    second = LogTails()
    second.track(("j", 1, 0), out, err, resume=True)
    again = next(t for t in second.pending() if t.stream == "stdout")
    nxt = again.next_chunk()
    assert nxt is not None and (nxt[0].offset, nxt[0].data) == (len("été\n".encode()), "more\n")
    fresh = LogTails()  # a task of our own starts at 0
    fresh.track(("j", 1, 0), out, err)
    assert next(t for t in fresh.pending() if t.stream == "stdout").read_pos == 0
