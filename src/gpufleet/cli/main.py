"""``gpufleet``: one entry point; each group of commands lives in its own module.

A module is imported only when one of its commands runs (or its own ``--help`` is asked for),
so that ``gpufleet jobs`` does not pay for the simulator, numpy, matplotlib or the server
(issue 12: everyday commands answer in a blink). ``COMMANDS`` names every command, in the order
``gpufleet --help`` lists them, with the module that holds it; the root's ``--help`` reads the
help written here for the heavy modules instead of importing them.
"""

from __future__ import annotations

import difflib
import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import typer
from typer import _click
from typer.core import TyperCommand, TyperGroup

from gpufleet.cli.optionfile import ConfigCommand


@dataclass(frozen=True)
class Lazy:
    """One command (or group) of a module that is imported only when it runs.

    ``attr``: a function (a command), a ``typer.Typer`` (a group), or, with ``register``, the
    module's ``register(app)`` that adds several commands (``jobs``, ``admin``). ``help``: what
    the root's ``--help`` shows without importing the module (None: import it for its help)."""

    name: str
    module: str
    attr: str
    help: str | None = None
    register: bool = False
    kwargs: dict[str, Any] = field(default_factory=dict)

    def build(self) -> dict[str, _click.Command]:
        """The module's click command of this name (a group for a typer app)."""
        obj = getattr(importlib.import_module(self.module), self.attr)
        host = typer.Typer()
        if self.register:
            obj(host)
            # build only this one: each costs a look at its signature and parameters
            host.registered_commands = [c for c in host.registered_commands if c.name == self.name]
            host.registered_groups = [g for g in host.registered_groups if g.name == self.name]
        elif isinstance(obj, typer.Typer):
            host.add_typer(obj, name=self.name, help=self.help, **self.kwargs)
        else:
            host.command(self.name, help=self.help, **self.kwargs)(obj)
        group = typer.main.get_group(host)
        assert isinstance(group, TyperGroup)
        return dict(group.commands)


_JOBS = ("submit", "jobs", "show", "cancel", "hold", "release", "logs", "accounting")
_ADMIN = ("nodes", "node", "drain", "resume", "queues", "queue", "audit", "accounts", "token")

COMMANDS: list[Lazy] = [
    # commands first, then groups: the order typer listed them in when all were imported
    Lazy(
        "plan",
        "gpufleet.cli.plan",
        "plan",
        "Size nodes, fabric, storage and power of a GPU cluster.",
    ),
    Lazy(
        "validate",
        "gpufleet.cli.validate",
        "validate",
        "Check a running cluster layer by layer; exit 1 on any FAIL.",
    ),
    Lazy(
        "demo",
        "gpufleet.cli.demo",
        "demo",
        "Run a real cluster on this machine (controller + 4 agents) with two teams' jobs.",
    ),
    Lazy(
        "demo-profiles",
        "gpufleet.cli.demo_profiles",
        "demo_profiles",
        "Schedule a sample workload through every scheduling profile.",
    ),
    # submit, jobs, show, cancel, logs, accounting: through gpufleet.client
    *(Lazy(n, "gpufleet.cli.jobs", "register", register=True) for n in _JOBS),
    # nodes, drain, resume, queues, audit (and the group token)
    *(Lazy(n, "gpufleet.cli.admin", "register", register=True) for n in _ADMIN if n != "token"),
    Lazy(
        "controller",
        "gpufleet.cli.serve",
        "controller",
        "Run the controller (REST API, scheduling, store).",
        kwargs={"cls": ConfigCommand},
    ),
    Lazy(
        "agent",
        "gpufleet.cli.serve",
        "agent",
        "Run a node agent (options: gpufleet agent --help-agent).",
        kwargs={
            "context_settings": {"allow_extra_args": True, "ignore_unknown_options": True},
            "add_help_option": False,
        },
    ),
    Lazy(
        "gateway",
        "gpufleet.cli.gateway",
        "gateway",
        "Run the services' proxy as its own process, following the leading controller "
        "(options: gpufleet gateway --help-gateway).",
        kwargs={
            "context_settings": {"allow_extra_args": True, "ignore_unknown_options": True},
            "add_help_option": False,
        },
    ),
    Lazy(
        "history",
        "gpufleet.cli.history",
        "app",
        "Export the cluster's job history as a trace the simulator replays.",
    ),
    Lazy("simulate", "gpufleet.cli.simulate", "app", "Replay workloads through the scheduler."),
    Lazy("bench", "gpufleet.cli.bench", "app", "Measure the scheduler's speed."),
    Lazy("spec", "gpufleet.cli.spec", "app", "Check cluster and job specs."),
    Lazy("doctor", "gpufleet.cli.doctor", "app", "Diagnose the cluster, a node or a job."),
    Lazy(
        "slurm-shims",
        "gpufleet.cli.shims",
        "app",
        "Install Slurm's commands (sbatch, srun, squeue, scancel, sinfo, sacct, scontrol) over "
        "gpufleet.",
    ),
    Lazy(
        "install",
        "gpufleet.cli.install",
        "install",
        "Install gpufleet into a venv every account can run (/opt/gpufleet), with its Slurm "
        "commands on PATH.",
    ),
    Lazy(
        "setup",
        "gpufleet.cli.setup",
        "app",
        "Write a host's config files and systemd units (/etc/gpufleet), idempotently.",
    ),
    Lazy("token", "gpufleet.cli.admin", "register", register=True),
    Lazy(
        "secret",
        "gpufleet.cli.secret",
        "app",
        "Create, list and remove job secrets (values from stdin or a file, never argv).",
    ),
    Lazy(
        "reserve",
        "gpufleet.cli.reserve",
        "app",
        "Reserve nodes for a window of time (maintenance): create, ls, show, rm.",
    ),
    Lazy(
        "maintain",
        "gpufleet.cli.maintain",
        "app",
        "Roll maintenance over nodes in batches (drain, run, validate, return; or roll back).",
    ),
    Lazy(
        "service",
        "gpufleet.cli.service",
        "app",
        "Run, list, show, update, scale and remove services.",
    ),
    Lazy(
        "desktop",
        "gpufleet.cli.desktop",
        "app",
        "Run, list, show and remove remote desktop sessions (a browser, your own token).",
    ),
    Lazy(
        "backup",
        "gpufleet.cli.backup",
        "app",
        "Back the store up while the controller runs; restore a backup into an empty store.",
    ),
]
_BY_NAME = {c.name: c for c in COMMANDS}


class LazyGroup(TyperGroup):
    """The root group: builds a command from its module the first time it is asked for."""

    _listing = False  # True while the root's --help lists the commands

    def list_commands(self, ctx: _click.Context) -> list[str]:
        return [*_BY_NAME, *(n for n in self.commands if n not in _BY_NAME)]

    def get_command(self, ctx: _click.Context, cmd_name: str) -> _click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        lazy = _BY_NAME.get(cmd_name)
        if lazy is None:
            return None
        if self._listing and lazy.help is not None:
            return TyperCommand(cmd_name, help=lazy.help)  # only its line in the listing
        for name, cmd in lazy.build().items():
            self.commands.setdefault(name, cmd)
        return self.commands.get(cmd_name)

    def resolve_command(
        self, ctx: _click.Context, args: list[str]
    ) -> tuple[str | None, _click.Command | None, list[str]]:
        try:
            return super().resolve_command(ctx, args)
        except _click.exceptions.UsageError as e:
            # typer suggests among the commands built so far; these are all of them
            matches = difflib.get_close_matches(args[0], self.list_commands(ctx)) if args else []
            if matches and "Did you mean" not in e.message:
                suggestions = ", ".join(repr(m) for m in matches)
                e.message = f"{e.message.rstrip('.')}. Did you mean {suggestions}?"
            raise

    def format_help(self, ctx: _click.Context, formatter: _click.HelpFormatter) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


app = typer.Typer(
    name="gpufleet",
    help="Plan, validate, schedule, monitor and diagnose a GPU cluster.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    cls=LazyGroup,
)


@app.callback()
def _options(
    ca: Path = typer.Option(
        None,
        "--ca",
        help="CA certificate to verify an https server with (env GPUFLEET_CA, config 'ca:'); "
        "give it before the command: gpufleet --ca FILE jobs",
    ),
) -> None:
    from gpufleet.cli import config  # here: only commands that talk to a server need it

    config.cli_ca = str(ca) if ca else None


if __name__ == "__main__":
    app()
