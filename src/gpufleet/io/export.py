"""What sbatch sends of the submitter's environment (``--export``, ``--export-file``) and where
the batch script starts (``--chdir``), worked out at submit from the submit directory and the
environment given (the CLI passes its own ``os.environ`` and cwd).

As sbatch: ``ALL`` (the default) is the whole environment; ``NONE`` only its ``SLURM_*``
variables (Slurm then loads the user's login environment on the node: gpufleet's agent gives
a task the account's login-like base, PATH, HOME, USER, SHELL, and these go over it); a list
``A,B=v`` is what ``NONE`` gives plus the variables named (from the environment) or set (to
the value); ``ALL,B=v`` the whole environment plus those. ``--export-file`` adds ``NAME=value``
definitions separated by NUL characters (by newlines if the file has none). sbatch's own
``SLURM_SUBMIT_DIR``, ``SLURM_SUBMIT_HOST`` and ``SLURM_EXPORT_ENV`` are set in every case, and
``SLURM_GET_USER_ENV=1`` with ``NONE``.

Never exported: ``GPUFLEET_*`` variables (the submitter's gpufleet token and server address
are credentials, not the job's). The job's own ``env`` (YAML, API, --env) and the launch's
variables (``SLURM_JOB_ID`` …) go over what is captured here, on the node."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from gpufleet.model.errors import SpecError
from gpufleet.model.validate import MAX_ENV, MAX_ENV_VALUE, MAX_ITEMS, text_problem

NEVER_PREFIX = "GPUFLEET_"
# a comma starts the next item only before a NAME, NAME=… or the end (a value may hold commas)
_ITEM = re.compile(r",(?=[A-Za-z_][A-Za-z0-9_]*(?:=|,|$))")


def _kept(name: str) -> bool:
    return not name.startswith(NEVER_PREFIX)


def capture(
    export: str | None,
    environ: Mapping[str, str],
    *,
    submit_dir: str,
    submit_host: str,
    export_file: str | None = None,
) -> dict[str, str]:
    """The environment to send with the job (``export``: sbatch's --export text, None: ALL;
    ``export_file``: the text of the --export-file)."""
    text = (export or "ALL").strip()
    items = [i for i in _ITEM.split(text) if i]
    words = {i.upper() for i in items if "=" not in i}
    if "ALL" in words:
        env = {k: v for k, v in environ.items() if _kept(k)}
    else:
        env = {k: v for k, v in environ.items() if k.startswith("SLURM_")}
    for item in items:
        name, eq, value = item.partition("=")
        if not eq and name.upper() in ("ALL", "NONE"):
            continue
        if not name or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise SpecError(f"--export: {item!r} is not NAME or NAME=value", field="--export")
        if not _kept(name):
            raise SpecError(
                f"--export: {name} is never exported (gpufleet's own credentials)",
                field="--export",
            )
        if eq:
            env[name] = value
        elif name in environ:
            env[name] = environ[name]
    if export_file is not None:
        env.update(read_export_file(export_file))
    env["SLURM_SUBMIT_DIR"] = submit_dir
    env["SLURM_SUBMIT_HOST"] = submit_host
    if export is not None:
        env["SLURM_EXPORT_ENV"] = export
    if text.upper() == "NONE":  # as sbatch: the node gives the user's login environment
        env["SLURM_GET_USER_ENV"] = "1"
    return env


def read_export_file(text: str) -> dict[str, str]:
    sep = "\0" if "\0" in text else "\n"
    out: dict[str, str] = {}
    for n, item in enumerate(text.split(sep), start=1):
        if not item.strip():
            continue
        name, eq, value = item.partition("=")
        if not eq or not name or not _kept(name):
            what = "is never exported" if eq and name else "is not NAME=value"
            raise SpecError(f"definition {n}: {item[:60]!r} {what}", field="--export-file")
        out[name] = value
    return out


def workdir(chdir: str | None, submit_dir: str) -> str:
    """sbatch's --chdir: relative to the submit directory; the submit directory without it."""
    if not chdir:
        return submit_dir
    return str(Path(submit_dir, chdir)) if not chdir.startswith("/") else chdir


def submit_context(
    chdir: str | None,
    export: str | None,
    export_file: str | None,
    *,
    environ: Mapping[str, str],
    cwd: str,
    host: str,
) -> tuple[str, dict[str, str], list[str]]:
    """What a batch job takes from where it is submitted, as sbatch: (the working directory,
    the environment to send, warnings); ``gpufleet submit`` and the ``sbatch`` shim both call
    this. Over gpufleet's bounds: a SpecError that says what to export instead."""
    text = None
    if export_file is not None:
        path = (
            f"/dev/fd/{export_file}"
            if (export_file.isascii() and export_file.isdigit())
            else export_file
        )
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise SpecError(f"cannot read it: {e}", field="--export-file") from None
    env = capture(export, environ, submit_dir=cwd, submit_host=host, export_file=text)
    warnings = []
    for k in [k for k, v in env.items() if text_problem(k + v, len(k) + len(v))]:
        warnings.append(f"not exported: {k} (its value is not valid text)")
        del env[k]
    size = sum(len(k) + len(v) for k, v in env.items())
    if size > MAX_ENV or len(env) > MAX_ITEMS:
        raise SpecError(
            f"the environment to export is {len(env)} variables, {size} characters: over "
            f"gpufleet's bound ({MAX_ITEMS} variables, {MAX_ENV} characters); export less "
            "(--export=NONE, or --export=VAR1,VAR2)",
            field="--export",
        )
    for k, v in env.items():
        if len(v) > MAX_ENV_VALUE:
            raise SpecError(
                f"{k} is {len(v)} characters, over gpufleet's {MAX_ENV_VALUE} for one variable; "
                f"unset it or leave it out (--export=NONE, or a list without it)",
                field="--export",
            )
    return workdir(chdir, cwd), env, warnings
