"""Small file and process helpers the proxy drivers share."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

REAP_WAIT_S = 5.0


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so a reader sees the old file or the new one, never half."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def children(pid: int) -> set[int]:
    """PIDs whose parent is ``pid`` (from /proc; Linux only)."""
    out: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # the command name is in parentheses and may hold spaces: split after the last ")"
        fields = stat.rpartition(")")[2].split()
        if len(fields) > 1 and fields[1] == str(pid):
            out.add(int(entry))
    return out


def check_output(cmd: list[str]) -> tuple[int, str]:
    """Run a proxy's config check: its exit status and its own combined output."""
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    return proc.returncode, (proc.stdout + proc.stderr).strip()


def tail(path: Path, n: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


REFUSED = "unauth"  # an access log line's third field: the gateway's token check refused it


class LogCounter:
    """Counts an access log's lines ``KEY STATUS [unauth]`` per key (requests, 4xx, 5xx,
    refused by the token check), reading only what was appended since the last call. A log
    survives reloads, so the counts do too.

    What was read is given back to the file system every ``release_bytes`` (a hole punched
    over it: the proxies append with O_APPEND, so neither their writes nor our offset move,
    and nothing written meanwhile is lost, as it would be with a copy and truncate): a
    long-running gateway's log keeps only what is not read yet on disk."""

    def __init__(self, path: Path, release_bytes: int = 8 << 20) -> None:
        self.path = path
        self.offset = 0
        self.released = 0  # the file's bytes before this are a hole
        self.release_bytes = release_bytes
        self.counts: dict[str, list[int]] = {}

    def read(self) -> dict[str, list[int]]:
        try:
            with open(self.path, "rb+") as f:
                f.seek(self.offset)
                data = f.read()
                end = data.rfind(b"\n") + 1  # a line still being written is read next time
                self.offset += end
                if self.offset - self.released >= self.release_bytes:
                    self._release(f.fileno())
        except FileNotFoundError:
            return self.counts
        for line in data[:end].decode(errors="replace").splitlines():
            parts = line.split()
            if len(parts) < 2:
                continue  # not one of ours (a proxy's own message)
            key, status, flag = parts[0], parts[1], parts[2:3]
            c = self.counts.setdefault(key, [0, 0, 0, 0])
            c[0] += 1
            c[1] += status.startswith("4")
            c[2] += status.startswith("5")
            c[3] += flag == [REFUSED]
        return self.counts

    def _release(self, fd: int) -> None:
        upto = self.offset & ~(BLOCK - 1)  # whole blocks only
        if upto > self.released and punch_hole(fd, self.released, upto - self.released):
            self.released = upto
        elif upto > self.released:
            self.released = self.offset  # not supported here: do not try every read


BLOCK = 4096
_FALLOC_FL_KEEP_SIZE, _FALLOC_FL_PUNCH_HOLE = 0x01, 0x02


def punch_hole(fd: int, offset: int, length: int) -> bool:
    """Free ``length`` bytes of ``fd``'s file from ``offset`` (they read as zeros, the size
    stays): Linux's fallocate(2); False where the file system does not support it."""
    import ctypes
    import ctypes.util

    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    fallocate = libc.fallocate
    fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong]
    mode = _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE
    return bool(fallocate(fd, mode, offset, length) == 0)


def reap_previous(pidfile: Path | None) -> None:
    """Stop the proxy a controller that died (SIGKILL, a crash) left running, named by its
    ``pidfile`` ("PID CONFIG"): it is in a session of its own, so it outlives the controller,
    and it would keep the services' ports (HAProxy binds with SO_REUSEPORT: the new proxy would
    share them with the old one, silently, and the old routes and tokens would answer too).
    Only a process whose command line still names that config is stopped (a reused PID is not
    ours), with its whole process group (its workers)."""
    if pidfile is None:
        return
    try:
        pid_text, _, cfg = pidfile.read_text().partition(" ")
        pid = int(pid_text)
    except (OSError, ValueError):
        return
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        cmdline = b""
    if pid > 1 and cfg and cfg.strip().encode() in cmdline:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        deadline = time.monotonic() + REAP_WAIT_S
        while _running(pid) and time.monotonic() < deadline:
            time.sleep(0.02)  # its sockets close as it exits: then the ports are free
    pidfile.unlink(missing_ok=True)


def _running(pid: int) -> bool:
    """Alive and not a zombie (a dead process has closed its sockets)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    fields = stat.rpartition(")")[2].split()
    return bool(fields) and fields[0] != "Z"


def note_pid(pidfile: Path | None, pid: int, cfg: Path) -> None:
    """Name the running proxy for ``reap_previous`` (after a crash of the controller)."""
    if pidfile is not None:
        pidfile.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(pidfile, f"{pid} {cfg}")


def forget_pid(pidfile: Path | None) -> None:
    if pidfile is not None:
        pidfile.unlink(missing_ok=True)
