"""The ``gpufleet`` command line (typer); it talks to a server only through ``client``."""
