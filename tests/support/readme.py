"""The README's commands as its tests run them: a section's fenced blocks, a ``gpufleet …`` line
run as written (this checkout's CLI, its exit status asserted), and a whole ``sh`` block run as
a script in a process group of its own, with the caller's controller settings removed, and the
group stopped after (SIGTERM, then SIGKILL for what outlived it)."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from support.waiting import wait_for

README = Path(__file__).parents[2] / "README.md"
# what would point a README command at the test runner's own controller instead of the script's
CALLERS_SETTINGS = ("GPUFLEET_SERVER", "GPUFLEET_TOKEN", "GPUFLEET_TOKEN_FILE", "GPUFLEET_DB")


def section(title: str) -> str:
    """The text of the README's ``### title`` section, up to the next ``###`` heading."""
    return README.read_text().split(f"### {title}\n", 1)[1].split("\n### ", 1)[0]


def blocks(text: str, kind: str = "sh") -> list[str]:
    """The bodies of ``text``'s fenced blocks of ``kind`` (``sh``, ``yaml``), in order."""
    return [part.split("```", 1)[0] for part in text.split(f"```{kind}\n")[1:]]


def lines(block: str) -> list[str]:
    """A block's lines that are not blank."""
    return [line for line in block.splitlines() if line.strip()]


def argv(line: str) -> list[str]:
    """A README command line as a process's arguments: its ``  # comment`` cut off, and
    ``gpufleet`` as this checkout's CLI under this interpreter."""
    words = shlex.split(line.split("  #")[0])
    if words[0] == "gpufleet":
        return [sys.executable, "-m", "gpufleet.cli.main", *words[1:]]
    return words


def run_line(
    line: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout_s: float = 120
) -> str:
    """Run one README command line as written; its stdout, after asserting it exited 0."""
    done = subprocess.run(
        argv(line), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s
    )
    assert done.returncode == 0, (line, done.stdout, done.stderr)
    return done.stdout


def script_env() -> dict[str, str]:
    """This environment for a README script: this venv's ``bin`` first on PATH (its
    ``gpufleet``), none of the caller's controller settings."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    for k in CALLERS_SETTINGS:
        env.pop(k, None)
    # a reader's wide terminal: piped, rich tables wrap at 80 columns, splitting their words
    env["COLUMNS"] = "200"
    return env


def group_alive(pgid: int) -> bool:
    """Whether any process of the group ``pgid`` is still there."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def stop_group(pgid: int, grace_s: float) -> None:
    """SIGTERM the group; SIGKILL whatever of it is left after ``grace_s``. A group that needed
    the SIGKILL fails the test (its processes should stop on SIGTERM), after it is gone."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        wait_for("the README's processes stopped", lambda: not group_alive(pgid), grace_s)
    finally:
        with suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)


@contextmanager
def running_script(
    script: str, cwd: Path, env: dict[str, str], stop_grace_s: float = 30
) -> Iterator[subprocess.Popen[str]]:
    """``bash -ec script`` in a process group of its own (stdout and stderr together, as
    text); the group stopped on the way out, whatever the test's outcome."""
    sh = subprocess.Popen(
        ["bash", "-ec", script], cwd=cwd, env=env, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        yield sh
    finally:
        stop_group(sh.pid, stop_grace_s)
