"""How the ``simulate`` commands speak: tables on stdout, ``error:`` and ``warning:`` lines on
stderr, and refused input (a file, a row, a flag's value, a missing flag) as one ``error:`` line
and exit code 2, never a traceback."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.text import Text
from typer.core import TyperCommand

from gpufleet.core.controller import ControllerError
from gpufleet.model.errors import SpecError
from gpufleet.scheduler.framework import ProfileError


def stdout() -> Console:
    tty = sys.stdout.isatty()
    # piped output keeps whole table rows instead of wrapping them at 80 columns
    return Console(file=sys.stdout, highlight=False, width=None if tty else 200)


def stderr() -> Console:
    return Console(file=sys.stderr, highlight=False, soft_wrap=True)


def fail(message: str) -> NoReturn:
    stderr().print(Text("error: ", style="bold red") + Text(message))
    raise typer.Exit(2)


def warn(message: str) -> None:
    stderr().print(Text("warning: ", style="yellow") + Text(message))


class OneLineUsageErrors(TyperCommand):
    """A bad or missing flag is one ``error:`` line and exit 2, like any other bad input."""

    def make_context(
        self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any
    ) -> Any:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except Exception as exc:
            # click's UsageError (typer vendors its own copy): exit code 2 and a message
            if getattr(exc, "exit_code", None) != 2 or not hasattr(exc, "format_message"):
                raise
            fail(f"{exc.format_message()} (see: gpufleet simulate {info_name} --help)")


@contextmanager
def refusals() -> Iterator[None]:
    """Refused input becomes one line and exit code 2, never a traceback."""
    try:
        yield
    except (SpecError, ProfileError, ControllerError) as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": "))
