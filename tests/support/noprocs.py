"""``--no-processes`` (``make test-fast``): the edit loop's tier, which starts no process.

A test that starts one (subprocess, fork, exec, spawn, os.system: Python's audit events for
each) is skipped, saying what it started; ``make test`` runs it. The start itself is refused
(it raises), on whichever thread tried it; the test's report then says "skipped" whatever
the refusal did to the rest of the test. So the tier needs no list of tests to keep up to
date, and a test never becomes a mock to get into it."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest

EVENTS = frozenset(
    {
        "subprocess.Popen",
        "os.fork",
        "os.forkpty",
        "os.posix_spawn",
        "os.exec",
        "os.spawn",
        "os.system",
        "pty.spawn",
    }
)


class NoProcesses:
    """The plugin: an audit hook that refuses process starts, and the reports it rewrites."""

    def __init__(self) -> None:
        self.started: str | None = None  # the first start the current test tried

    def refuse(self, event: str, args: tuple[Any, ...]) -> None:
        if event in EVENTS:
            what = args[1] if event == "subprocess.Popen" and len(args) > 1 else args[:1]
            shown = repr(what)
            shown = shown if len(shown) <= 120 else shown[:117] + "..."
            why = f"starts a process ({event} {shown}): `make test` runs it"
            self.started = self.started or why
            pytest.skip(why)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Iterator[None]:
        rep: pytest.TestReport = yield  # type: ignore[misc]
        if self.started is not None and (rep.failed or (rep.passed and rep.when == "call")):
            rep.outcome = "skipped"
            rep.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: {self.started}")
            rep.wasxfail = ""  # type: ignore[attr-defined]
            del rep.wasxfail  # type: ignore[attr-defined]
        if call.when == "teardown":
            self.started = None
        return rep  # type: ignore[return-value]


def install(config: pytest.Config) -> None:
    """From now on in this interpreter, starting a process skips the test that tries (an
    audit hook cannot be removed: call it only for a run that is all in this tier)."""
    plugin = NoProcesses()
    sys.addaudithook(plugin.refuse)
    config.pluginmanager.register(plugin, "no-processes")
