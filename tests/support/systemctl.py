"""A ``systemctl`` for the README's tests, on a machine without systemd: ``daemon-reload``
does nothing, ``enable --now UNIT`` starts the ``ExecStart=`` line of ``$UNITS/UNIT.service``
as written (in a session of its own, its log in ``$LOGS``, its pid appended to
``$LOGS/pids``), so that what ``gpufleet setup`` wrote is what runs."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

TEXT = """#!/bin/sh
# the test's systemctl: daemon-reload does nothing; enable --now UNIT runs UNIT's ExecStart
case "$1" in
  daemon-reload) exit 0 ;;
  enable) [ "$2" = --now ] || exit 2
    line=$(sed -n 's/^ExecStart=//p' "$UNITS/$3.service")
    [ -n "$line" ] || { echo "no unit $3" >&2; exit 1; }
    setsid sh -c "exec $line" > "$LOGS/$3.log" 2>&1 < /dev/null &
    echo $! >> "$LOGS/pids" ;;
  *) echo "systemctl $*: not in the test's" >&2; exit 2 ;;
esac
"""


def install(directory: Path) -> Path:
    """Write it as ``directory/systemctl``."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "systemctl"
    path.write_text(TEXT)
    path.chmod(0o755)
    return path


def stop_all(logs: Path) -> None:
    """SIGTERM to every session it started (the services and what they started)."""
    pids = logs / "pids"
    for pid in pids.read_text().split() if pids.exists() else []:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(int(pid), signal.SIGTERM)


def logs_of(logs: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text()}" for p in sorted(logs.glob("*.log")))
