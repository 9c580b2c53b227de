"""What every probe shares: the result line, commands run with a deadline, the clock."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

MARKER = "GPUFLEET-PROBE"
# A testing hook, not a feature: seconds added to every clock reading of a probe, so that a
# test can fake a node whose clock is off without touching the real clock. gpufleet's own
# tests give it to one agent's tasks (gpufleet-agent --task-env).
TIME_OFFSET_ENV = "GPUFLEET_PROBE_TIME_OFFSET_S"

Result = dict[str, Any]


def now() -> float:
    """``time.time()`` as this probe sees it (shifted by ``$GPUFLEET_PROBE_TIME_OFFSET_S``)."""
    try:
        offset = float(os.environ.get(TIME_OFFSET_ENV, "0") or 0)
    except ValueError:
        offset = 0.0
    return time.time() + offset


def emit(result: Result) -> None:
    """The one line the caller looks for in the job's stdout."""
    sys.stdout.write(MARKER + " " + json.dumps(result, sort_keys=True, default=str) + "\n")
    sys.stdout.flush()


def parse_line(line: str) -> Result | None:
    """The result of a ``GPUFLEET-PROBE {json}`` line; None for any other line."""
    line = line.strip()
    if not line.startswith(MARKER + " "):
        return None
    try:
        value = json.loads(line[len(MARKER) + 1 :])
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def which(name: str) -> str | None:
    return shutil.which(name)


def run(cmd: Sequence[str], timeout: float = 30.0, env: dict[str, str] | None = None) -> Result:
    """Run ``cmd``; never raises. ``rc`` is None when it could not run or ran out of time."""
    out: Result = {"cmd": " ".join(cmd), "rc": None, "out": "", "err": "", "error": ""}
    try:
        p = subprocess.run(
            list(cmd),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
            env=env,
            check=False,
        )
    except FileNotFoundError:
        out["error"] = f"{cmd[0]}: not found"
        return out
    except subprocess.TimeoutExpired:
        out["error"] = f"{cmd[0]}: no answer within {timeout:g} s"
        return out
    except OSError as e:
        out["error"] = f"{cmd[0]}: {e}"
        return out
    out["rc"] = p.returncode
    out["out"] = p.stdout.decode(errors="replace")
    out["err"] = p.stderr.decode(errors="replace")[-4000:]
    return out


def read_text(path: str, limit: int = 1 << 16) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode(errors="replace")
    except OSError:
        return None


def guarded(name: str, fn: Callable[[], Result]) -> Result:
    """``fn()``, or ``{"error": ...}`` if it raised: one broken section never hides the rest."""
    try:
        return fn()
    except Exception as e:  # a probe reports what went wrong instead of dying
        tail = traceback.format_exc().strip().splitlines()[-3:]
        return {"error": f"{name}: {type(e).__name__}: {e}", "trace": tail}


def rank_env() -> Result:
    """The launcher variables gpufleet gives every rank."""
    e = os.environ
    return {
        "rank": int(e.get("RANK", "0") or 0),
        "world": int(e.get("WORLD_SIZE", "1") or 1),
        "master_addr": e.get("MASTER_ADDR", "127.0.0.1"),
        "master_port": int(e.get("MASTER_PORT", "29500") or 29500),
        "job": e.get("GPUFLEET_JOB_ID", ""),
        "cuda_visible_devices": e.get("CUDA_VISIBLE_DEVICES"),
    }


def split_devices(value: str | None) -> list[str]:
    """``CUDA_VISIBLE_DEVICES`` as a list (empty string: no device)."""
    if value is None:
        return []
    return [x.strip() for x in value.split(",") if x.strip()]
