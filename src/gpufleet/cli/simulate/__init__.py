"""``gpufleet simulate replay|compare|whatif|sweep|fill|mixed``: workloads through the scheduler
core, offline. One module per command; the options they share are declared once (``flags``),
the workload they read and the replays they run are ``workload``'s, and ``console`` says how
they speak.

Bad input (a file, a row, a flag's value) prints one ``error:`` line on stderr and exits 2; a
sweep whose runs partly failed prints the others' results, one ``error:`` line per failed run,
and exits 1.
"""

import typer

from gpufleet.cli.simulate.compare import compare
from gpufleet.cli.simulate.console import OneLineUsageErrors
from gpufleet.cli.simulate.fill import fill
from gpufleet.cli.simulate.mixed import mixed
from gpufleet.cli.simulate.replay import replay
from gpufleet.cli.simulate.sweep import sweep
from gpufleet.cli.simulate.whatif import whatif

app = typer.Typer(no_args_is_help=True)
for name, command in (
    ("replay", replay),
    ("compare", compare),
    ("whatif", whatif),
    ("sweep", sweep),
    ("fill", fill),
    ("mixed", mixed),
):
    app.command(name, cls=OneLineUsageErrors)(command)

__all__ = ["app"]
