"""A job's metrics file (model/jobmetrics.py, agent/runner/metricsfile.py): what is taken,
what is refused and said, and what the agent, which may be root, never reads (a symlink, a
FIFO, a file of another owner, a big one)."""

from __future__ import annotations

import os
from pathlib import Path

from gpufleet.agent.runner.metricsfile import read
from gpufleet.model.jobmetrics import MAX_BYTES, MAX_METRICS, MAX_PROBLEMS, parse


def test_name_value_and_name_equals_value_are_taken_in_order() -> None:
    got, problems = parse(b"# hi\n\nfps 412.5\nframes=1200\nneg -3e2\n")
    assert got == (("fps", 412.5), ("frames", 1200.0), ("neg", -300.0)) and problems == ()


def test_bad_lines_are_named_and_the_good_ones_kept() -> None:
    got, problems = parse(b'a inf\nb -nan\nc x\nd 1 2\ne{x="1"} 1\nf 1\n')
    assert got == (("f", 1.0),)
    assert [p.split(":")[0] for p in problems] == ["line 1", "line 2", "line 3", "line 4", "line 5"]


def test_too_many_names_and_problems_are_bounded() -> None:
    lines = "".join(f"m{i} {i}\n" for i in range(MAX_METRICS + 5)).encode()
    got, problems = parse(lines)
    assert len(got) == MAX_METRICS and len(problems) == 1
    _, problems = parse(b"x nan\n" * 50)
    assert len(problems) == MAX_PROBLEMS and problems[-1].startswith("and ")


def test_a_big_file_or_not_utf8_is_not_read() -> None:
    assert parse(b"a 1\n", size=MAX_BYTES + 1) == (
        (),
        (f"the file is over {MAX_BYTES} bytes: not read",),
    )
    assert parse(b"\xff\xfe 1\n")[0] == ()


def test_the_agent_reads_only_a_regular_file_of_the_tasks_own(tmp_path: Path) -> None:
    f = tmp_path / "m"
    assert read(str(f), None) is None  # not written yet
    f.write_text("a 1\n")
    got = read(str(f), os.getuid())
    assert not isinstance(got, str) and got is not None and got[1] == b"a 1\n"
    assert read(str(f), os.getuid() + 1) == "the file is not the task's own: not read"
    secret = tmp_path / "secret"
    secret.write_text("root only\n")
    link = tmp_path / "link"
    link.symlink_to(secret)
    assert isinstance(read(str(link), None), str)  # never followed
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert read(str(fifo), None) == "the file is not a regular file: not read"  # no hang
    big = tmp_path / "big"
    big.write_bytes(b"a" * (MAX_BYTES + 10))
    got = read(str(big), None)
    assert not isinstance(got, str) and got is not None and got[1] == b""
