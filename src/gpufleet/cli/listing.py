"""``gpufleet jobs``'s output, and its fast path: the everyday listing answered without typer,
httpx or pydantic (issue 12: ≤ 150 ms).

``fast(argv)`` serves ``gpufleet jobs …`` when every word is one of ``jobs``'s own options
(``cli/jobs.py``; tests/unit/test_cli_listing.py keeps the two lists equal) and the listing
works out; anything else (``--help``, a value typer would refuse, a refusal, an unreachable
server, a job id not found) returns False before anything is printed, and the typer command
runs as before and says what it says. Both print through ``print_jobs``."""

from __future__ import annotations

import json
import sys
import time

TYPE_CHECKING = False  # no typing at run time: a command starts on few imports (issue 27)
if TYPE_CHECKING:
    from typing import Any

# jobs's options: the name its parameter has in cli/jobs.py, and whether it takes a value
OPTIONS: dict[str, tuple[str, bool]] = {
    "-u": ("user", True), "--user": ("user", True),
    "-p": ("queue", True), "--queue": ("queue", True),
    "-t": ("state", True), "--state": ("state", True),
    "-j": ("job_ids", True), "--jobs": ("job_ids", True),
    "-n": ("names", True), "--name": ("names", True),
    "--me": ("me", False),
    "-o": ("fmt", True), "--format": ("fmt", True),
    "-h": ("noheader", False), "--noheader": ("noheader", False),
    "-a": ("all_states", False), "--all": ("all_states", False),
    "--limit": ("limit", True),
    "--json": ("json_out", False),
    "--server": ("server", True),
    "--token-file": ("token", True),
}  # fmt: skip


def gpus(j: Any) -> str:
    from gpufleet.cli import output as out  # rich: only for the table (issue 12)

    if j.workers > 1:
        return f"{out.number(j.gpus)} ({j.workers}×{out.number(j.gpus / j.workers)})"
    return out.number(j.gpus)


def run_time(j: Any, now: float) -> str:
    from gpufleet.cli import output as out

    if j.start_time is None:
        return "-"
    end = j.end_time if j.end_time is not None and j.end_time >= j.start_time else now
    return out.duration(end - j.start_time)


def nodes(j: Any) -> str:
    return ",".join(dict.fromkeys(p.node for p in j.placement))


def where(j: Any) -> str:
    if j.state == "PENDING" and j.reason is not None:
        return f"({j.reason.code}) {j.reason.message}"
    return nodes(j)


def print_jobs(
    rows: list[Any], *, json_out: bool, fmt: str | None, noheader: bool, all_states: bool
) -> None:
    """The listing as ``gpufleet jobs`` prints it; ValueError names a bad ``-o`` field."""
    if json_out:
        plain = [r.model_dump(mode="json") if hasattr(r, "model_dump") else r for r in rows]
        sys.stdout.write(json.dumps(plain, indent=2, ensure_ascii=False) + "\n")  # as emit_json
    elif fmt is not None or noheader:
        from gpufleet.cli import slurm_style

        text = slurm_style.render(fmt or slurm_style.DEFAULT_FORMAT, rows, header=not noheader)
        sys.stdout.write(text)
    else:
        from gpufleet.cli import output as out

        now = time.time()
        out.table(
            ["JOBID", "NAME", "USER", "QUEUE", "STATE", "GPUS", "TIME", "NODES(REASON)"],
            [
                [j.id, j.name, j.user, j.queue, j.state, gpus(j), run_time(j, now), where(j)]
                for j in rows
            ],
            right=["GPUS", "TIME"],
            empty="no jobs" + ("" if all_states else " (--all shows finished ones)"),
        )


def _parse(argv: list[str]) -> dict[str, Any] | None:
    """The options as typer would read them, or None for anything this path leaves to typer."""
    a: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        word = argv[i]
        name, eq, value = word.partition("=") if word.startswith("--") else (word, "", "")
        if name not in OPTIONS:
            return None
        dest, takes = OPTIONS[name]
        if not takes:
            if eq:
                return None
            a[dest] = True
        elif eq:
            a[dest] = value
        elif i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            a[dest] = argv[i + 1]
            i += 1
        else:
            return None
        i += 1
    if "limit" in a:
        if not a["limit"].isdigit() or not 1 <= int(a["limit"]) <= 10000:
            return None
        a["limit"] = int(a["limit"])
    return a


def fast(argv: list[str]) -> bool:
    """Serve ``gpufleet jobs ARGV`` here; False: nothing was printed, typer runs it."""
    a = _parse(argv)
    if a is None:
        return False
    from gpufleet.base import settings
    from gpufleet.cli import selection
    from gpufleet.client.errors import ApiError
    from gpufleet.client.lean import LeanClient

    state = a.get("state")
    all_states = bool(a.get("all_states"))
    try:
        wanted = None
        if state is not None:
            from gpufleet.cli import slurm_style

            wanted = slurm_style.states(state)
            all_states = all_states or selection.lists_ended(wanted)
        user = a.get("user")
        if a.get("me"):
            import getpass

            user = getpass.getuser()
        conf = settings.resolve(a.get("server"), a.get("token"))
        problems: list[str] = []
        with LeanClient(conf) as c:
            rows, failed = selection.select(
                c,
                user=user,
                queue=a.get("queue"),
                wanted=wanted,
                job_ids=a.get("job_ids"),
                names=a.get("names"),
                limit=a.get("limit", 200),
                all_states=all_states,
                report=problems.append,
                brief=not a.get("json_out"),  # --json prints each job whole
            )
        if failed or problems:
            return False
        if a.get("fmt") is not None:
            from gpufleet.cli import slurm_style

            slurm_style.render(a["fmt"], [], header=True)  # a bad field: typer's message
    except (settings.SettingsError, ApiError, OSError, ValueError):
        return False
    print_jobs(
        rows,
        json_out=bool(a.get("json_out")),
        fmt=a.get("fmt"),
        noheader=bool(a.get("noheader")),
        all_states=all_states,
    )
    return True
