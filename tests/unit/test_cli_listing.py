"""``gpufleet jobs``'s fast path (cli/listing.py) reads exactly the typer command's options, and
leaves to typer whatever it does not serve. (Its output against a live controller, beside
typer's: tests/e2e/test_slurm_shims_live.py.)"""

from __future__ import annotations

import typer

from gpufleet.cli import jobs, listing


def test_the_fast_paths_options_are_the_commands() -> None:
    app = typer.Typer()
    jobs.register(app)
    group = typer.main.get_group(app)
    command = group.commands["jobs"]
    typer_opts = {
        opt: (p.name, not getattr(p, "is_flag", False))
        for p in command.params
        for opt in p.opts
        if opt.startswith("-")
    }
    assert typer_opts == listing.OPTIONS


def test_what_it_leaves_to_typer() -> None:
    for argv in (
        ["--help"],
        ["--bogus"],
        ["-u"],  # a value missing: typer's message
        ["--limit", "0"],
        ["--limit", "x"],
        ["--me=yes"],
        ["-ah"],  # bundled short flags
        ["-uana"],  # an attached value
        ["pos"],
    ):
        assert listing._parse(argv) is None, argv
    assert listing._parse(["-u", "ana", "--all", "--limit=5", "-o", "%i %T"]) == {
        "user": "ana",
        "all_states": True,
        "limit": 5,
        "fmt": "%i %T",
    }
