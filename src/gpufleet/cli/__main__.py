"""``python -m gpufleet.cli``: the ``gpufleet`` command, as its console script runs it."""

from gpufleet.cli.entry import main

main()
