"""What every shim shares: Slurm's way of failing (``squeue: error: …``, exit 1), its time
formats, and the connection to the controller."""

from __future__ import annotations

import sys
import time

from gpufleet.base.settings import SettingsError, resolve
from gpufleet.client.errors import ApiError

TYPE_CHECKING = False  # no typing at run time: a command starts on few imports (issue 27)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import NoReturn

    from gpufleet.client.lean import LeanClient


class Usage(Exception):
    """A bad command line: printed as ``prog: error: …``, exit 1 (as Slurm's commands), or
    ``status`` where Slurm's command exits otherwise (sbatch: 255 for a bad option)."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


def error(prog: str, message: str) -> None:
    for line in message.splitlines() or [""]:
        sys.stderr.write(f"{prog}: error: {line}\n")


def die(prog: str, message: str, hint: str | None = None, status: int = 1) -> NoReturn:
    error(prog, message)
    if hint:
        sys.stderr.write(f"{prog}: hint: {hint}\n")
    raise SystemExit(status)


def users(text: str | None, me: bool) -> set[str] | None:
    """``-u a,b`` and ``--me`` (this Unix user) as Slurm's commands take them."""
    out = {u.strip() for u in text.split(",") if u.strip()} if text else set()
    if me:
        import getpass

        out.add(getpass.getuser())
    return out or None


def connect(prog: str) -> LeanClient:
    from gpufleet.client.lean import LeanClient

    try:
        settings = resolve()
    except SettingsError as e:
        die(prog, e.message, e.hint)
    return LeanClient(settings)


def run(prog: str, body: Callable[[], int]) -> NoReturn:
    """Run a shim's body; refusals and an unreachable controller become one error line."""
    try:
        code = body()
    except Usage as e:
        die(prog, str(e), status=e.status)
    except ApiError as e:
        hint = "check your token (GPUFLEET_TOKEN)" if e.status == 401 else None
        die(prog, f"{str(e).removeprefix(f'{e.status}: ')} ({e.status})", hint)
    except BrokenPipeError:  # squeue | head
        raise SystemExit(0) from None
    except OSError as e:  # refused, unreachable, timed out, a certificate not vouched for
        if "CERTIFICATE_VERIFY_FAILED" in str(e):
            die(
                prog,
                f"the gpufleet controller has a certificate this CA does not vouch for ({e})",
                "set GPUFLEET_CA to the cluster's CA certificate",
            )
        die(
            prog,
            f"cannot reach the gpufleet controller: {e}",
            "is it running? (gpufleet controller)",
        )
    sys.stdout.flush()
    raise SystemExit(code)


def iso(t: float | None, none: str = "Unknown") -> str:
    """Slurm's local timestamps: ``2025-03-01T12:00:00``."""
    return none if t is None else time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))


def hms(seconds: float | None) -> str:
    """sacct's ``[DD-]HH:MM:SS``."""
    if seconds is None:
        return "UNLIMITED"
    t = max(0, int(seconds))
    d, rest = divmod(t, 86400)
    h, rest = divmod(rest, 3600)
    m, sec = divmod(rest, 60)
    return f"{d}-{h:02d}:{m:02d}:{sec:02d}" if d else f"{h:02d}:{m:02d}:{sec:02d}"


def tres_mem(mib: float) -> str:
    """Memory as Slurm prints it in TRES, MinMemoryNode and its node records: to G while no
    precision is lost at half a unit (``16000M``, ``16G``, ``62.50G`` for 64000M, ``1.50G`` for
    1536M), two decimals when not whole."""
    num, unit = float(mib), 0
    while num >= 1024 and num % 512 == 0:
        num /= 1024
        unit += 1
    text = f"{int(num)}" if num == int(num) else f"{num:.2f}"
    return text + "MGTP"[unit]
