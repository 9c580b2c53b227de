"""The gateway's access-log counter (gateway/files.py ``LogCounter``): counts per service from
lines appended since the last read, a half-written line read next time, and what was read
given back to the file system while the proxy keeps appending (O_APPEND, as HAProxy's stdout
and nginx's access_log write), nothing counted twice or lost."""

from __future__ import annotations

import os
from pathlib import Path

from gpufleet.gateway.files import LogCounter, punch_hole


def append(fd: int, text: str) -> None:
    os.write(fd, text.encode())


def test_counts_lines_as_they_are_appended_a_partial_line_next_time(tmp_path: Path) -> None:
    log = tmp_path / "access.log"
    c = LogCounter(log)
    assert c.read() == {}  # no log yet
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    append(fd, "web 200\nweb 404\napi 503\nweb 401 unauth\nweb 2")
    assert c.read() == {"web": [3, 2, 0, 1], "api": [1, 0, 1, 0]}
    append(fd, "00\nnoise\n")
    assert c.read()["web"] == [4, 2, 0, 1]
    os.close(fd)


def test_what_was_read_is_released_and_the_counts_stay_whole(tmp_path: Path) -> None:
    log = tmp_path / "access.log"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    probe = os.open(tmp_path / "probe", os.O_RDWR | os.O_CREAT, 0o600)
    os.write(probe, b"x" * 8192)
    supported = punch_hole(probe, 0, 4096)
    os.close(probe)
    c = LogCounter(log, release_bytes=64 << 10)
    line = "web 200\n"
    per_round = 40_000  # 320 kB a round
    for _ in range(10):
        append(fd, line * per_round)
        c.read()
    os.close(fd)
    assert c.counts["web"][0] == 10 * per_round  # every line counted once
    st = log.stat()
    assert st.st_size == 10 * per_round * len(line)  # the proxies' offsets never moved
    if supported:  # ext4, xfs, tmpfs: the read part is gone from the disk
        assert st.st_blocks * 512 < 128 << 10, st.st_blocks
        assert c.released >= st.st_size - (64 << 10) - 4096
    else:
        assert c.released == c.offset  # tried once, then left alone
