"""Whether the node rebooted since the agent last ran, from the kernel's boot id.

Linux gives each boot a random id (``/proc/sys/kernel/random/boot_id``). The agent keeps the
one it ran under in its data directory (``boot_id``); a different one at its next start means
a reboot came between: every task the old pid files name died with the boot (those pids are
other processes now), and the lease the old agent published is on a monotonic clock that
started again, so nothing is adopted and the controller requeues those jobs at once (ADR 0031).
The same id means only the agent process restarted: its tasks may still run and are adopted.
A test fakes a reboot with another file (``--boot-id-file``).
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
STORED = "boot_id"


@dataclass(frozen=True, slots=True)
class Boot:
    current: str  # "": unknown (no such file)
    previous: str  # what the data directory says ("": nothing, a first start)

    @property
    def rebooted(self) -> bool:
        return bool(self.current and self.previous and self.current != self.previous)


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()[:100]
    except OSError:
        return ""


def check(data_dir: Path, source: Path = BOOT_ID) -> Boot:
    boot = Boot(_read(Path(source)), _read(Path(data_dir) / STORED))
    if not boot.current:
        log.warning("cannot read the boot id from %s: a reboot is told by the pids alone", source)
    elif boot.rebooted:
        log.warning("the node rebooted (boot id %s, was %s)", boot.current, boot.previous)
    return boot


def save(data_dir: Path, boot: Boot) -> None:
    """Once what the old boot left is settled (a crash before then sees the reboot again)."""
    if not boot.current or boot.current == boot.previous:
        return
    path = Path(data_dir) / STORED
    tmp = path.with_name(f".{STORED}.tmp")
    try:
        tmp.write_text(boot.current + "\n")
        os.replace(tmp, path)
    except OSError as e:
        log.warning("cannot keep the boot id in %s: %s", path, e)
        with contextlib.suppress(OSError):
            tmp.unlink()
