"""``gpufleet submit``'s fast path: flags and a command (``gpufleet submit --gpus 1 -- python
train.py``) submitted without typer, httpx or pydantic (issue 27: ≤ 40 ms, Slurm's pace).

``fast(argv)`` serves the command line when every option before the command is one of
``OPTIONS`` (the typer command's own names: tests/unit/test_cli_submit_fast.py keeps them so)
with a value it reads as typer would, and the command is not a file (an #SBATCH script, a
typo of one). Anything else (``-f``, a script, ``--dry-run``, ``--mem`` and ``--time``, whose
readers import the #SBATCH reader, a value typer would refuse) returns False before anything is
sent, and the typer command runs as before. The controller checks the spec as the typer command
does before sending (``JobSpec.from_dict``); a refusal (4xx: nothing was submitted) returns
False too, and the typer command says it in its words."""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # no typing at run time: a command starts on few imports (issue 27)
if TYPE_CHECKING:
    from typing import Any

# submit's options served here: the name of its parameter (cli/jobs/submit.py), and its kind
OPTIONS: dict[str, tuple[str, str]] = {
    "--name": ("name", "str"), "-J": ("name", "str"),
    "--queue": ("queue", "str"), "-p": ("queue", "str"),
    "--workers": ("workers", "int1"),
    "--gpus": ("gpus", "int0"),  # sbatch's: the job's GPUs in all
    "--gpu-share": ("gpu_share", "share"),
    "--cpus": ("cpus", "float"), "-c": ("cpus", "float"),
    "--gpu-model": ("gpu_model", "list"),
    "--priority": ("priority", "int"),
    "--preemptible": ("preemptible", "true"), "--no-preemptible": ("preemptible", "false"),
    "--dataset": ("dataset", "str"),
    "--retries": ("retries", "int0"),
    "--requeue": ("requeue", "true"), "--no-requeue": ("requeue", "false"),
    "--env": ("env", "list"),
    "--user": ("user", "str"),
    "--idempotency-key": ("idempotency_key", "str"),
    "--json": ("json_out", "true"),
    "--server": ("server", "str"),
    "--token-file": ("token", "str"),
}  # fmt: skip
_FLAGS = ("name", "queue", "workers", "gpus", "gpu_share", "cpus", "gpu_model", "priority",
          "preemptible", "dataset", "retries", "env", "requeue")  # fmt: skip


def _value(kind: str, text: str) -> Any:
    """``text`` as typer reads an option of this kind; None: typer's to read (or refuse)."""
    if kind in ("str", "list"):
        return text
    if kind.startswith("int"):
        digits = text.removeprefix("-") if kind == "int" else text
        if not digits.isdigit() or not digits.isascii():
            return None
        n = int(text)
        return n if kind == "int" or n >= int(kind[3]) else None
    try:
        x = float(text)
    except ValueError:
        return None
    if x != x or x in (float("inf"), float("-inf")):
        return None
    return x if kind == "float" or 0.001 <= x <= 1.0 else None


def parse(argv: list[str]) -> dict[str, Any] | None:
    """The options as typer would read them and the command; None: typer's to read."""
    a: dict[str, Any] = {}
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        word = argv[i]
        if word == "--":
            i += 1
            break
        name, eq, text = word.partition("=") if word.startswith("--") else (word, "", "")
        if name not in OPTIONS:
            return None
        dest, kind = OPTIONS[name]
        if kind in ("true", "false"):
            if eq:
                return None
            a[dest] = kind == "true"
        else:
            if not eq:
                if i + 1 >= len(argv):
                    return None
                i += 1
                text = argv[i]
            value = _value(kind, text)
            if value is None:
                return None
            a[dest] = [*a.get(dest, []), value] if kind == "list" else value
        i += 1
    if any(not k or not eq for k, eq, _ in (e.partition("=") for e in a.get("env", []))):
        return None  # typer's message: expected KEY=VALUE
    command = argv[i:]
    if not command or os.path.exists(command[0]) or command[0].endswith((".sbatch", ".slurm")):
        return None  # nothing to run, or a file: a script (or the typo of one) is typer's
    a["command"] = command
    return a


def fast(argv: list[str]) -> bool:
    """Submit ``gpufleet submit ARGV`` here; False: nothing was submitted, typer runs it."""
    a = parse(argv)
    if a is None:
        return False
    from gpufleet.base.settings import SettingsError, resolve
    from gpufleet.cli.submit_flags import flag_overrides, merge_spec
    from gpufleet.client.errors import ApiError
    from gpufleet.client.lean import LeanClient

    flags: dict[str, Any] = {k: a.get(k) for k in _FLAGS}
    flags["strict_topology"], flags["topology"], flags["mem"], flags["time_limit"] = (
        False, None, None, None)  # fmt: skip
    spec: dict[str, Any] = {"name": os.path.basename(a["command"][0]), "command": a["command"]}
    from gpufleet.model.errors import SpecError

    try:
        merge_spec(spec, flag_overrides(**flags))
    except SpecError:
        return False  # --gpus that does not divide among the workers: typer's to say
    if a.get("user"):
        spec["user"] = a["user"]
    try:
        conf = resolve(a.get("server"), a.get("token"))
        c = LeanClient(conf)
    except (SettingsError, ValueError):
        return False  # typer's command says what to set
    try:
        with c:
            ids = c.submit(spec, idempotency_key=a.get("idempotency_key"))
    except ConnectionRefusedError:
        return False  # nothing was sent: typer's command says so, in its words
    except ApiError as e:
        if e.status < 500:
            return False  # refused, nothing submitted: typer's command says why
        _fail(f"{str(e).removeprefix(f'{e.status}: ')} ({e.status})",
              "the server failed: see the controller's log")  # fmt: skip
    except TimeoutError:  # sent, perhaps submitted: not to be sent again
        _fail(f"the gpufleet server at {conf.server} did not answer in time", "retry later")
    except OSError as e:
        _fail(f"talking to {conf.server} failed: {e}", "check --server")
    if a.get("json_out"):
        import json  # only for --json: json imports re (issue 27)

        sys.stdout.write(json.dumps({"ids": ids}, indent=2, ensure_ascii=False) + "\n")
    else:
        print(f"Submitted job {ids[0]}" if len(ids) == 1 else
              f"Submitted {len(ids)} jobs: {' '.join(ids)}")  # fmt: skip
    return True


def _fail(message: str, hint: str) -> None:
    """What ``cli/config.py``'s ``connect`` says of a failure after the request was sent."""
    from gpufleet.cli.output import error

    error(message, hint)
    raise SystemExit(1)
