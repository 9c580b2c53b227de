"""``gpufleet jobs``'s output, and its fast path: the everyday listing answered without typer,
httpx or pydantic (issue 12: ≤ 150 ms).

``fast(argv)`` serves ``gpufleet jobs …`` when every word is one of ``jobs``'s own options
(``cli/jobs.py``; tests/unit/test_cli_listing.py keeps the two lists equal) and the listing
works out; anything else (``--help``, a value typer would refuse, a refusal, an unreachable
server, a job id not found) returns False before anything is printed, and the typer command
runs as before and says what it says. Both print through ``print_jobs``."""

from __future__ import annotations

import json
import os
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


def empty(all_states: bool) -> str:
    return "no jobs" + ("" if all_states else " (--all shows finished ones)")


def print_jobs(
    rows: list[Any], *, json_out: bool, fmt: str | None, noheader: bool, all_states: bool
) -> None:
    """The listing as ``gpufleet jobs`` prints it; ValueError names a bad ``-o`` field."""
    if json_out:
        plain = [r.model_dump(mode="json") if hasattr(r, "model_dump") else r for r in rows]
        sys.stdout.write(json.dumps(plain, indent=2, ensure_ascii=False) + "\n")  # as emit_json
    elif fmt is not None or noheader:
        from gpufleet.io import slurm_style

        text = slurm_style.render(fmt or slurm_style.DEFAULT_FORMAT, rows, header=not noheader)
        sys.stdout.write(text)
    else:
        from gpufleet.cli import output as out
        from gpufleet.io import jobs_table

        now = time.time()
        out.table(
            jobs_table.COLUMNS,
            [jobs_table.cells(j, now) for j in rows],
            right=jobs_table.RIGHT,
            empty=empty(all_states),
        )


def _printed_by_the_controller(
    c: Any, a: dict[str, Any], user: str | None, wanted: set[str] | None, all_states: bool
) -> bool:
    """The plain table to a pipe, made by the controller (``POST /jobs/table``: no JSON per
    job, issue 27); False where this command is to print it (a terminal, ``--json``, ``-o``,
    ``-h``, or the controller's 428 or any refusal, which the path over ``GET /jobs`` then
    meets and says as before)."""
    from gpufleet.cli import output as out
    from gpufleet.client.errors import ApiError

    if a.get("json_out") or a.get("fmt") is not None or a.get("noheader"):
        return False
    if sys.stdout.isatty() or os.environ.get("FORCE_COLOR") or os.environ.get("TTY_COMPATIBLE"):
        return False
    body = {"user": user, "queue": a.get("queue"), "job_ids": a.get("job_ids"),
            "names": a.get("names"), "limit": a.get("limit", 200), "all": all_states,
            "states": sorted(wanted) if wanted is not None else None,
            "width": out.console_width()}  # fmt: skip
    try:
        answer = c.call("POST", "/jobs/table", json_body=body)
    except ApiError:
        return False
    if answer["jobs"] == 0:
        out.note(empty(all_states))
    sys.stdout.write(answer["out"])
    return True


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
            from gpufleet.io import slurm_style

            wanted = slurm_style.states(state)
            all_states = all_states or selection.lists_ended(wanted)
        user = a.get("user")
        if a.get("me"):
            import getpass

            user = getpass.getuser()
        conf = settings.resolve(a.get("server"), a.get("token"))
        problems: list[str] = []
        with LeanClient(conf) as c:
            if _printed_by_the_controller(c, a, user, wanted, all_states):
                return True
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
            from gpufleet.io import slurm_style

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
