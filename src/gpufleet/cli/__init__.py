"""The ``gpufleet`` command line (typer); it talks to a server only through ``client``."""

import sys

# httpx imports its own command-line tool (click, pygments, rich's progress and syntax: some
# 35 ms of every command) unless that is missing, in which case ``httpx.main`` only says so.
# gpufleet never runs it, so it is marked missing here, before any command module imports httpx
# (issue 12); once httpx is imported this changes nothing.
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]  # None: "not importable"
